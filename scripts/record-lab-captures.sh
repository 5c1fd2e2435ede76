#!/usr/bin/env bash
# Re-record testdata/lab-captures/ with the rxe lab (Linux Soft-RoCE in QEMU VMs).
#
#   sudo scripts/record-lab-captures.sh            # every capture
#   sudo scripts/record-lab-captures.sh verbs_mix  # only the named ones
#
# Needs root, the rxe lab (RXE_LAB, default /work/shared/rxe-lab; see its README), gcc and
# libibverbs-dev on the host (installed with apt-get if missing) to build
# testdata/lab-captures/tools/verbs_mix.c, and python3 for the ICRC check.
#
# Brings the lab up (it must be down), records each capture with the lab's `capture` script
# (server in vm1 = 10.77.0.11, client in vm2 = 10.77.0.12, tcpdump on vm2's tap) into a
# staging directory, checks every ICRC with tools/icrc_check.py, and only then copies the
# pcaps and the tools' outputs (NAME.pcap.server.txt / .client.txt) into
# testdata/lab-captures/. The lab is brought down on exit, also on failure.
# The recorded values (QPNs, PSNs, addresses, rkeys) differ on every run; the README's packet
# counts may differ slightly too (retransmissions depend on timing).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
LAB="${RXE_LAB:-/work/shared/rxe-lab}"
OUT="$ROOT/testdata/lab-captures"

