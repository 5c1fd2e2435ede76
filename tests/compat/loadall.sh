#!/usr/bin/env bash
# Every ELF object of the Debian 12 packages that link rdma-core's libraries loads against
# uroce's libraries in target/compat with nothing missing.
#
#   tests/compat/loadall.sh              # builds (scripts/build-compat.sh), then tests
#   tests/compat/loadall.sh --no-build   # tests what is already in target/compat
#   tests/compat/loadall.sh --debug      # builds the dev profile
#
# Packages: $LOADALL_PACKAGES, by default the rdma-core users of Debian 12 (found with
# `apt-cache rdepends libibverbs1 librdmacm1 ibverbs-providers`): ibverbs-utils, perftest,
# rdmacm-utils, ucx-utils + libucx0 (UCX and its uct_ib / uct_rdmacm plugins), libfabric1 +
# libfabric-bin, python3-pyverbs (its Cython modules), fio, qperf, libopenmpi3 (its MCA plugins,
# UCX ones among them), ibacm, srptools, librpma0. As root it installs what is missing; a
# package the archive does not have is named and skipped; not root and nothing installed:
# "SKIPPED: why".
#
# For every ELF file of those packages (programs, libraries, dlopen'ed plugins) whose
# dependency closure (ldd) contains libibverbs.so.1, librdmacm.so.1, libmlx5.so.1 or
# libefa.so.1:
#   1. statically: every import versioned IBVERBS_*, RDMACM_*, MLX5_* or EFA_* (readelf) is
#      exported by our libraries with that version;
#   2. the loader: `LD_BIND_NOW=1 ldd -r` with LD_LIBRARY_PATH=target/compat resolves those
#      four libraries from target/compat and reports no undefined symbol of theirs and no
#      missing version node of theirs (symbols a plugin takes from its host program, such as
#      a Python module's Py* imports, are not ours and are not counted).
# Then `ucx_info -v`, `ucx_info -d` and `fi_info -p verbs` must start (no loader error), what
# they print is shown, and every pyverbs module imports. Ends with "N passed, M failed"; exit status 1 if anything failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)

build=1
build_args=()
for arg in "$@"; do
    case "$arg" in
        --no-build) build=0 ;;
        --debug) build_args+=(--debug) ;;
        *) echo "loadall.sh: unknown option $arg" >&2; exit 2 ;;
    esac
done

read -r -a packages <<<"${LOADALL_PACKAGES:-ibverbs-utils perftest rdmacm-utils ucx-utils libucx0 libfabric1 libfabric-bin python3-pyverbs fio qperf libopenmpi3 ibacm srptools librpma0}"

for need in readelf ldd dpkg-query; do
    command -v "$need" >/dev/null 2>&1 || { echo "SKIPPED: $need not found"; exit 0; }
done

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

