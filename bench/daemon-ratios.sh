#!/usr/bin/env bash
# Two processes on one uroced device against the same test inside one process (--loopback),
# measured side by side in one run (docs/daemon.md §2.1):
#
#   bench/daemon-ratios.sh [ROUNDS]      # default 3 rounds; prints each figure and the ratio
#
# Figures: 64 KiB write_bw (average MB/s), 8-byte write_bw --post_list 32 (Mpps), 1-byte
# write_lat (t_typical µs). The script starts its own daemon on $DAEMON_ADDR (default
# 127.0.0.76) in a private directory and builds the release binaries first.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
ADDR=${DAEMON_ADDR:-127.0.0.76}
cargo build --release -q -p uroce-cli
B=$(pwd)/target/release/uroce
dir=$(mktemp -d)
target/release/uroced --device "uroce0=$ADDR" --dir "$dir/d" >"$dir/log" 2>&1 &
dpid=$!
trap 'kill $dpid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do [ -S "$dir/d/uverbs0" ] && break; sleep 0.05; done
export UROCE_DAEMON="$dir/d"
unset UROCE_DEVICES
port=19700

# The figure from the last result line: column 4 is a bandwidth line's BW average, 5 its
# message rate; column 5 of a latency line is t_typical.
pair() { # COL ARGS...
    local col=$1
    shift
    port=$((port + 1))
    "$B" bench "$@" -p "$port" >"$dir/s" 2>&1 &
    local s=$!
    sleep 0.5
    "$B" bench "$@" -p "$port" 127.0.0.1 2>&1 | awk -v c="$col" '/^ +[0-9]/ {v=$c} END {print v}'
    wait "$s"
}
loop() { # COL ARGS...
    local col=$1
    shift
    "$B" bench "$@" --loopback 2>&1 | awk -v c="$col" '/^ +[0-9]/ {v=$c} END {print v}'
}

printf '%-34s %12s %12s %8s\n' figure "2 processes" "--loopback" ratio
for r in $(seq "$rounds"); do
    a=$(pair 4 write_bw -n 40000); b=$(loop 4 write_bw -n 40000)
    printf '%-34s %12s %12s %8.2f\n' "[$r] 64 KiB write_bw MB/s" "$a" "$b" "$(echo "$a / $b" | bc -l)"
    a=$(pair 5 write_bw -s 8 -l 32 -n 2000000); b=$(loop 5 write_bw -s 8 -l 32 -n 2000000)
    printf '%-34s %12s %12s %8.2f\n' "[$r] 8 B post_list 32 Mpps" "$a" "$b" "$(echo "$a / $b" | bc -l)"
    a=$(pair 5 write_lat -s 1 -n 5000); b=$(loop 5 write_lat -s 1 -n 5000)
    printf '%-34s %12s %12s %8.2f\n' "[$r] 1 B write_lat t_typical us" "$a" "$b" "$(echo "$a / $b" | bc -l)"
done
echo "(machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg))"
