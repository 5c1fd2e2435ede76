#!/usr/bin/env bash
# UCX 1.13 (Debian 12's ucx-utils / libucx0) on uroce's drop-in libraries, without root:
#
#   tests/compat/ucx.sh              # builds (scripts/build-compat.sh), then runs
#   tests/compat/ucx.sh --no-build
#
# UCX lists an IB device only if /dev/infiniband/<dev_name> is a character device it may
# read and write; every UCX command here therefore runs under scripts/uverbs-ns.sh, which
# provides that node in an unprivileged user and mount namespace (docs/compat.md §11).
# Checks:
#   1. `ucx_info -d` lists the memory domain uroce0 with the rc_verbs and ud_verbs transports
#      on device uroce0:1;
#   2. `ucx_perftest` between two processes, each with its own embedded device — the
#      server's on $UCX_ADDR_A (default 127.77.43.1), the client's on $UCX_ADDR_B (default
#      127.77.43.2), the perftest exchange on TCP port $UCX_PORT (default 13457) and up —
#      UCT put_bw (zero copy) over rc_verbs, UCT am_lat over ud_verbs, UCP tag_lat over
#      rc_verbs (ud_verbs for wire-up only) and over ud_verbs, and UCP ucp_put_bw over
#      rc_verbs and over ud_verbs (which has no RDMA: UCP emulates the put with active
#      messages). A run passes when both processes exit 0 and the client's "Final:" line
#      reports every iteration.
# Needs ucx-utils and libucx0 (installed when root, else the script skips) and a user
# namespace (unshare -Urm; skips with the reason otherwise).
# Ends with a "N passed, M failed" line; exit status 1 if anything failed.
set -uo pipefail
cd "$(dirname "$0")/../.."

build=1
for arg in "$@"; do
    case "$arg" in
        --no-build) build=0 ;;
        *) echo "ucx.sh: unknown option $arg" >&2; exit 2 ;;
    esac
done

A=${UCX_ADDR_A:-127.77.43.1}
B=${UCX_ADDR_B:-127.77.43.2}
port=${UCX_PORT:-13457}

if ! command -v ucx_info >/dev/null 2>&1 || ! command -v ucx_perftest >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >/dev/null 2>&1 || true
        apt-get install -y -qq ucx-utils libucx0 >/dev/null 2>&1 \
            || { echo "SKIPPED: could not install the Debian packages ucx-utils libucx0"; exit 0; }
    else
        echo "SKIPPED: ucx-utils (ucx_info, ucx_perftest) not installed and not root"
        exit 0
    fi
fi
if ! unshare --user --map-root-user --mount true 2>/dev/null; then
    echo "SKIPPED: no user namespace (unshare -Urm fails), which scripts/uverbs-ns.sh needs"
    exit 0
fi

# shellcheck source=tests/compat/lib.sh
. tests/compat/lib.sh
compat_build compat-ucx
compat_free_addrs compat-ucx UCX_ADDR_A/UCX_ADDR_B "$A" "$B"
export LD_LIBRARY_PATH="$(pwd)/target/compat"
ns=scripts/uverbs-ns.sh
work=$(mktemp -d)
server_pid=""
cleanup() {
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

pass=0
fail=0
ok() { echo "ok   $*"; pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }

# 1. ucx_info -d
UROCE_DEVICES="uroce0=$A" timeout 60 "$ns" ucx_info -d >"$work/info" 2>&1
md=$(awk '/^# Memory domain: uroce0$/{f=1; next} /^# Memory domain:/{f=0} f' "$work/info")
if grep -q "Transport: rc_verbs" <<<"$md" && grep -q "Transport: ud_verbs" <<<"$md" \
    && grep -q "Device: uroce0:1" <<<"$md"; then
    ok "ucx_info -d lists uroce0: $(grep -c 'Transport:' <<<"$md") transports on uroce0:1" \
       "($(grep 'Transport:' <<<"$md" | awk '{print $3}' | paste -sd ' '))"
else
    bad "ucx_info -d does not list uroce0 with rc_verbs and ud_verbs:"
    grep -E "Memory domain|Transport|Device|ERROR|WARN" "$work/info" | head -20 | sed 's/^/    /'
fi

# Waits (≤ 30 s) until the server ($1) listens on TCP $port, or exited.
wait_server() {
    for _ in $(seq 300); do
        if ss -tln "sport = :$port" 2>/dev/null | grep -q ":$port"; then
            return 0
        fi
        kill -0 "$1" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

# perf NAME ITERATIONS "ENV" ARGS...: one ucx_perftest server/client pair.
perf() {
    local name=$1 n=$2 envs=$3
    shift 3
    # shellcheck disable=SC2086 # ENV is a list of VAR=value words on purpose
    env $envs UROCE_DEVICES="uroce0=$A" timeout 180 "$ns" \
        ucx_perftest -p "$port" "$@" -n "$n" >"$work/srv" 2>&1 &
    server_pid=$!
    if ! wait_server "$server_pid"; then
        wait "$server_pid" 2>/dev/null
        server_pid=""
        bad "$name: server did not start: $(tail -3 "$work/srv" | tr '\n' ' ')"
        port=$((port + 1))
        return
    fi
    # shellcheck disable=SC2086
    env $envs UROCE_DEVICES="uroce0=$B" timeout 180 "$ns" \
        ucx_perftest 127.0.0.1 -p "$port" "$@" -n "$n" >"$work/cli" 2>&1
    local crc=$?
    wait "$server_pid"
    local src=$?
    server_pid=""
    port=$((port + 1))
    local final
    final=$(grep '^Final:' "$work/cli" | tail -1)
    if [ "$crc" = 0 ] && [ "$src" = 0 ] && [ "$(awk '{print $2}' <<<"$final")" = "$n" ]; then
        ok "$name: $(tr -s ' ' <<<"$final")"
    else
        bad "$name (client rc=$crc, server rc=$src)"
        grep -v '^[|+]' "$work/cli" | tail -5 | sed 's/^/    client: /'
        grep -v '^[|+]' "$work/srv" | tail -3 | sed 's/^/    server: /'
    fi
}

perf "UCT put_bw zcopy 64 KiB over rc_verbs" 2000 "" -d uroce0:1 -x rc_verbs -t put_bw -D zcopy -s 65536
perf "UCT am_lat over ud_verbs" 2000 "" -d uroce0:1 -x ud_verbs -t am_lat
perf "UCP tag_lat over rc_verbs" 2000 "UCX_TLS=rc_verbs,ud_verbs:aux UCX_NET_DEVICES=uroce0:1" -t tag_lat
perf "UCP tag_lat over ud_verbs" 2000 "UCX_TLS=ud_verbs UCX_NET_DEVICES=uroce0:1" -t tag_lat
perf "UCP ucp_put_bw 64 KiB over rc_verbs" 1000 "UCX_TLS=rc_verbs,ud_verbs:aux UCX_NET_DEVICES=uroce0:1" \
    -t ucp_put_bw -s 65536
perf "UCP ucp_put_bw 16 KiB over ud_verbs (UCP's software RMA)" 200 "UCX_TLS=ud_verbs UCX_NET_DEVICES=uroce0:1" \
    -t ucp_put_bw -s 16384

echo "compat-ucx: $pass passed, $fail failed"
[ "$fail" = 0 ]
