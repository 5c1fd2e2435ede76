#!/usr/bin/env bash
# Stock rdma-core tools moving data over uroce through the drop-in libibverbs: each test
# runs a server and a client as two processes, each with its own
# embedded uroce device — the server's bound to $COMPAT_ADDR_A (default 127.0.0.1), the
# client's to $COMPAT_ADDR_B (default 127.0.0.2) — exchanging QP info over TCP on loopback
# and RoCEv2 over UDP between the two addresses.
#
#   tests/compat/tools.sh              # builds (scripts/build-compat.sh), then runs
#   tests/compat/tools.sh --no-build
#
# Covered: ibv_rc_pingpong, ibv_ud_pingpong, ibv_srq_pingpong (-g 0, with --chk so the data
# is verified; rc also with -e, and with -N: the ibv_wr_* API), and the eight perftest tests
# with -x 0, with -e where perftest offers it (not for WRITE: "Events feature not available
# on WRITE verb"), with --post_list for the bandwidth tests, -c UD and --use-srq for the send
# tests.
# A run passes when both processes exit 0 and the client printed its result line.
# Needs ibverbs-utils and perftest (installed when root, else the script skips).
# Ends with a "N passed, M failed" line; exit status 1 if anything failed.
set -uo pipefail
cd "$(dirname "$0")/../.."

build=1
for arg in "$@"; do
    case "$arg" in
        --no-build) build=0 ;;
        *) echo "tools.sh: unknown option $arg" >&2; exit 2 ;;
    esac
done

A=${COMPAT_ADDR_A:-127.0.0.1}
B=${COMPAT_ADDR_B:-127.0.0.2}
port=${COMPAT_TCP_PORT:-18650}

# shellcheck source=tests/compat/lib.sh
. tests/compat/lib.sh
compat_need_tools "ibverbs-utils perftest rdmacm-utils" ibv_rc_pingpong ibv_ud_pingpong ibv_srq_pingpong ib_write_bw ib_write_lat ib_read_bw ib_read_lat ib_send_bw ib_send_lat ib_atomic_bw ib_atomic_lat

compat_build compat-tools
compat_free_addrs compat-tools COMPAT_ADDR_A/COMPAT_ADDR_B "$A" "$B"
export LD_LIBRARY_PATH="$(pwd)/target/compat"
work=$(mktemp -d)
server_pid=""
cleanup() {
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

pass=0
fail=0

# Waits (≤ 15 s) until something listens on TCP port $1, or the server ($2) exited.
wait_listen() {
    for _ in $(seq 150); do
        ss -ltn "sport = :$1" 2>/dev/null | grep -q LISTEN && return 0
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

# run NAME RESULT_REGEX TOOL ARGS...: server on device A, client on device B.
run() {
    local name=$1 expect=$2 tool=$3
    shift 3
    port=$((port + 1))
    UROCE_DEVICES="uroce0=$A" timeout 90 "$tool" "$@" -p "$port" >"$work/srv" 2>&1 &
    server_pid=$!
    if ! wait_listen "$port" "$server_pid"; then
        wait "$server_pid" 2>/dev/null
        server_pid=""
        echo "FAIL $name: server did not start: $(tail -3 "$work/srv" | tr '\n' ' ')"
        fail=$((fail + 1))
        return
    fi
    UROCE_DEVICES="uroce0=$B" timeout 90 "$tool" "$@" -p "$port" 127.0.0.1 >"$work/cli" 2>&1
    local crc=$?
    wait "$server_pid"
    local src=$?
    server_pid=""
    if [ "$crc" = 0 ] && [ "$src" = 0 ] && grep -qE "$expect" "$work/cli"; then
        echo "ok   $name: $(grep -E "$expect" "$work/cli" | head -1 | tr -s ' \t' ' ')"
        pass=$((pass + 1))
    else
        echo "FAIL $name (client rc=$crc, server rc=$src)"
        grep -vE '^ *-+$' "$work/cli" | tail -6 | sed 's/^/    client: /'
        grep -vE '^ *-+$' "$work/srv" | tail -4 | sed 's/^/    server: /'
        fail=$((fail + 1))
    fi
}

pp='[0-9]+ iters in [0-9.]+ seconds'
# perftest's result row: bytes, iterations, then figures.
res='^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+'

run "ibv_rc_pingpong" "$pp" ibv_rc_pingpong -g 0 -n 500 -c
run "ibv_rc_pingpong -e" "$pp" ibv_rc_pingpong -g 0 -n 500 -c -e
# -N: ibv_create_qp_ex with send_ops_flags and the ibv_wr_* post interface (docs/compat.md §11).
run "ibv_rc_pingpong -N" "$pp" ibv_rc_pingpong -g 0 -n 500 -c -N
run "ibv_ud_pingpong" "$pp" ibv_ud_pingpong -g 0 -n 500 -c
run "ibv_srq_pingpong" "$pp" ibv_srq_pingpong -g 0 -n 200 -c

for t in ib_write_bw ib_write_lat ib_read_bw ib_read_lat ib_send_bw ib_send_lat ib_atomic_bw ib_atomic_lat; do
    run "$t -x 0" "$res" "$t" -d uroce0 -x 0 -n 1000
done
for t in ib_read_bw ib_read_lat ib_send_bw ib_send_lat ib_atomic_bw ib_atomic_lat; do
    run "$t -x 0 -e" "$res" "$t" -d uroce0 -x 0 -n 1000 -e
done
for t in ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw; do
    run "$t -x 0 --post_list 8" "$res" "$t" -d uroce0 -x 0 -n 1024 --post_list 8
done
run "ib_send_bw -x 0 -c UD" "$res" ib_send_bw -d uroce0 -x 0 -n 1000 -c UD
run "ib_send_lat -x 0 -c UD" "$res" ib_send_lat -d uroce0 -x 0 -n 1000 -c UD
run "ib_send_bw -x 0 --use-srq" "$res" ib_send_bw -d uroce0 -x 0 -n 1000 --use-srq
run "ib_send_lat -x 0 --use-srq" "$res" ib_send_lat -d uroce0 -x 0 -n 1000 --use-srq

echo "compat-tools: $pass passed, $fail failed"
[ "$fail" = 0 ]
