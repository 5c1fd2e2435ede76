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
# least PYVERBS_MIN_PASS tests pass (default 88, what this tree reaches); the counts of
# passed, skipped, failed and errored tests are printed per run. Needs python3-pyverbs
# (installed when root, else the script skips) and the system python3 it is built for.
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
min_pass=${PYVERBS_MIN_PASS:-100}
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
trap 'rm -rf "$work"' EXIT
cp -r "$suite" "$work/tests"
gunzip -f "$work"/tests/*.gz

passed=0
failed=0
lib=$PWD/target/compat
for i in $(seq 1 "$runs"); do
    log="$work/run$i.log"
    (cd "$work" && UROCE_DEVICES="uroce0=$addr" LD_LIBRARY_PATH="$lib" timeout 1200 \
        "$py" tests/run_tests.py -v >"$log" 2>&1)
    rc=$?
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
