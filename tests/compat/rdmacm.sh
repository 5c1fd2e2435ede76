#!/usr/bin/env bash
# Stock rdma-core tools connecting through uroce's librdmacm.so.1 (the IB CM on the wire over
# QP 1): each test runs a server and a client as two processes, each with its own embedded
# uroce device — the server's on $RDMACM_ADDR_A (default 127.77.41.1), the client's on
# $RDMACM_ADDR_B (default 127.77.41.2). The client connects to the server's address by
# rdma_cm; REQ/REP/RTU, the data and DREQ/DREP go as RoCEv2 over UDP between the two.
#
#   tests/compat/rdmacm.sh              # builds (scripts/build-compat.sh), then runs
#   tests/compat/rdmacm.sh --no-build
#   tests/compat/rdmacm.sh --perftest   # also perftest's tests with -R
#
# Covered: rping -v -V (the client validates every ping's data itself, "data mismatch!"
# and a failed exit otherwise) with three sizes,
# ucmatose with 8 connections × 10 messages, udaddy (UD: SIDR_REQ/SIDR_REP, the client's AH
# from the ESTABLISHED event, the server's from the received GRH) with its defaults, with 4
# connections × 20 messages of 1000 bytes and in RDMA_PS_IPOIB, rdma_server/rdma_client
# (synchronous IDs: rdma_create_ep, rdma_get_request, rdma_verbs.h's inline post/poll
# helpers on the CQs and completion channels rdma_create_ep made), and cmtime -c 100 (two
# client runs against one server, which must still be serving: rdma-core 44's cmtime server
# never exits by itself, so the script stops it). With --perftest also perftest's eight
# tests with -R (rdma_cm instead of the TCP exchange) and ib_send_bw/ib_send_lat -R -c UD.
# Those are not in the default set: perftest 4.5's client connects right after its TCP
# handshake, while its server listens only after it, so the REQ is now and then rejected
# (reason 8, no listener), and perftest's own retry cannot recover (it reuses the IDs and
# channel it has just destroyed: docs/compat.md §10); the script then starts the pair again
# (at most four times). A run passes when both processes exit 0 and the client printed what
# success looks like for that tool. With --perftest also `uroce bench -R` against perftest
# -R in both directions and against itself (write_bw, send_bw, read_lat, send_lat, and
# send_bw/send_lat -c UD).
# Needs rdmacm-utils and perftest (installed when root, else the script skips).
# Ends with a "N passed, M failed" line; exit status 1 if anything failed.
set -uo pipefail
cd "$(dirname "$0")/../.."

build=1
perftest=0
for arg in "$@"; do
    case "$arg" in
        --no-build) build=0 ;;
        --perftest) perftest=1 ;;
        *) echo "rdmacm.sh: unknown option $arg" >&2; exit 2 ;;
    esac
done

A=${RDMACM_ADDR_A:-127.77.41.1}
B=${RDMACM_ADDR_B:-127.77.41.2}

# shellcheck source=tests/compat/lib.sh
. tests/compat/lib.sh
compat_need_tools "rdmacm-utils perftest" rping ucmatose udaddy rdma_server rdma_client cmtime ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw ib_write_lat ib_read_lat ib_send_lat ib_atomic_lat

compat_build compat-rdmacm
# The uroce CLI for the `uroce bench -R` pairs (with --perftest): built here unless
# --no-build, else the newer of target/release/uroce and target/debug/uroce.
uroce=""
if [ "$perftest" = 1 ]; then
    if [ "$build" = 1 ]; then
        cargo build --release -p uroce-cli >/dev/null 2>&1 && uroce="$(pwd)/target/release/uroce"
    else
        for b in target/release/uroce target/debug/uroce; do
            [ -x "$b" ] && { [ -z "$uroce" ] || [ "$b" -nt "$uroce" ]; } && uroce="$(pwd)/$b"
        done
    fi
