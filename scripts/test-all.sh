#!/usr/bin/env bash
# Every test of the project, as the README's "all tests" command:
#   1. the Rust workspace (unit, property, simulation, integration, CLI tests;
#      the netfault namespace test and the tshark agreement test skip, saying why,
#      without root / tshark);
#   2. the drop-in libibverbs.so.1 with the stock rdma-core / perftest binaries
#      (tests/compat/*.sh install the Debian packages as root, and skip otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo test --workspace"
cargo test --workspace

echo "== drop-in C libraries: loader and symbol versions (tests/compat/load.sh)"
bash tests/compat/load.sh

echo "== drop-in C libraries: stock tools end to end (tests/compat/tools.sh)"
bash tests/compat/tools.sh
