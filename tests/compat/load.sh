#!/usr/bin/env bash
# Drop-in library test: the stock Debian 12 rdma-core 44 / perftest 4.5 binaries load
# against uroce's libraries in target/compat and see uroce's devices.
#
#   tests/compat/load.sh              # builds (scripts/build-compat.sh), then tests
#   tests/compat/load.sh --no-build   # tests what is already in target/compat
#   tests/compat/load.sh --debug      # builds the dev profile
#
# Needs the Debian packages ibverbs-utils, perftest and rdmacm-utils; as root it installs them,
# otherwise it skips with a message. gcc (for the small C ABI programs) and readelf/ldd are
# expected on the machine. Checks, with reference sections of docs/compat.md:
#   1. our four libraries carry the right SONAMEs and version nodes (§1);
#   2. every versioned symbol each tool imports from libibverbs/librdmacm/libmlx5/libefa is
#      exported by ours with the same version (§2) — checked statically with readelf;
#   3. the loader agrees: `ldd -r` resolves every tool's libraries from target/compat with no
#      missing symbol or version, and each tool starts without a loader error (§0: -z now);
#   4. `ibv_devices` lists exactly the devices of UROCE_DEVICES;
#   5. the device-free functions give byte-identical results to the system libraries, the
#      device list / GUID / sysfs emulation behave, and failing verbs set errno
#      (tests/compat/*.c); a deliberately failing ibv_modify_qp returns rdma-core's EINVAL
#      and, with UROCE_DEBUG=1 only, logs one line with the control plane's reason
#      (debug_reason.c; needs libibverbs-dev's headers, installed with the tools when root).
#   6. `ibv_devinfo -v` opens the device and describes it; its GUID matches ibv_devices'.
# Ends with a "N passed, M failed" line; exit status 1 if anything failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)

build=1
build_args=()
for arg in "$@"; do
    case "$arg" in
        --no-build) build=0 ;;
        --debug) build_args+=(--debug) ;;
        *) echo "load.sh: unknown option $arg" >&2; exit 2 ;;
    esac
done

pass=0
fail=0
ok() { echo "ok   $*"; pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }

tools=(ibv_devices ibv_devinfo ibv_rc_pingpong ibv_ud_pingpong ibv_srq_pingpong
       ib_write_bw ib_write_lat ib_read_bw ib_read_lat ib_send_bw ib_send_lat
       ib_atomic_bw ib_atomic_lat rping ucmatose)

missing=()
for t in "${tools[@]}"; do command -v "$t" >/dev/null 2>&1 || missing+=("$t"); done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        echo "load.sh: installing ibverbs-utils perftest rdmacm-utils (missing: ${missing[*]})"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >/dev/null 2>&1 || true
        if ! apt-get install -y -qq ibverbs-utils perftest rdmacm-utils >/dev/null 2>&1; then
            echo "SKIP: could not install ibverbs-utils perftest rdmacm-utils"
            exit 0
        fi
    else
        echo "SKIP: the Debian packages ibverbs-utils, perftest and rdmacm-utils are not" \
             "installed (missing: ${missing[*]}) and this is not root; install them and rerun"
        exit 0
    fi
fi
if [ ! -f /usr/include/infiniband/verbs.h ] && [ "$(id -u)" = 0 ]; then
    echo "load.sh: installing libibverbs-dev (verbs.h for debug_reason.c)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libibverbs-dev >/dev/null 2>&1 \
        || echo "load.sh: libibverbs-dev could not be installed; the UROCE_DEBUG check will skip"
fi
for need in gcc readelf ldd; do
    command -v "$need" >/dev/null 2>&1 || { echo "SKIP: $need not found"; exit 0; }
done

if [ "$build" = 1 ]; then
    scripts/build-compat.sh "${build_args[@]}" || { echo "FAIL build"; echo "0 passed, 1 failed"; exit 1; }
