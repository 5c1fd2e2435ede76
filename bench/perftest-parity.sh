#!/usr/bin/env bash
# Benchmark (not a test): do stock perftest on the drop-in libibverbs.so.1 and `uroce bench`
# report the same bandwidth and latency for the same test in the same run? (issue 7)
#
#   bench/perftest-parity.sh [ROUNDS]      # default 3 rounds, alternating stock / uroce
#
# For each test (ib_write_bw 64 KiB, ib_send_bw 64 KiB, ib_write_lat 2 B, ib_read_lat 2 B),
# each round runs the stock tool client/server pair and then the `uroce bench` pair, as two
# processes with their own embedded devices on $PARITY_ADDR_A/$PARITY_ADDR_B (default
# 127.0.0.1 / 127.0.0.2). It prints every figure, the median of each side, and the ratio
# uroce/stock; it exits 1 if any median ratio is outside 0.9–1.1. The machine is shared and
# noisy, so rounds alternate and medians are compared: run it on a quiet machine.
# Needs perftest (installed as root) and builds uroce + the compat libraries in release mode.
set -uo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
A=${PARITY_ADDR_A:-127.0.0.1}
B=${PARITY_ADDR_B:-127.0.0.2}
port=${PARITY_PORT:-18700}

if ! command -v ib_write_bw >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq perftest >/dev/null 2>&1 \
            || { echo "SKIPPED: perftest could not be installed"; exit 0; }
    else
        echo "SKIPPED: perftest is not installed and this is not root"; exit 0
    fi
fi
scripts/build-compat.sh >/dev/null || { echo "build-compat failed"; exit 1; }
cargo build -q --release --bin uroce || { echo "cargo build failed"; exit 1; }
uroce="$(pwd)/${CARGO_TARGET_DIR:-target}/release/uroce"
compat="$(pwd)/target/compat"
work=$(mktemp -d)
trap 'rm -rf "$work"; kill $(jobs -p) 2>/dev/null' EXIT

wait_listen() {
    for _ in $(seq 200); do
        ss -ltn "sport = :$1" 2>/dev/null | grep -q LISTEN && return 0
        sleep 0.05
    done
    return 1
}

# run_pair KIND TOOL ARGS... ; prints the client's output file path
run_pair() {
    local kind=$1 tool=$2; shift 2
    port=$((port + 1))
    local out="$work/$kind-$tool-$port.txt"
    if [ "$kind" = stock ]; then
        UROCE_DEVICES=uroce0=$A LD_LIBRARY_PATH=$compat "$tool" -x 0 -p "$port" "$@" \
            >"$work/srv.txt" 2>&1 &
        local srv=$!
        wait_listen "$port" || { echo "server did not listen" >&2; }
        UROCE_DEVICES=uroce1=$B LD_LIBRARY_PATH=$compat "$tool" -x 0 -p "$port" "$@" "$A" \
            >"$out" 2>&1
    else
        local t=${tool#ib_}
        UROCE_DEVICES=uroce0=$A "$uroce" bench "$t" -x 0 -p "$port" "$@" >"$work/srv.txt" 2>&1 &
        local srv=$!
        wait_listen "$port" || { echo "server did not listen" >&2; }
        UROCE_DEVICES=uroce1=$B "$uroce" bench "$t" -x 0 -p "$port" "$@" "$A" >"$out" 2>&1
    fi
    wait "$srv" 2>/dev/null
    echo "$out"
}

# The figure of a result line: bw tests -> BW average [MB/sec] (4th field);
# lat tests -> t_avg [usec] (6th field).
figure() {
    local file=$1 col=$2
    awk -v c="$col" '$1 ~ /^[0-9]+$/ && NF >= c && $2 ~ /^[0-9]+$/ { v = $c } END { print v }' "$file"
}

median() { sort -g | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)] }'; }

status=0
for spec in "ib_write_bw:4:-s 65536 -n 5000" "ib_send_bw:4:-s 65536 -n 5000" \
            "ib_write_lat:6:-s 2 -n 5000" "ib_read_lat:6:-s 2 -n 5000"; do
    tool=${spec%%:*}; rest=${spec#*:}; col=${rest%%:*}; args=${rest#*:}
    stock=(); ours=()
    for r in $(seq "$rounds"); do
        # shellcheck disable=SC2086
        f=$(run_pair stock "$tool" $args); s=$(figure "$f" "$col")
        # shellcheck disable=SC2086
        f=$(run_pair uroce "$tool" $args); u=$(figure "$f" "$col")
        echo "$tool round $r: stock=$s uroce=$u"
        [ -n "$s" ] && stock+=("$s"); [ -n "$u" ] && ours+=("$u")
    done
    ms=$(printf '%s\n' "${stock[@]}" | median); mu=$(printf '%s\n' "${ours[@]}" | median)
    if [ -z "$ms" ] || [ -z "$mu" ]; then
        echo "$tool: no result (stock '${ms}', uroce '${mu}')"; status=1; continue
    fi
    ratio=$(awk -v u="$mu" -v s="$ms" 'BEGIN { printf "%.3f", u / s }')
    verdict=$(awk -v r="$ratio" 'BEGIN { print (r >= 0.9 && r <= 1.1) ? "within 10%" : "OUTSIDE 10%" }')
    unit=$([ "$col" = 4 ] && echo "MB/s avg" || echo "usec avg")
    echo "$tool: median stock $ms, uroce $mu ($unit), uroce/stock = $ratio: $verdict"
    [ "$verdict" = "within 10%" ] || status=1
done
exit $status