fi
compat_free_addrs compat-rdmacm RDMACM_ADDR_A/RDMACM_ADDR_B "$A" "$B"
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

# Waits (≤ 15 s) until the server's device holds UDP 4791 on $A (its rdma_cm ID is bound,
# the listen follows at once), or the server ($1) exited.
wait_device() {
    for _ in $(seq 150); do
        if ss -uln "sport = :4791" 2>/dev/null | grep -qE "(^|[[:space:]])$A:4791"; then
            sleep 0.5
            return 0
        fi
        kill -0 "$1" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

# start_server "SERVER ARGS": the server in the background ($server_pid), its device up.
start_server() {
    # shellcheck disable=SC2086 # the argument string is a word list on purpose
    UROCE_DEVICES="uroce0=$A" timeout 120 $1 >"$work/srv" 2>&1 &
    server_pid=$!
    wait_device "$server_pid"
}

# run NAME CLIENT_REGEX "SERVER ARGS" "CLIENT ARGS" [pair]: TOOL is the first word of both.
# With "pair", a client rejected before the server listened is retried with a new server
# too (perftest: its server cannot take a second client), up to four times.
run() {
    local name=$1 expect=$2 sargs=$3 cargs=$4 mode=${5:-client}
    if ! start_server "$sargs"; then
        wait "$server_pid" 2>/dev/null
        server_pid=""
        echo "FAIL $name: server did not start: $(tail -3 "$work/srv" | tr '\n' ' ')"
        fail=$((fail + 1))
        return
    fi
    # The server's device may be up before its rdma_listen: a client that came too early is
    # rejected with reason 8 (no listener). Try again while the server still waits (at most
    # twice more, four times with "pair"; a retried run says so).
    local crc tries=0 max=2
    [ "$mode" = pair ] && max=4
    while :; do
        # shellcheck disable=SC2086
        UROCE_DEVICES="uroce1=$B" timeout 120 $cargs >"$work/cli" 2>&1
        crc=$?
        # (UD: UNREACHABLE with SIDR status 1, no listener; synchronous: ECONNREFUSED.)
        if [ "$crc" != 0 ] && [ $tries -lt $max ] \
            && grep -qE "REJECTED|UNREACHABLE[,;] error: 1\.?$|Connection refused" "$work/cli" \
            && kill -0 "$server_pid" 2>/dev/null; then
            tries=$((tries + 1))
            echo "note $name: client rejected before the server listened; again ($tries)"
            if [ "$mode" = pair ]; then
                kill "$server_pid" 2>/dev/null
                wait "$server_pid" 2>/dev/null
                start_server "$sargs" || break
            else
                sleep 1
            fi
            continue
        fi
        break
    done
    # A perftest server whose client gave up waits for ever.
    [ "$mode" = pair ] && [ "$crc" != 0 ] && kill "$server_pid" 2>/dev/null
    wait "$server_pid"
    local src=$?
    server_pid=""
    if [ "$crc" = 0 ] && [ "$src" = 0 ] && grep -qE "$expect" "$work/cli"; then
        echo "ok   $name: $(grep -cE "$expect" "$work/cli") × /$expect/"
        pass=$((pass + 1))
    else
        echo "FAIL $name (client rc=$crc, server rc=$src)"
        tail -6 "$work/cli" | sed 's/^/    client: /'
        tail -4 "$work/srv" | sed 's/^/    server: /'
        fail=$((fail + 1))
    fi
}

for size in 100 1024 4096; do
    run "rping -v -V -C 100 -S $size" "^ping data: rdma-ping-99: " \
        "rping -s -a $A -v -C 100 -S $size" "rping -c -a $A -v -V -C 100 -S $size"
done
run "ucmatose -c 8 -C 10" "^return status 0$" \
    "ucmatose -c 8 -C 10" "ucmatose -s $A -c 8 -C 10"

run "udaddy" "^return status 0$" "udaddy -b $A" "udaddy -b $B -s $A"
run "udaddy -c 4 -C 20 -S 1000" "^data transfers complete$" \
    "udaddy -b $A -c 4 -C 20 -S 1000" "udaddy -b $B -s $A -c 4 -C 20 -S 1000"
run "udaddy -P ipoib" "^return status 0$" "udaddy -b $A -P ipoib" "udaddy -b $B -s $A -P ipoib"
run "rdma_server/rdma_client" "^rdma_client: end 0$" "rdma_server -s $A" "rdma_client -s $A"

# cmtime: rdma-core 44's server loops on its event channel for ever (it has no way to learn
# that a client is done), so a run passes when two clients in a row each set up and tear
# down 100 connections (exit 0, their "connect" and "disconnect" lines printed) and the
# server is still alive afterwards; then it is stopped.
run_cmtime() {
    local name="cmtime -c 100 (2 clients)" ok=1 i
    UROCE_DEVICES="uroce0=$A" timeout 300 cmtime -b "$A" >"$work/srv" 2>&1 &
    server_pid=$!
    if ! wait_device "$server_pid"; then
        ok=0
    else
        for i in 1 2; do
            UROCE_DEVICES="uroce1=$B" timeout 120 cmtime -b "$B" -s "$A" -c 100 \
                >"$work/cli" 2>&1 || ok=0
            grep -qE "^connect +:" "$work/cli" && grep -qE "^disconnect +:" "$work/cli" || ok=0
            [ $ok = 1 ] || break
        done
        kill -0 "$server_pid" 2>/dev/null || ok=0
    fi
    kill "$server_pid" 2>/dev/null
    wait "$server_pid" 2>/dev/null
    server_pid=""
    if [ $ok = 1 ]; then
        echo "ok   $name: $(grep -E '^(connect|disconnect) +:' "$work/cli" | tr -s ' ' | tr '\n' ';')"
        pass=$((pass + 1))
    else
        echo "FAIL $name"
        tail -6 "$work/cli" | sed 's/^/    client: /'
        tail -4 "$work/srv" | sed 's/^/    server: /'
        fail=$((fail + 1))
    fi
}
run_cmtime

res='^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+'
if [ "$perftest" = 1 ]; then
    for t in ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw ib_write_lat ib_read_lat ib_send_lat ib_atomic_lat; do
        run "$t -R" "$res" "$t -R -x 0 -n 1000" "$t -R -x 0 -n 1000 $A" pair
    done
    for t in ib_send_bw ib_send_lat; do
        run "$t -R -c UD" "$res" "$t -R -c UD -x 0 -n 1000" "$t -R -c UD -x 0 -n 1000 $A" pair
    done
    # uroce bench -R (docs/perftest.md §8) against stock perftest -R, both ways, and
    # against itself. Its server takes the test connections on the listener of the exchange
    # connection and its client retries a rejected connect itself, so these pairs do not
    # depend on the race above (a stock client is still retried by "pair" if it loses it).
    if [ -n "$uroce" ]; then
        for t in write_bw send_bw read_lat send_lat "send_bw -c UD" "send_lat -c UD"; do
            # shellcheck disable=SC2086 # "$t" is a test name and its options
            set -- $t
            local_t=$1
            shift
            o="-R $* -x 0 -n 1000"
            run "uroce bench $t -R (server) <- ib_$t -R" "$res" \
                "$uroce bench $local_t $o" "ib_$local_t $o $A" pair
            run "ib_$t -R (server) <- uroce bench $t -R" "$res" \
                "ib_$local_t $o" "$uroce bench $local_t $o $A" pair
            run "uroce bench $t -R <-> uroce bench $t -R" "$res" \
                "$uroce bench $local_t $o" "$uroce bench $local_t $o $A" pair
        done
    else
        echo "note: no uroce binary (target/{release,debug}/uroce): uroce bench -R pairs skipped"
    fi
fi

echo "compat-rdmacm: $pass passed, $fail failed"
[ "$fail" = 0 ]