missing=()
for p in "${packages[@]}"; do installed "$p" || missing+=("$p"); done
skipped=()
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        if [ ${#missing[@]} = ${#packages[@]} ]; then
            echo "SKIPPED: none of the packages is installed and this is not root (${packages[*]})"
            exit 0
        fi
        skipped=("${missing[@]}")
        echo "loadall.sh: not root, testing without: ${skipped[*]}"
    else
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >/dev/null 2>&1 || true
        for p in "${missing[@]}"; do
            if ! apt-cache show "$p" >/dev/null 2>&1; then
                skipped+=("$p"); echo "loadall.sh: $p is not in the package archive, skipped"
            fi
        done
        want=()
        for p in "${missing[@]}"; do
            [[ " ${skipped[*]} " == *" $p "* ]] || want+=("$p")
        done
        if [ ${#want[@]} -gt 0 ]; then
            echo "loadall.sh: installing ${want[*]}"
            if ! apt-get install -y -qq "${want[@]}" >/dev/null 2>&1; then
                # One at a time, to name the ones that cannot be installed.
                for p in "${want[@]}"; do
                    apt-get install -y -qq "$p" >/dev/null 2>&1 \
                        || { skipped+=("$p"); echo "loadall.sh: could not install $p, skipped"; }
                done
            fi
        fi
    fi
fi
tested=()
for p in "${packages[@]}"; do installed "$p" && tested+=("$p"); done
if [ ${#tested[@]} = 0 ]; then
    echo "SKIPPED: none of ${packages[*]} could be installed"
    exit 0
fi

if [ "$build" = 1 ]; then
    scripts/build-compat.sh "${build_args[@]}" || { echo "FAIL build"; echo "0 passed, 1 failed"; exit 1; }
fi
lib="$repo/target/compat"
ours=(libibverbs.so.1 librdmacm.so.1 libmlx5.so.1 libefa.so.1)
for so in "${ours[@]}"; do
    [ -f "$lib/$so" ] || { echo "FAIL $so missing from target/compat (run scripts/build-compat.sh)"; echo "0 passed, 1 failed"; exit 1; }
done

pass=0
fail=0
ok() { echo "ok   $*"; pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Our exports as name@VERSION, and the names any of the four libraries (ours or rdma-core's)
# define: an undefined symbol with such a name is one of ours missing.
for so in "${ours[@]}"; do
    readelf -W --dyn-syms "$lib/$so" | awk '$7!="UND" && $8 ~ /@/ {sub("@@","@",$8); print $8}'
done | sort -u >"$work/exports"
for so in "${ours[@]}"; do
    for f in "$lib/$so" "/usr/lib/x86_64-linux-gnu/$so"; do
        [ -f "$f" ] && readelf -W --dyn-syms "$f" | awk '$7!="UND" && $5=="GLOBAL" {sub("@.*","",$8); print $8}'
    done
done | sort -u >"$work/names"

checked=0
for p in "${tested[@]}"; do
    while IFS= read -r f; do
        [ -f "$f" ] && [ ! -L "$f" ] || continue
        [ "$(head -c4 "$f" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ] || continue
        readelf -d "$f" 2>/dev/null | grep -q '(NEEDED)' || continue
        # rdma-core's own copies of the four libraries are what target/compat replaces.
        soname=$(readelf -d "$f" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
        [[ " ${ours[*]} " == *" $soname "* ]] && continue
        out=$(LD_LIBRARY_PATH="$lib" LD_BIND_NOW=1 ldd -r "$f" 2>&1)
        grep -qE '^\s(libibverbs|librdmacm|libmlx5|libefa)\.so\.1 =>' <<<"$out" || continue
        checked=$((checked + 1))
        problems=""
        # 1. static: versioned imports from the four libraries are exported with that version.
        imports=$(readelf -W --dyn-syms "$f" | awk '$7=="UND" {print $8}' \
            | grep -E '@(IBVERBS|RDMACM|MLX5|EFA)_' | sed 's/ (.*//' | sort -u)
        absent=$(comm -23 <(sed '/^$/d' <<<"$imports") "$work/exports" | tr '\n' ' ')
        [ -z "$absent" ] || problems+=" not exported: $absent;"
        # 2. the loader.
        for so in "${ours[@]}"; do
            line=$(grep -E "^\s$so =>" <<<"$out") || continue
            grep -q "=> $lib/$so " <<<"$line" || problems+=" $(tr -s ' \t' ' ' <<<"$line");"
        done
        vers=$(grep -oE "version \`(IBVERBS|RDMACM|MLX5|EFA)_[^']*' not found" <<<"$out" | sort -u | tr '\n' ' ')
        [ -z "$vers" ] || problems+=" $vers;"
        undef=$(sed -n 's/^undefined symbol: \([^ ,\t]*\).*/\1/p' <<<"$out" | sort -u \
            | comm -12 - "$work/names" | tr '\n' ' ')
        [ -z "$undef" ] || problems+=" undefined: $undef;"
        n=$(wc -w <<<"$imports")
        [ -z "$problems" ] && ok "$p: $f ($n versioned imports)" || bad "$p: $f:$problems"
    done < <(dpkg -L "$p" 2>/dev/null)
done
[ "$checked" -gt 0 ] && ok "$checked ELF objects link rdma-core's libraries" \
    || bad "no ELF object of ${tested[*]} links rdma-core's libraries"

# ---- the UCX and libfabric front ends start against target/compat ----
starts() {
    local name=$1; shift
    local out rc
    out=$(LD_LIBRARY_PATH="$lib" LD_BIND_NOW=1 timeout 60 "$@" 2>&1); rc=$?
    echo "---- $* (exit $rc): $(wc -l <<<"$out") lines"
    grep -E 'Version|Memory domain|Transport|Device|fi_getinfo|provider|domain|error|ERROR' <<<"$out" \
        | head -40 | sed 's/^/     /'
    if grep -qE 'symbol lookup error|version .* not found|error while loading shared libraries|undefined symbol' <<<"$out" \
        || [ "$rc" -ge 124 ]; then
        bad "$name does not start: $(head -3 <<<"$out" | tr '\n' ' ')"
    else
        ok "$name starts against target/compat (exit $rc)"
    fi
}
if command -v ucx_info >/dev/null 2>&1; then
    starts "ucx_info -v" ucx_info -v
    starts "ucx_info -d" ucx_info -d
fi
command -v fi_info >/dev/null 2>&1 && starts "fi_info -p verbs" fi_info -p verbs

# pyverbs: every module imports (the mlx5/efa ones need the full stub libraries) and the
# device list shows the configured device.
if [ -d /usr/lib/python3/dist-packages/pyverbs ] && [ -x /usr/bin/python3 ]; then
    out=$(LD_LIBRARY_PATH="$lib" LD_BIND_NOW=1 UROCE_DEVICES="uroce0=${COMPAT_ADDR_A:-127.0.0.1}" \
        timeout 60 /usr/bin/python3 - 2>&1 <<'PY'
import importlib, pkgutil, pyverbs
names = [m.name for m in pkgutil.walk_packages(pyverbs.__path__, 'pyverbs.')]
bad = []
for n in names:
    try:
        importlib.import_module(n)
    except Exception as e:
        bad.append(f"{n}: {e!r}")
import pyverbs.device as d
devs = [x.name.decode() for x in d.get_device_list()]
print(f"{len(names)} modules, failed {bad}, devices {devs}")
PY
)
    if grep -qE "modules, failed \[\], devices \['uroce0'\]" <<<"$out"; then
        ok "pyverbs imports against target/compat ($out)"
    else
        bad "pyverbs: $(tail -3 <<<"$out" | tr '\n' ' ')"
    fi
fi

[ ${#skipped[@]} = 0 ] || echo "loadall: packages not tested (not installed, or not installable here): ${skipped[*]}"
echo "loadall: $pass passed, $fail failed"
[ "$fail" = 0 ]