die() { echo "record-lab-captures: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root (the lab creates a network namespace and VMs)"
[ -x "$LAB/up" ] && [ -x "$LAB/capture" ] || die "no rxe lab at $LAB (set RXE_LAB)"

WANT=("$@")
want() {
	[ ${#WANT[@]} -eq 0 ] && return 0
	local w
	for w in "${WANT[@]}"; do [ "$w" = "$1" ] && return 0; done
	return 1
}

STAGE="$(mktemp -d /tmp/lab-captures.XXXXXX)"
LAB_UP=0
cleanup() {
	if [ "$LAB_UP" = 1 ]; then "$LAB/down" >/dev/null 2>&1 || echo "record-lab-captures: $LAB/down failed" >&2; fi
	rm -rf "$STAGE"
}
trap cleanup EXIT

# ---------------------------------------------------------------- verbs_mix
if [ ! -e /usr/include/infiniband/verbs.h ]; then
	DEBIAN_FRONTEND=noninteractive apt-get install -y libibverbs-dev >/dev/null
fi
gcc -O2 -Wall -Wextra -o "$STAGE/verbs_mix" "$OUT/tools/verbs_mix.c" -libverbs

# ---------------------------------------------------------------- lab up
LAB_UP=1
"$LAB/up"
for vm in 1 2; do
	"$LAB/exec" -i "$vm" 'cat >/tmp/verbs_mix && chmod +x /tmp/verbs_mix' <"$STAGE/verbs_mix"
done

mkdir -p "$STAGE/out"
export CAPTURE_DIR="$STAGE/out"
RECORDED=()
# rec NAME TOOL ARGS...: TOOL ARGS as server in vm1, TOOL ARGS 10.77.0.11 as client in vm2.
rec() {
	local name="$1"
	shift
	want "$name" || return 0
	"$LAB/capture" "$name" 1 2 "$@"
	RECORDED+=("$name")
}

# IPv6 link-local GIDs (GID index 0)
rec rc_pingpong_ipv6 ibv_rc_pingpong -d rxe0 -g 0 -s 2500 -n 3
rec ud_pingpong_ipv6 ibv_ud_pingpong -d rxe0 -g 0 -s 100 -n 5
rec write_bw_ipv6 ib_write_bw -d rxe0 -x 0 -F -s 1500 -n 5
rec send_bw_ipv6 ib_send_bw -d rxe0 -x 0 -F -s 100 -n 5
rec read_bw_ipv6 ib_read_bw -d rxe0 -x 0 -F -s 1500 -n 5
rec atomic_bw_ipv6 ib_atomic_bw -d rxe0 -x 0 -F -A CMP_AND_SWAP -n 5
# path MTU 512
rec rc_pingpong_mtu512 ibv_rc_pingpong -d rxe0 -g 1 -m 512 -s 1500 -n 3
rec write_bw_mtu512 ib_write_bw -d rxe0 -x 1 -F -m 512 -s 1300 -n 5
rec read_bw_mtu512 ib_read_bw -d rxe0 -x 1 -F -m 512 -s 1300 -n 5
rec send_bw_mtu512 ib_send_bw -d rxe0 -x 1 -F -m 512 -s 1100 -n 5
# UD
rec ud_pingpong_100 ibv_ud_pingpong -d rxe0 -g 1 -s 100 -n 5
rec ud_pingpong_s0 ibv_ud_pingpong -d rxe0 -g 1 -s 0 -n 3
rec send_bw_ud ib_send_bw -d rxe0 -c UD -x 1 -F -s 512 -n 5
# UC
rec uc_pingpong ibv_uc_pingpong -d rxe0 -g 1 -s 2500 -n 3
rec write_bw_uc ib_write_bw -d rxe0 -c UC -x 1 -F -s 2500 -n 5
rec send_bw_uc ib_send_bw -d rxe0 -c UC -x 1 -F -s 1 -n 5
# atomics
rec atomic_bw_cas ib_atomic_bw -d rxe0 -x 1 -F -A CMP_AND_SWAP -n 5
rec atomic_bw_faa ib_atomic_bw -d rxe0 -x 1 -F -A FETCH_AND_ADD -n 5
rec atomic_lat ib_atomic_lat -d rxe0 -x 1 -F -n 5
# small and odd sizes (perftest refuses -s 0; zero-length RC is in verbs_mix)
rec write_bw_s1 ib_write_bw -d rxe0 -x 1 -F -s 1 -n 5
rec write_bw_s3 ib_write_bw -d rxe0 -x 1 -F -s 3 -n 5
rec write_bw_s1025 ib_write_bw -d rxe0 -x 1 -F -s 1025 -n 5
rec write_bw_s4097 ib_write_bw -d rxe0 -x 1 -F -s 4097 -n 5
rec send_bw_s1 ib_send_bw -d rxe0 -x 1 -F -s 1 -n 5
rec read_bw_s1 ib_read_bw -d rxe0 -x 1 -F -s 1 -n 5
rec read_bw_s2049 ib_read_bw -d rxe0 -x 1 -F -s 2049 -n 5
rec write_lat_s1 ib_write_lat -d rxe0 -x 1 -F -s 1 -n 5
rec send_lat_s3 ib_send_lat -d rxe0 -x 1 -F -s 3 -n 5
rec read_lat_s5 ib_read_lat -d rxe0 -x 1 -F -s 5 -n 5
rec srq_pingpong ibv_srq_pingpong -d rxe0 -g 1 -q 2 -s 65 -n 3
# immediates, invalidate, zero-length RC, SE bit, RNR NAK, NAK (tools/verbs_mix.c)
rec verbs_mix /tmp/verbs_mix -d rxe0 -g 1
rec verbs_mix_ipv6_mtu512 /tmp/verbs_mix -d rxe0 -g 0 -m 512

"$LAB/down"
LAB_UP=0

[ ${#RECORDED[@]} -gt 0 ] || die "no capture named ${WANT[*]}"
for name in "${RECORDED[@]}"; do
	python3 "$OUT/tools/icrc_check.py" "$CAPTURE_DIR/$name.pcap"
done
for name in "${RECORDED[@]}"; do
	cp "$CAPTURE_DIR/$name.pcap" "$CAPTURE_DIR/$name.pcap.server.txt" "$CAPTURE_DIR/$name.pcap.client.txt" "$OUT/"
done
echo "record-lab-captures: ${#RECORDED[@]} captures written to $OUT"
