#!/usr/bin/env bash
# Every test of the project, as the README's "all tests" command:
#   1. the Rust workspace (unit, property, simulation, integration, CLI tests;
#      the netfault namespace test and the tshark agreement test skip, saying why,
#      without root / tshark);
#   2. the drop-in libibverbs.so.1 / librdmacm.so.1 with the stock rdma-core, rdmacm-utils
#      and perftest binaries (perftest -R through the CM too), and every ELF object of the
#      RDMA packages loading against them (tests/compat/*.sh install the Debian packages as
#      root, and skip otherwise), libfabric's fi_info (tests/compat/libfabric.sh) and UCX
#      1.13's ucx_info / ucx_perftest on them (tests/compat/ucx.sh), rdma-core's own pyverbs
#      suite (tests/compat/pyverbs.sh), and uroced sharing one
#      device among many processes (tests/compat/daemon.sh);
#   3. interop with Linux Soft-RoCE in the rxe lab (tests/interop/run.sh: needs root, qemu,
#      the lab beside the repository and the Debian package mirror; about 15 minutes;
#      prints "SKIPPED: <why>" without them; UROCE_SKIP_INTEROP=1 skips it on purpose).
set -euo pipefail
cd "$(dirname "$0")/.."

# Each section's wall time, printed as the next one starts and at the end.
section_start=$SECONDS
section_name=""
section() {
    if [ -n "$section_name" ]; then
        echo "   ($((SECONDS - section_start)) s: $section_name)"
    fi
    section_start=$SECONDS
    section_name=$1
    echo "== $1"
}
trap 'section_end=$?; [ -n "$section_name" ] && echo "   ($((SECONDS - section_start)) s: $section_name)"; echo "== all sections: $SECONDS s"; exit $section_end' EXIT

# The drop-in libraries first: Rust tests run stock C programs on them
# (crates/cli/tests/capture_trace.rs: uroce trace around ibv_rc_pingpong).
section "drop-in C libraries: build (scripts/build-compat.sh)"
scripts/build-compat.sh

section "cargo test --workspace"
cargo test --workspace

section "drop-in C libraries: loader and symbol versions (tests/compat/load.sh)"
bash tests/compat/load.sh

section "drop-in C libraries: every ELF object of the rdma-core users in Debian loads (tests/compat/loadall.sh)"
bash tests/compat/loadall.sh --no-build

section "drop-in C libraries: stock tools end to end (tests/compat/tools.sh)"
bash tests/compat/tools.sh

section "drop-in librdmacm: rdmacm-utils and perftest -R connecting through the CM (tests/compat/rdmacm.sh --perftest)"
bash tests/compat/rdmacm.sh --no-build --perftest

section "uroced: one device shared by many processes; client and daemon killed mid-transfer; permissions (tests/compat/daemon.sh)"
bash tests/compat/daemon.sh

section "drop-in libraries under libfabric: fi_info -p verbs, fi_pingpong -e msg and -e rdm (verbs;ofi_rxm) on a uroced device (tests/compat/libfabric.sh)"
bash tests/compat/libfabric.sh --no-build

section "rdma-core's own test suite (pyverbs, rdma-core 44) on the drop-in libraries, five runs (tests/compat/pyverbs.sh)"
PYVERBS_RUNS=5 bash tests/compat/pyverbs.sh --no-build

section "UCX 1.13 on the drop-in libraries: ucx_info -d, ucx_perftest over rc_verbs/ud_verbs (tests/compat/ucx.sh)"
bash tests/compat/ucx.sh --no-build

section "interop with Linux Soft-RoCE in the rxe lab (tests/interop/run.sh)"
if [ "${UROCE_SKIP_INTEROP:-0}" = 1 ]; then
    echo "SKIPPED: UROCE_SKIP_INTEROP=1"
else
    bash tests/interop/run.sh
fi
