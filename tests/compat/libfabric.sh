#!/usr/bin/env bash
# libfabric's verbs provider (Debian's libfabric1, 1.17) on uroce's libibverbs.so.1 and
# librdmacm.so.1: `fi_info -p verbs` must list the uroce device for connected (FI_EP_MSG,
# through rdma_cm) and datagram (FI_EP_DGRAM) endpoints.
#
#   tests/compat/libfabric.sh [--no-build]
#
# The verbs provider finds a device's IP address by walking the host's interfaces and
# binding an rdma_cm ID to each address (prov/verbs/src/verbs_info.c); it skips "lo", so
# the test runs in a network namespace of its own with a veth pair carrying the device's
# address. Then fabtests' `fi_pingpong -e msg` (verbs) and `-e rdm` (verbs;ofi_rxm, with
# `-c`: fabtests checks every message's data) run between two processes sharing one uroced
# device in that namespace (needs target/release/uroced, which the test command builds
# before this script). Needs root (namespaces) and fi_info (Debian package
# libfabric-bin, installed when root); otherwise it skips. Ends with "N passed, M failed"; exit 1 on a failure.
set -uo pipefail
cd "$(dirname "$0")/../.."
build=1
[ "${1:-}" = --no-build ] && build=0
skip() { echo "SKIPPED: $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip "not root (network namespaces)"
if ! command -v fi_info >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libfabric-bin >/dev/null 2>&1 ||
        skip "fi_info missing and apt-get could not install libfabric-bin"
fi
if [ "$build" = 1 ]; then scripts/build-compat.sh >/dev/null || { echo "FAILED: build"; exit 1; }; fi
NS=urfab$$
ip netns add "$NS" || skip "cannot create a network namespace"
trap 'ip netns del "$NS" 2>/dev/null' EXIT
ip -n "$NS" link set lo up
ip -n "$NS" link add fab0 type veth peer name fab1 || skip "no veth"
ip -n "$NS" link set fab0 up
ip -n "$NS" link set fab1 up
ip -n "$NS" addr add 10.89.0.1/24 dev fab0
pass=0
fail=0
out=$(ip netns exec "$NS" env UROCE_DEVICES=uroce0=10.89.0.1 LD_LIBRARY_PATH="$PWD/target/compat" \
    timeout 60 fi_info -p verbs 2>&1)
for want in "FI_EP_MSG" "FI_EP_DGRAM"; do
    # fi_info prints blocks of "provider/fabric/domain/version/type/protocol".
    if grep -B4 "type: $want" <<<"$out" | grep -q "domain: uroce0"; then
        echo "ok   fi_info -p verbs lists uroce0 for $want"
        pass=$((pass + 1))
    else
        echo "FAIL fi_info -p verbs lists no uroce0 $want endpoint:"
        sed 's/^/       /' <<<"$out" | tail -12
        fail=$((fail + 1))
    fi
done
# fabtests' fi_pingpong over FI_EP_MSG (connected through rdma_cm) between two processes on
# one uroced device (docs/daemon.md): the server listens on localhost, which rdma_cm binds to
# the device, and the client connects to 127.0.0.1, which is that same shared device.
if [ -x target/release/uroced ] && command -v fi_pingpong >/dev/null 2>&1; then
    ddir=$(mktemp -d)
    ip netns exec "$NS" target/release/uroced -d uroce0=10.89.0.1 --dir "$ddir/d" \
        >"$ddir/log" 2>&1 &
    dpid=$!
    for _ in $(seq 100); do [ -S "$ddir/d/uverbs0" ] && break; sleep 0.05; done
    # pingpong SECS "ARGS": server and client; both must exit 0 and both print the 64k row.
    pingpong() {
        local secs=$1 args=$2 c s
        run() {
            # shellcheck disable=SC2086 # $args is a word list on purpose
            ip netns exec "$NS" env UROCE_DAEMON="$ddir/d" LD_LIBRARY_PATH="$PWD/target/compat" \
                timeout -k 5 "$secs" fi_pingpong $args "$@"
        }
        run >"$ddir/s" 2>&1 &
        spid=$!
        sleep 1
        run 127.0.0.1 >"$ddir/c" 2>&1
        c=$?
        wait "$spid"
        s=$?
        if [ "$c" = 0 ] && [ "$s" = 0 ] && grep -q "^64k" "$ddir/c" && grep -q "^64k" "$ddir/s"; then
            echo "ok   fi_pingpong $args between two processes on one uroced device"
            pass=$((pass + 1))
        else
            echo "FAIL fi_pingpong $args (server exit $s, client exit $c; 124: hung):"
            tail -n 5 "$ddir/s" "$ddir/c" "$ddir/log" 2>&1 | sed 's/^/       /'
            fail=$((fail + 1))
        fi
    }
    pingpong 60 "-p verbs -e msg -I 100"
    # RDM over MSG: ofi_rxm's connections are verbs MSG endpoints, made on first send
    # (rdma_cm), and each of its MSG CQs has (tx + rx size) × FI_UNIVERSE_SIZE entries
    # (262144 with the defaults: within the device's max_cqe). -c: data checked.
    pingpong 120 "-p verbs;ofi_rxm -e rdm -I 100 -c"
    kill "$dpid" 2>/dev/null
    wait "$dpid" 2>/dev/null
    rm -rf "$ddir"
else
    echo "skip fi_pingpong: target/release/uroced not built or fi_pingpong (libfabric-bin) missing"
fi

echo "libfabric: $pass passed, $fail failed"
[ "$fail" = 0 ]