fi
lib="$repo/target/compat"
export LD_LIBRARY_PATH="$lib"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# ---- 1. SONAMEs and version nodes ----
declare -A nodes=(
    [libibverbs.so.1]="IBVERBS_1.0 IBVERBS_1.1 IBVERBS_1.5 IBVERBS_1.6 IBVERBS_1.7 IBVERBS_1.8 IBVERBS_1.9 IBVERBS_1.10 IBVERBS_1.11 IBVERBS_1.12 IBVERBS_1.13 IBVERBS_1.14 IBVERBS_PRIVATE_34"
    [librdmacm.so.1]="RDMACM_1.0 RDMACM_1.1 RDMACM_1.2 RDMACM_1.3"
    [libmlx5.so.1]="MLX5_1.0 MLX5_1.1 MLX5_1.2 MLX5_1.3 MLX5_1.4 MLX5_1.5 MLX5_1.6 MLX5_1.7 MLX5_1.8 MLX5_1.9 MLX5_1.10 MLX5_1.11 MLX5_1.12 MLX5_1.13 MLX5_1.14 MLX5_1.15 MLX5_1.16 MLX5_1.17 MLX5_1.18 MLX5_1.19 MLX5_1.20 MLX5_1.21 MLX5_1.22 MLX5_1.23 MLX5_1.24"
    [libefa.so.1]="EFA_1.0 EFA_1.1 EFA_1.2"
)
for so in "${!nodes[@]}"; do
    f="$lib/$so"
    if [ ! -f "$f" ]; then bad "$so missing from target/compat"; continue; fi
    soname=$(readelf -d "$f" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
    [ "$soname" = "$so" ] && ok "$so SONAME" || bad "$so SONAME is '$soname'"
    defs=$(readelf -W -V "$f" | sed -n '/Version definition/,/Version needs/p')
    miss=""
    for n in ${nodes[$so]}; do grep -q "Name: $n\$" <<<"$defs" || miss+=" $n"; done
    [ -z "$miss" ] && ok "$so defines its version nodes" || bad "$so lacks version nodes:$miss"
    # Every exported symbol carries a version (no accidental unversioned exports).
    unversioned=$(readelf -W --dyn-syms "$f" | awk '$7!="UND" && $5=="GLOBAL" && $8 !~ /@/ {print $8}')
    [ -z "$unversioned" ] && ok "$so exports only versioned symbols" \
        || bad "$so exports unversioned symbols: $(echo $unversioned | head -c 300)"
done

# The stubs export every function, under the same version, that rdma-core 44's libraries do
# (providers/mlx5/libmlx5.map, providers/efa/libefa.map, librdmacm/librdmacm.map), the old
# mlx5dv_init_obj@MLX5_1.0 included.
for so in libmlx5.so.1 libefa.so.1 librdmacm.so.1; do
    sys=/usr/lib/x86_64-linux-gnu/$so
    [ -f "$sys" ] || { echo "skip $so: no system $sys to compare with"; continue; }
    funcs() { readelf -W --dyn-syms "$1" | awk '$7!="UND" && $5=="GLOBAL" && $4=="FUNC" {print $8}' | sort -u; }
    absent=$(comm -23 <(funcs "$sys") <(funcs "$lib/$so") | tr '\n' ' ')
    n=$(funcs "$sys" | wc -l)
    [ -z "$absent" ] && ok "$so exports all $n functions of rdma-core 44's, same versions" \
        || bad "$so lacks: $absent"
done

# The full rdma-core 44 default-version set is exported (strategy A as well as B, §6.3),
# plus uroce's own rdma_cm entry points under UROCE_PRIVATE_1.0 (what librdmacm.so.1
# forwards to).
nexp=$(readelf -W --dyn-syms "$lib/libibverbs.so.1" | awk '$7!="UND" && $8 ~ /@@/ && $8 !~ /@@UROCE_PRIVATE_1.0$/' | wc -l)
[ "$nexp" = 146 ] && ok "libibverbs.so.1 exports 146 versioned symbols of rdma-core 44" \
    || bad "libibverbs.so.1 exports $nexp versioned symbols of rdma-core's nodes, expected 146"
nown=$(readelf -W --dyn-syms "$lib/libibverbs.so.1" | awk '$7!="UND" && $8 ~ /^uroce_rdma_.*@@UROCE_PRIVATE_1.0$/' | wc -l)
nfwd=$(grep -c '^uroce_rdma_' crates/ibverbs/exports.txt)
[ "$nown" = "$nfwd" ] && [ "$nown" -gt 0 ] && ok "libibverbs.so.1 exports its $nown uroce_rdma_* functions under UROCE_PRIVATE_1.0" \
    || bad "libibverbs.so.1 exports $nown uroce_rdma_* functions, exports.txt lists $nfwd"
dynsyms=$(readelf -W --dyn-syms "$lib/libibverbs.so.1")
grep -qE ' 1 OBJECT +GLOBAL DEFAULT .* verbs_allow_disassociate_destroy@@IBVERBS_PRIVATE_34' <<<"$dynsyms" \
    && ok "verbs_allow_disassociate_destroy is a 1-byte object" \
    || bad "verbs_allow_disassociate_destroy data symbol"

# ---- 2. every import of every tool is exported with its version ----
exports="$work/exports"
for so in libibverbs.so.1 librdmacm.so.1 libmlx5.so.1 libefa.so.1; do
    readelf -W --dyn-syms "$lib/$so" | awk '$7!="UND" && $8 ~ /@@/ {sub("@@","@",$8); print $8}'
done | sort -u >"$exports"
for t in "${tools[@]}"; do
    path=$(command -v "$t")
    imports=$(readelf -W --dyn-syms "$path" | awk '$7=="UND" {print $8}' \
        | grep -E '@(IBVERBS|RDMACM|MLX5|EFA)_' | sed 's/ (.*//' | sort -u)
    n=$(wc -w <<<"$imports")
    absent=$(comm -23 <(tr ' ' '\n' <<<"$imports" | sed '/^$/d') "$exports" | tr '\n' ' ')
    [ -z "$absent" ] && ok "$t: all $n versioned imports exported" \
        || bad "$t imports symbols we do not export: $absent"
done

# ---- 3. the dynamic loader agrees ----
for t in "${tools[@]}"; do
    path=$(command -v "$t")
    out=$(ldd -r "$path" 2>&1)
    if grep -qE 'not found|undefined symbol|version .* not found' <<<"$out"; then
        bad "$t: ldd -r: $(grep -E 'not found|undefined symbol' <<<"$out" | head -3 | tr '\n' ' ')"
        continue
    fi
    wrong=""
    for so in libibverbs.so.1 librdmacm.so.1 libmlx5.so.1 libefa.so.1; do
        line=$(grep "$so =>" <<<"$out") || continue
        grep -q "=> $lib/$so " <<<"$line" || wrong+=" $line"
    done
    [ -z "$wrong" ] && ok "$t: ldd -r clean, libraries from target/compat" \
        || bad "$t resolves outside target/compat:$wrong"
    # Start it (usage output only): with -z now every symbol binds before main.
    run=$(timeout 10 "$path" --help 2>&1 </dev/null)
    if grep -qE 'symbol lookup error|version .* not found|error while loading shared libraries' <<<"$run"; then
        bad "$t does not start: $(head -2 <<<"$run" | tr '\n' ' ')"
    else
        ok "$t starts"
    fi
done

# Strategy A (§6.3): our libibverbs alone, with the *system* libmlx5/libefa/librdmacm, which
# import the provider interface (IBVERBS_PRIVATE_34) and more IBVERBS_1.x symbols.
mkdir -p "$work/only-ibverbs"
cp "$lib/libibverbs.so.1" "$work/only-ibverbs/"
for t in ib_write_bw ib_send_lat rping; do
    out=$(LD_LIBRARY_PATH="$work/only-ibverbs" ldd -r "$(command -v "$t")" 2>&1)
    if grep -qE 'not found|undefined symbol' <<<"$out"; then
        bad "$t with the system providers: $(grep -E 'not found|undefined symbol' <<<"$out" | head -3 | tr '\n' ' ')"
    else
        ok "$t loads with only our libibverbs (system libmlx5/libefa/librdmacm)"
    fi
done

# ---- 4. ibv_devices lists the configured devices ----
out=$(UROCE_DEVICES=uroce0=127.0.0.1,uroce1=127.0.0.2 ibv_devices 2>&1)
if grep -qE '^\s+uroce0\s+00007ffffe000001$' <<<"$out" && grep -qE '^\s+uroce1\s+00007ffffe000002$' <<<"$out"; then
    ok "ibv_devices lists uroce0 and uroce1 with their GUIDs"
else
    bad "ibv_devices output: $out"
fi
out=$(env -u UROCE_DEVICES ibv_devices 2>&1)
[ "$(grep -c uroce <<<"$out")" = 1 ] && grep -q 'uroce0' <<<"$out" \
    && ok "ibv_devices defaults to uroce0" || bad "ibv_devices default: $out"
out=$(UROCE_DEVICES='uroce0' ibv_devices 2>&1)
grep -q 'UROCE_DEVICES' <<<"$out" && ok "a malformed UROCE_DEVICES is reported" \
    || bad "malformed UROCE_DEVICES not reported: $out"

# ---- 5. C ABI programs ----
if gcc -O1 -Wall -Wextra -Werror -o "$work/pure_api" tests/compat/pure_api.c \
        /usr/lib/x86_64-linux-gnu/libibverbs.so.1 /usr/lib/x86_64-linux-gnu/librdmacm.so.1 \
    && gcc -O1 -Wall -Wextra -Werror -o "$work/devlist" tests/compat/devlist.c \
        /usr/lib/x86_64-linux-gnu/libibverbs.so.1; then
    env -u LD_LIBRARY_PATH "$work/pure_api" >"$work/sys.out" 2>&1
    "$work/pure_api" >"$work/ours.out" 2>&1
    if [ -s "$work/sys.out" ] && cmp -s "$work/sys.out" "$work/ours.out"; then
        ok "pure functions match rdma-core 44 ($(wc -l <"$work/sys.out") results)"
    else
        bad "pure functions differ from rdma-core 44: $(diff "$work/sys.out" "$work/ours.out" | head -5 | tr '\n' ' ')"
    fi
    UROCE_DEVICES=uroce0=127.0.0.1,uroce1=127.0.0.2 "$work/devlist" uroce0 uroce1 >"$work/devlist.out" 2>&1 \
        && ok "device list, GUID, index, sysfs emulation, PD busy while an MR uses it" \
        || bad "devlist: $(cat "$work/devlist.out")"
    UROCE_DEVICES=nonsense "$work/devlist" >"$work/devlist.out" 2>&1 \
        && ok "bad device list fails with EINVAL" || bad "devlist bad env: $(cat "$work/devlist.out")"
else
    bad "compiling the C ABI programs"
fi
# A failing ibv_modify_qp: rdma-core's return value for the caller, and with UROCE_DEBUG=1
# one stderr line with the verb, the errno and the control plane's reason (none without).
if [ ! -f /usr/include/infiniband/verbs.h ]; then
    echo "skip UROCE_DEBUG reason line: /usr/include/infiniband/verbs.h missing (libibverbs-dev)"
elif gcc -O1 -Wall -Wextra -Werror -o "$work/debug_reason" tests/compat/debug_reason.c \
        /usr/lib/x86_64-linux-gnu/libibverbs.so.1; then
    A=${COMPAT_ADDR_A:-127.0.0.1}
    UROCE_DEBUG=1 UROCE_DEVICES="uroce0=$A" timeout 30 "$work/debug_reason" \
        >"$work/dbg.out" 2>"$work/dbg.err"
    rc=$?
    want='^uroce: ibv_modify_qp: EINVAL \(22\): modify_qp: INIT -> RTR: DEST_QPN missing from attr_mask \[MISSING_ATTR\]$'
    if [ $rc = 0 ] && [ "$(wc -l <"$work/dbg.err")" = 1 ] && grep -qE "$want" "$work/dbg.err"; then
        ok "UROCE_DEBUG=1: failing ibv_modify_qp returns EINVAL and logs '$(cat "$work/dbg.err")'"
    else
        bad "UROCE_DEBUG reason line (rc $rc): $(cat "$work/dbg.out" "$work/dbg.err" | head -5 | tr '\n' ' ')"
    fi
    UROCE_DEVICES="uroce0=$A" timeout 30 "$work/debug_reason" >"$work/dbg.out" 2>"$work/dbg.err"
    rc=$?
    if [ $rc = 0 ] && [ ! -s "$work/dbg.err" ]; then
        ok "without UROCE_DEBUG: same EINVAL, nothing on stderr"
    else
        bad "without UROCE_DEBUG (rc $rc): $(cat "$work/dbg.out" "$work/dbg.err" | head -5 | tr '\n' ' ')"
    fi
else
    bad "compiling tests/compat/debug_reason.c"
fi

# Failing verbs set errno as rdma-core's do (tests/compat/errno.c, built with rdma-core's own
# <infiniband/verbs.h> from libibverbs-dev, so the inline verbs are rdma-core's too).
if [ ! -f /usr/include/infiniband/verbs.h ] && [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libibverbs-dev >/dev/null 2>&1 || true
fi
if [ ! -f /usr/include/infiniband/verbs.h ]; then
    echo "skip errno.c: <infiniband/verbs.h> not installed (Debian package libibverbs-dev)"
elif gcc -O1 -Wall -Wextra -Werror -o "$work/errno" tests/compat/errno.c \
        /usr/lib/x86_64-linux-gnu/libibverbs.so.1; then
    out=$(UROCE_DEVICES="uroce0=${COMPAT_ADDR_A:-127.0.0.1}" timeout 30 "$work/errno" 2>&1)
    if [ $? = 0 ]; then ok "failing verbs set errno as rdma-core's ($(tail -1 <<<"$out"))"
    else bad "errno.c: $(tr '\n' ' ' <<<"$out")"; fi
else
    bad "compiling tests/compat/errno.c"
fi

# two_device_c_test NAME WHAT: build tests/compat/NAME.c against rdma-core's own
# <infiniband/verbs.h> (so the inline verbs are rdma-core's) and run it on one device and
# between two embedded devices; WHAT names it in the result line.
two_device_c_test() {
    local name=$1 what=$2 devs out
    if [ ! -f /usr/include/infiniband/verbs.h ]; then
        echo "skip $name.c: <infiniband/verbs.h> not installed (Debian package libibverbs-dev)"
    elif gcc -O1 -Wall -Wextra -Werror -o "$work/$name" "tests/compat/$name.c" \
            /usr/lib/x86_64-linux-gnu/libibverbs.so.1; then
        for devs in "uroce0=${COMPAT_ADDR_A:-127.0.0.1}" \
                    "uroce0=${COMPAT_ADDR_A:-127.0.0.1},uroce1=${COMPAT_ADDR_B:-127.0.0.2}"; do
            out=$(UROCE_DEVICES="$devs" timeout 120 "$work/$name" 2>&1)
            if [ $? = 0 ]; then ok "$what ($(tail -1 <<<"$out"))"
            else bad "$name.c with $devs: $(tr '\n' ' ' <<<"$out")"; fi
        done
    else
        bad "compiling tests/compat/$name.c"
    fi
}

# The extended verbs (ibv_create_cq_ex + start_poll/ibv_wc_read_*, ibv_create_qp_ex with
# send_ops_flags + ibv_wr_*): data checked, and the refusals (tests/compat/exverbs.c).
two_device_c_test exverbs "extended CQs and QPs, ibv_wr_*"
# ibv_rereg_mr (access, translation, PD; rdma-core's return values and errno) and a real
# context->cmd_fd (dup-able; ibv_import_device EOPNOTSUPP) (tests/compat/rereg.c).
two_device_c_test rereg "ibv_rereg_mr and cmd_fd"
# Memory windows (type 1 through ibv_bind_mw, type 2 through IBV_WR_BIND_MW, LOCAL_INV,
# SEND_WITH_INV, the bind errors) (tests/compat/mw.c).
two_device_c_test mw "memory windows"
# XRC: domains (file and anonymous), XRC SRQs, XRC_SEND/XRC_RECV QPs, SEND/WRITE/READ/atomic
# through them with the data checked, the Invalid Request NAK of a wrong SRQ number
# (tests/compat/xrc.c).
two_device_c_test xrc "XRC domains, SRQs and QPs"

# uroce's librdmacm through rdma-core's own <rdma/rdma_cma.h> (librdmacm-dev): address and
# route resolution, rdma_create_qp's CQs, and misuse (destroyed IDs and channels) refused
# with errno rather than a crash (tests/compat/rdmacm_api.c).
if [ ! -f /usr/include/rdma/rdma_cma.h ] && [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq librdmacm-dev >/dev/null 2>&1 || true
fi
if [ ! -f /usr/include/rdma/rdma_cma.h ] || [ ! -f /usr/lib/x86_64-linux-gnu/librdmacm.so.1 ]; then
    echo "skip rdmacm_api.c: <rdma/rdma_cma.h> not installed (Debian package librdmacm-dev)"
elif gcc -O1 -Wall -Wextra -Werror -o "$work/rdmacm_api" tests/compat/rdmacm_api.c \
        /usr/lib/x86_64-linux-gnu/librdmacm.so.1 /usr/lib/x86_64-linux-gnu/libibverbs.so.1; then
    addr=${COMPAT_ADDR_A:-127.0.0.1}
    out=$(UROCE_DEVICES="uroce0=$addr" timeout 30 "$work/rdmacm_api" "$addr" 2>&1)
    if [ $? = 0 ]; then ok "librdmacm API and misuse ($(tail -1 <<<"$out"))"
    else bad "rdmacm_api.c: $(tr '\n' ' ' <<<"$out")"; fi
else
    bad "compiling tests/compat/rdmacm_api.c"
fi

# Selective repeat negotiated in the CM's ECE fields between two devices of one process:
# ibv_set_ece on both, one or neither side, then UROCE_SELECTIVE_REPEAT=1 instead; and
# rdma_reject_ece (tests/compat/rdmacm_ece.c; docs/wire.md section 5.6).
if [ ! -f /usr/include/rdma/rdma_cma.h ] || [ ! -f /usr/lib/x86_64-linux-gnu/librdmacm.so.1 ]; then
    echo "skip rdmacm_ece.c: <rdma/rdma_cma.h> not installed (Debian package librdmacm-dev)"
elif gcc -O1 -Wall -Wextra -Werror -o "$work/rdmacm_ece" tests/compat/rdmacm_ece.c \
        /usr/lib/x86_64-linux-gnu/librdmacm.so.1 /usr/lib/x86_64-linux-gnu/libibverbs.so.1; then
    a=${COMPAT_ADDR_A:-127.0.0.1} b=${COMPAT_ADDR_B:-127.0.0.2}
    for mode in asked env; do
        if [ "$mode" = env ]; then envs=(UROCE_SELECTIVE_REPEAT=1); else envs=(); fi
        out=$(env "${envs[@]}" UROCE_DEVICES="uroce0=$a,uroce1=$b" timeout 60 \
            "$work/rdmacm_ece" "$a" "$b" "$mode" 2>&1)
        if [ $? = 0 ]; then ok "selective repeat through ECE, $mode ($(tail -1 <<<"$out"))"
        else bad "rdmacm_ece.c ($mode): $(tr '\n' ' ' <<<"$out")"; fi
    done
else
    bad "compiling tests/compat/rdmacm_ece.c"
fi

# ---- 6. ibv_devinfo -v opens the device and describes it ----
# The device binds UDP 4791 on its address; COMPAT_ADDR_A picks another loopback address
# if 127.0.0.1:4791 is taken on this machine.
A=${COMPAT_ADDR_A:-127.0.0.1}
out=$(UROCE_DEVICES="uroce0=$A" timeout 30 ibv_devinfo -v 2>&1)
miss=""
for want in 'hca_id:\s+uroce0' 'transport:\s+InfiniBand \(0\)' 'vendor_id:\s+0xffffff' \
            'vendor_part_id:\s+0$' 'board_id:\s+UROCE' 'phys_port_cnt:\s+1' \
            'state:\s+PORT_ACTIVE \(4\)' 'link_layer:\s+Ethernet' \
            "GID\\[ *0\\]:\\s+::ffff:$A, RoCE v2"; do
    grep -qE "$want" <<<"$out" || miss+=" [$want]"
done
[ -z "$miss" ] && ok "ibv_devinfo -v describes uroce0 (port active, Ethernet, RoCE v2 GID)" \
    || bad "ibv_devinfo -v lacks$miss: $(head -12 <<<"$out" | tr '\n' ' ')"
# ibv_devices computes the GUID without opening the device; it must match QUERY_DEVICE's.
g_info=$(sed -n 's/^\s*node_guid:\s*\([0-9a-f:]*\)$/\1/p' <<<"$out" | tr -d ':')
g_list=$(UROCE_DEVICES="uroce0=$A" ibv_devices 2>&1 | awk '$1=="uroce0"{print $2}')
[ -n "$g_info" ] && [ "$g_info" = "$g_list" ] && ok "ibv_devices GUID matches ibv_devinfo ($g_list)" \
    || bad "GUID mismatch: ibv_devices '$g_list', ibv_devinfo '$g_info'"

echo "compat: $pass passed, $fail failed"
[ "$fail" = 0 ]
