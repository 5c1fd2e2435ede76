#!/usr/bin/env bash
# rdma-core's own test suite (Debian 12's python3-pyverbs ships rdma-core 44's tests/,
# gzipped, under /usr/share/doc/rdma-core/tests) against uroce's drop-in libraries, without
# root or network beyond loopback (docs/compat.md §12):
#
#   tests/compat/pyverbs.sh              # builds (scripts/build-compat.sh), then runs
#   tests/compat/pyverbs.sh --no-build
#
# The suite runs RUNS times (PYVERBS_RUNS, default 1) on one embedded device at
# $PYVERBS_ADDR (default 127.77.44.1). Each run passes when no test fails or errors and at
# least PYVERBS_MIN_PASS tests pass (default 107, what this tree reaches as root; 7 fewer
# without root, see below); the counts of passed, skipped, failed and errored tests are
# printed per run. Needs python3-pyverbs (installed when root, else the script skips) and
# the system python3 it is built for.
#
# rdma_cm tests (test_rdmacm.py): the suite maps a device to its IP address only through
# /sys/class/infiniband/<dev>/device/net/<ifname> and `ip addr show <ifname>` (tests/base.py),
# and runs the two sides as forked processes on one device. So, as root (and with
# target/release/uroced built), each run happens in a network namespace of its own with a
# veth interface "pyv0" holding $PYVERBS_NS_ADDR (default 10.89.44.1), a uroced daemon
# serving uroce0 on that address (docs/daemon.md), and a private mount namespace
# (`unshare -m`) in which a tmpfs over /sys/class holds the real classes (bind mounts) plus
# a generated infiniband/uroce0/device/net/pyv0 entry: a description of uroce's device for
# the suite, not a kernel device (docs/compat.md §12). Without root the suite runs on the
# embedded device and those 7 tests skip ("doesn't have net interface").
# Ends with a "N passed, M failed" line; exit status 1 if anything failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
source tests/compat/lib.sh

build=1
for arg in "$@"; do
    case "$arg" in
        --no-build) build=0 ;;
        *) echo "pyverbs.sh: unknown option $arg" >&2; exit 2 ;;
    esac
done

addr=${PYVERBS_ADDR:-127.77.44.1}
runs=${PYVERBS_RUNS:-1}
min_pass=${PYVERBS_MIN_PASS:-107}
suite=/usr/share/doc/rdma-core/tests
py=/usr/bin/python3

if [ ! -d /usr/lib/python3/dist-packages/pyverbs ] || [ ! -f "$suite/run_tests.py" ]; then
    if [ "$(id -u)" = 0 ]; then
        echo "pyverbs.sh: installing python3-pyverbs"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pyverbs >/dev/null 2>&1
    fi
fi
if [ ! -d /usr/lib/python3/dist-packages/pyverbs ] || [ ! -f "$suite/run_tests.py" ] \
    || [ ! -x "$py" ]; then
    echo "skip: python3-pyverbs (rdma-core's tests) is not installed"
    echo "pyverbs: 0 passed, 0 failed"
    exit 0
fi

compat_build pyverbs
compat_free_addrs pyverbs PYVERBS_ADDR "$addr"

work=$(mktemp -d)
dpid=""
ns=""
trap '[ -n "$dpid" ] && kill "$dpid" 2>/dev/null; [ -n "$ns" ] && ip netns del "$ns" 2>/dev/null; rm -rf "$work"' EXIT
cp -r "$suite" "$work/tests"
gunzip -f "$work"/tests/*.gz

# The rdma_cm setup (see the top): the sysfs entry is made inside the mount namespace.
ns_addr=${PYVERBS_NS_ADDR:-10.89.44.1}
cm_ns=0
if [ "$(id -u)" = 0 ] && [ -x target/release/uroced ] && command -v unshare >/dev/null 2>&1; then
    cm_ns=1
    cat >"$work/sysfs.sh" <<'EOS'
set -e
mount --make-rprivate /
mkdir -p "$1/orig"
mount --bind /sys/class "$1/orig"
mount -t tmpfs -o mode=0755 uroce-sysfs /sys/class
for c in "$1"/orig/*; do
    mkdir "/sys/class/${c##*/}"
    mount --bind "$c" "/sys/class/${c##*/}"
done
mkdir -p /sys/class/infiniband/uroce0/device/net/pyv0
shift
exec "$@"
EOS
else
    echo "note: not root or no target/release/uroced: the 7 rdma_cm tests will skip"
    min_pass=$((min_pass - 7))
fi

passed=0
failed=0
lib=$PWD/target/compat
for i in $(seq 1 "$runs"); do
    log="$work/run$i.log"
    if [ "$cm_ns" = 1 ]; then
        ns=urpyv$$
        ip netns add "$ns" && ip -n "$ns" link set lo up &&
            ip -n "$ns" link add pyv0 type veth peer name pyv1 &&
            ip -n "$ns" link set pyv0 up && ip -n "$ns" link set pyv1 up &&
            ip -n "$ns" addr add "$ns_addr/24" dev pyv0
        ip netns exec "$ns" target/release/uroced -d "uroce0=$ns_addr" --dir "$work/d$i" \
            >"$work/uroced$i.log" 2>&1 &
        dpid=$!
        for _ in $(seq 100); do [ -S "$work/d$i/uverbs0" ] && break; sleep 0.05; done
        (cd "$work" && ip netns exec "$ns" unshare -m bash "$work/sysfs.sh" "$work/sys$i" \
            env UROCE_DAEMON="$work/d$i" LD_LIBRARY_PATH="$lib" timeout 1200 \
            "$py" tests/run_tests.py -v >"$log" 2>&1)
        rc=$?
        kill "$dpid" 2>/dev/null
        wait "$dpid" 2>/dev/null
        ip netns del "$ns" 2>/dev/null
        dpid=""
        ns=""
    else
        (cd "$work" && UROCE_DEVICES="uroce0=$addr" LD_LIBRARY_PATH="$lib" timeout 1200 \
            "$py" tests/run_tests.py -v >"$log" 2>&1)
        rc=$?
    fi
    ok=$(grep -c '\.\.\. ok$' "$log")
    skip=$(grep -c '\.\.\. skipped' "$log")
    fail=$(grep -c '^FAIL:' "$log")
    err=$(grep -c '^ERROR:' "$log")
    summary="run $i: $ok passed, $skip skipped, $fail failed, $err errors (exit $rc)"
    if [ "$fail" = 0 ] && [ "$err" = 0 ] && [ "$ok" -ge "$min_pass" ] && [ "$rc" = 0 ]; then
        echo "ok   $summary"
        passed=$((passed + 1))
    else
        echo "FAIL $summary"
        grep -E '^(FAIL|ERROR):' "$log" | sed 's/^/     /'
        tail -5 "$log" | sed 's/^/     /'
        failed=$((failed + 1))
    fi
done
echo "pyverbs: $passed passed, $failed failed"
[ "$failed" = 0 ]
