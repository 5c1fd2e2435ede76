#!/usr/bin/env bash
# Benchmark (not a test): do stock perftest on the drop-in libibverbs.so.1 and `uroce bench`
# report the same bandwidth and latency for the same test in the same run?
#
#   bench/perftest-parity.sh [ROUNDS]      # default 3 rounds, alternating stock / uroce
#   PARITY_ONLY=atomic_bw bench/perftest-parity.sh 9     # only the tests matching a regex
#
# For each of the eight tests (bw: 64 KiB, atomics 8 B, message rate; lat: 2 B, atomics 8 B,
# t_typical and t_avg),
# each round runs the stock tool client/server pair and the `uroce bench` pair (stock first in
# odd rounds, uroce first in even ones), as two
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
# Pin the server process to one core and the client to another (each process's application
# thread and engine share their core). Unpinned, two processes' four threads wander over two
# cores and the figures of either stack vary by ±50 % from round to round on a 2-core VM;
# pinned, by about ±10 %. PARITY_PIN=0 turns it off.
if [ "${PARITY_PIN:-1}" != 0 ] && [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then
    pin_srv=(taskset -c 1); pin_cli=(taskset -c 0)
else
    pin_srv=(); pin_cli=()
fi

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
        UROCE_DEVICES=uroce0=$A LD_LIBRARY_PATH=$compat "${pin_srv[@]}" "$tool" -x 0 -p "$port" "$@" \
            >"$work/srv.txt" 2>&1 &
        local srv=$!
        wait_listen "$port" || { echo "server did not listen" >&2; }
        UROCE_DEVICES=uroce1=$B LD_LIBRARY_PATH=$compat "${pin_cli[@]}" "$tool" -x 0 -p "$port" "$@" "$A" \
            >"$out" 2>&1
    else
        local t=${tool#ib_}
        UROCE_DEVICES=uroce0=$A "${pin_srv[@]}" "$uroce" bench "$t" -x 0 -p "$port" "$@" >"$work/srv.txt" 2>&1 &
        local srv=$!
        wait_listen "$port" || { echo "server did not listen" >&2; }
        UROCE_DEVICES=uroce1=$B "${pin_cli[@]}" "$uroce" bench "$t" -x 0 -p "$port" "$@" "$A" >"$out" 2>&1
    fi
    wait "$srv" 2>/dev/null
    echo "$out"
}

# The figure of a result line: bw tests -> MsgRate [Mpps] (5th field: the average bandwidth
# divided by the message size, printed with six decimals where BW average has two);
# lat tests -> t_typical [usec] (5th field, perftest's median) and t_avg [usec] (6th field),
# each compared on its own.
figure() {
    local file=$1 col=$2
    awk -v c="$col" '$1 ~ /^[0-9]+$/ && NF >= c && $2 ~ /^[0-9]+$/ { v = $c } END { print v }' "$file"
}

# unit TOOL COLUMN
unit() {
    case $1:$2 in
        *_bw:5) echo "MsgRate Mpps";; *_lat:5) echo "t_typical usec";; *) echo "t_avg usec";;
    esac
}

median() { sort -g | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)] }'; }

status=0
# TOOL:COLUMNS:ARGS — COLUMNS: the figures compared (see figure()); a lat test yields
# t_typical and t_avg from the same run.
# Bandwidth runs last about 3 s each (a run under a second moved by ±20 % from round to
# round on the 2-core VM, as scheduler slices of the two processes fell).
for spec in "ib_write_bw:5:-s 65536 -n 20000" "ib_read_bw:5:-s 65536 -n 8000" \
            "ib_send_bw:5:-s 65536 -n 20000" "ib_atomic_bw:5:-n 50000" \
            "ib_write_lat:5,6:-s 2 -n 20000" "ib_read_lat:5,6:-s 2 -n 20000" \
            "ib_send_lat:5,6:-s 2 -n 20000" "ib_atomic_lat:5,6:-n 20000"; do
    tool=${spec%%:*}; rest=${spec#*:}; cols=${rest%%:*}; args=${rest#*:}
    declare -A stock=() ours=() paired=()
    if [ -n "${PARITY_ONLY:-}" ] && ! [[ $tool =~ $PARITY_ONLY ]]; then
        continue
    fi
    for r in $(seq "$rounds"); do
        # The order alternates too: whichever runs first in a round may fare differently.
        if [ $((r % 2)) = 1 ]; then
            # shellcheck disable=SC2086
            fs=$(run_pair stock "$tool" $args)
            # shellcheck disable=SC2086
            fu=$(run_pair uroce "$tool" $args)
        else
            # shellcheck disable=SC2086
            fu=$(run_pair uroce "$tool" $args)
            # shellcheck disable=SC2086
            fs=$(run_pair stock "$tool" $args)
        fi
        for col in ${cols//,/ }; do
            s=$(figure "$fs" "$col"); u=$(figure "$fu" "$col")
            echo "$tool ($(unit "$tool" "$col")) round $r: stock=$s uroce=$u"
            [ -n "$s" ] && stock[$col]+="$s "
            [ -n "$u" ] && ours[$col]+="$u "
            if [ -n "$s" ] && [ -n "$u" ]; then
                paired[$col]+="$(awk -v u="$u" -v s="$s" 'BEGIN { if (s > 0) printf "%.4f", u / s }') "
            fi
        done
    done
    for col in ${cols//,/ }; do
        # shellcheck disable=SC2086
        ms=$(printf '%s\n' ${stock[$col]:-} | median)
        # shellcheck disable=SC2086
        mu=$(printf '%s\n' ${ours[$col]:-} | median)
        if [ -z "$ms" ] || [ -z "$mu" ]; then
            echo "$tool: no result (stock '${ms}', uroce '${mu}')"; status=1; continue
        fi
        ratio=$(awk -v u="$mu" -v s="$ms" 'BEGIN { printf "%.3f", u / s }')
        verdict=$(awk -v r="$ratio" 'BEGIN { print (r >= 0.9 && r <= 1.1) ? "within 10%" : "OUTSIDE 10%" }')
        echo "$tool: median stock $ms, uroce $mu ($(unit "$tool" "$col")), uroce/stock = $ratio: $verdict"
        # For the reader, not the verdict: the median of the rounds' own ratios (each round
        # runs the two back to back), which drift of the machine over the run moves less.
        # shellcheck disable=SC2086
        echo "$tool: median of the per-round ratios uroce/stock $(printf '%s\n' ${paired[$col]:-} | median)"
        [ "$verdict" = "within 10%" ] || status=1
    done
    unset stock ours paired
done
exit $status
