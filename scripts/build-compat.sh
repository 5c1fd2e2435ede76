#!/usr/bin/env bash
# Builds uroce's drop-in C libraries and installs them into target/compat/ under their
# SONAMEs, so that unmodified rdma-core programs run on uroce:
#
#   scripts/build-compat.sh
#   LD_LIBRARY_PATH=$PWD/target/compat ibv_devinfo -v
#
# Libraries: libibverbs.so.1 (crate crates/ibverbs), and the loader stubs libmlx5.so.1,
# libefa.so.1, librdmacm.so.1 (crates/compat-stubs/*), which keep the system providers and
# the kernel-only system librdmacm out of the process (reference: docs/compat.md §6.3).
# The device list comes from UROCE_DEVICES (default uroce0=127.0.0.1).
#
# Options: --debug builds the dev profile instead of release. CARGO_TARGET_DIR is honoured
# for the build; the libraries always land in <repo>/target/compat.
set -euo pipefail
cd "$(dirname "$0")/.."

profile=release
cargo_profile=(--release)
for arg in "$@"; do
    case "$arg" in
        --debug) profile=debug; cargo_profile=() ;;
        -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
        *) echo "build-compat: unknown option $arg" >&2; exit 2 ;;
    esac
done

# crate package -> installed file (= its SONAME)
libs=(
    "ibverbs-compat:libibverbs.so:libibverbs.so.1"
    "compat-mlx5:libmlx5.so:libmlx5.so.1"
    "compat-efa:libefa.so:libefa.so.1"
    "compat-rdmacm:librdmacm.so:librdmacm.so.1"
)

pkgs=()
for l in "${libs[@]}"; do pkgs+=(-p "${l%%:*}"); done
cargo build "${cargo_profile[@]}" "${pkgs[@]}"

build_dir="${CARGO_TARGET_DIR:-target}/$profile"
out=target/compat
mkdir -p "$out"
for l in "${libs[@]}"; do
    IFS=: read -r _pkg built soname <<<"$l"
    install -m 0755 "$build_dir/$built" "$out/$soname.tmp"
    mv -f "$out/$soname.tmp" "$out/$soname"
    # The dev-time name, for linking C programs against these with -libverbs etc.
    ln -sfn "$soname" "$out/$built"
    got=$(readelf -d "$out/$soname" 2>/dev/null | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p' || true)
    if command -v readelf >/dev/null 2>&1 && [ "$got" != "$soname" ]; then
        echo "build-compat: $out/$soname has SONAME '$got'" >&2
        exit 1
    fi
done
echo "build-compat: installed into $out: $(cd "$out" && ls -1 *.so.1 | tr '\n' ' ')"
echo "build-compat: run rdma-core programs with LD_LIBRARY_PATH=$(pwd)/$out"
