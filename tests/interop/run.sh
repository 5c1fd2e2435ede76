#!/usr/bin/env bash
# uroce against Linux Soft-RoCE (rdma_rxe), both directions.
#
#   sudo tests/interop/run.sh                  # build, lab up, whole matrix, lab down
#   sudo tests/interop/run.sh --no-build       # use target/release/uroce and target/compat as they are
#   sudo tests/interop/run.sh --only 'write|v6' --list
#
# The rxe lab (../shared/rxe-lab, or $RXE_LAB; see its README) boots a QEMU VM running the
# Debian kernel's rdma_rxe with rdma-core 44 and perftest 4.5 on a bridge inside the
# network namespace "rxelab". uroce joins that segment as a third host: its processes run
# in the namespace with a device bound to the bridge address 10.77.0.1 (IPv4-mapped GID
# ::ffff:10.77.0.1) or to the link-local fe80::1 added to the bridge (IPv6 GID); the
# guest vm1 is 10.77.0.11, its rxe0 GID index 1 ::ffff:10.77.0.11 and GID index 0 its
# link-local fe80::5054:ff:fe77:b.
#
# Matrix (every cell twice: uroce as server with rxe as client, and rxe as server with
# uroce as client):
#   * the stock ibv_{rc,ud,srq}_pingpong and perftest ib_{write,read,send,atomic}_{bw,lat}
#     running on uroce's drop-in libibverbs.so.1 (target/compat) against the same tools
#     on rxe: 1-byte, odd and multi-MTU sizes, -m 512, -e, -c UD, -o, both atomics;
#   * `uroce pingpong` and `uroce bench` against the stock tools on rxe;
#   * a subset over IPv6 link-local GIDs.
# A cell passes when
#   * both sides exit 0 and print their result line, and no "invalid data" (--chk);
#   * ping-pong data is intact (tests/interop/analyze.py: the tools echo their buffer,
#     so every message of a run must equal the first one);
#   * `uroce decode` finds every packet a RoCEv2 packet with a correct ICRC, and so does
#     the lab's tools/icrc_check.py (IPv4 packets);
#   * tshark dissects every packet as InfiniBand and flags none that uroce sent. tshark's
#     heuristic payload dissectors (RPC-over-RDMA, Mellanox EoIB, Ethernet-over-IB, SMB
#     Direct, ...) guess at SEND and WRITE payloads and mark small ones "[Malformed
#     Packet]" even between two rxe hosts (testdata/lab-captures/send_bw_s1.pcap), so the
#     check runs with them disabled (a self-test first shows that a truncated packet is
#     still flagged); their default-settings count is only reported. rxe's own IPv6 packets
#     carry UDP checksum 0, which tshark reports as an error; that is rxe's, and reported;
#   * nobody retransmits and nobody NAKs (analyze.py, from the capture), except uroce
#     after a late rxe and rxe's early timer retransmissions. analyze.py measures rxe's
#     answer time to every uroce request: a uroce retransmission made when rxe had let a
#     request wait a full QP timeout, and that rxe answered in the end, is the local ACK
#     timeout working against a slow emulated peer; it is reported, not failed, and so are
#     what it moves: rxe's duplicate_request and uroce's retransmissions and
#     local_ack_timeouts, each at most the number of such retransmissions. A uroce
#     retransmission after rxe had answered, or before any request had waited a full QP
#     timeout, fails the cell (one that an rxe NAK asked for is counted; the NAK fails
#     the cell). A uroce retransmission before a full QP timeout is allowed only as a
#     probe of its retransmission timer, which is off until a QP has lost something:
#     on a QP where uroce had already resent after a timeout, at least 1 ms (the timer's
#     floor) after the original, of a request rxe had not answered yet and answered
#     later; counted with the late ones above. Then rxe's
#     spurious timer retransmissions: rxe's retransmit timer fires one QP timeout after
#     the first packet of a run whatever was acknowledged since, and then resends what is
#     outstanding at that instant — also between two rxe hosts under this emulation; one
#     that follows its original by less than the QP timeout is reported, not failed, as
#     long as uroce answered every request that asked for an answer (AckReq, READ,
#     atomic) within the QP timeout (analyze.py measures each answer time; a later one
#     fails the cell). rxe 6.1's timer is armed only when none is pending and never
#     cancelled (rxe_req.c update_state, rxe_comp.c; checked in the guest's rdma_rxe.ko),
#     so its completer_retry_err cannot stay at zero on long runs whatever the peer does;
#   * the capture is complete (tcpdump reports no packet dropped by the kernel);
#   * the guest's rxe hw_counters (rdma statistic) move by zero for duplicate_request,
#     out_of_seq_request, rcvd_seq_err, rcvd_rnr_err, send_rnr_err, retry_exceeded_err,
#     retry_rnr_exceeded_err, send_err, link_downed, and completer_retry_err only along
#     with such spurious retransmissions; neither kernel (the namespace uroce runs in,
#     the guest) counts a UDP receive error (InErrors, RcvbufErrors, InCsumErrors) —
#     except, on uroce's side, for rxe packets that arrive after uroce's last one, when
#     the tool may have exited already (ibv_srq_pingpong leaves a SEND's ACK in flight);
#   * uroce's own counters (`uroce stat`, sampled every 0.05 s while the cell runs, and
#     `uroce stat --exited` at the end: the snapshot the uroce process left at its exit
#     with UROCE_STATS_KEEP=1, which must be there and count its packets) show no
#     retransmission, timeout, NAK, RNR, sequence error, drop, bad ICRC, address mismatch
#     or send error; duplicate_request only along with rxe's early retransmissions.
# Retried once (and said so): a cell whose only failure is the guest's perftest failing to
# calibrate its clock under emulation ("Correlation coefficient r^2 ... Can't produce a
# report"), and a cell whose only failure is that rxe resent after a full QP timeout
# because uroce answered late — on an oversubscribed host (two emulated vCPUs plus two
# spinning uroce threads on two cores, or other load) a thread can miss 100 ms; the
# final lines count these retries. Retried up to four times: a perftest -R cell whose
# client connected before its server listened (REJ reason 8 / SIDR status 1, perftest's
# own race: its server listens for the test connection only after the parameter swap,
# milliseconds later, on an emulated guest or a loaded host more; a loaded host once made
# the retries lose it five times in a row). So the client's connections after the first,
# on either side, are held back 300 ms by a preloaded shim (tests/interop/connect_delay.c),
# and the cell's notes say when it acted.
#
# Artifacts: target/interop/ (per cell: pcap, both outputs, decode, analysis, counters).
# Needs root, qemu, tcpdump, tshark, python3, ibverbs-utils and perftest on the host and
# the Debian package mirror (the lab's ./build installs its host packages and downloads
# the guest's); without them it prints "SKIPPED: <why>" and exits 0. The lab is always
# brought down at the end, also on failure or interruption. Ends with "N passed, M failed";
# exit status 1 if anything failed. Runtime: about 10-15 minutes (the VM is emulated).
# INTEROP_REPEAT=N runs every selected cell N times (for hunting intermittent failures).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
ROOT=$(pwd)

build=1
only=""
list=0
while [ $# -gt 0 ]; do
    case "$1" in
        --no-build) build=0 ;;
        --only) only=${2:-}; shift ;;
        --list) list=1 ;;
        -h|--help) sed -n '2,/^set -uo pipefail/{/^set -uo/d;p}' "$0"; exit 0 ;;
        *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done

LAB=${RXE_LAB:-$ROOT/../shared/rxe-lab}
OUT=$ROOT/target/interop
NS=rxelab
U4=10.77.0.1
U6=fe80::1
G4=10.77.0.11
TOOL_TIMEOUT=${INTEROP_TOOL_TIMEOUT:-90}
QP_TIMEOUT_US=67109 # 4.096 us * 2^14: the QP timeout all these tools use

skip() { echo "SKIPPED: $*"; exit 0; }

# ------------------------------------------------------------------- the matrix
# both NAME FLAGS "UROCE-SIDE COMMAND" "RXE-SIDE COMMAND"
#   FLAGS: pp (ping-pong output and data check), perf (perftest result row), v6 (IPv6 GIDs),
#   cm (connects through rdma_cm: the IB CM's MADs on QP 1; the tool's own success output),
#   noport (the tool has a fixed port and no -p)
#   The uroce side runs in the namespace; "uroce ..." is the CLI, anything else a stock
#   tool on the drop-in libraries. The rxe side runs in vm1. The client gets the server's
#   address appended; both get -p PORT. A command that names the roles itself says
#   @SRV{...} (only in the server's command), @CLI{...} (only in the client's), @SELF@ (its
#   own address) and @PEER@ (the server's address; then nothing is appended).
CELLS=()
both() { CELLS+=("$1|$2|$3|$4|uroce" "$1|$2|$3|$4|rxe"); }

# Stock tools on the drop-in libibverbs.so.1, IPv4-mapped GIDs.
both rc_pingpong_s1         pp   "ibv_rc_pingpong -g 0 -s 1 -n 10 -c"             "ibv_rc_pingpong -d rxe0 -g 1 -s 1 -n 10 -c"
both rc_pingpong_s4096      pp   "ibv_rc_pingpong -g 0 -s 4096 -n 10 -c"          "ibv_rc_pingpong -d rxe0 -g 1 -s 4096 -n 10 -c"
both rc_pingpong_s2500_m512 pp   "ibv_rc_pingpong -g 0 -s 2500 -m 512 -n 10 -c"   "ibv_rc_pingpong -d rxe0 -g 1 -s 2500 -m 512 -n 10 -c"
both rc_pingpong_s1025_e    pp   "ibv_rc_pingpong -g 0 -s 1025 -n 10 -e -c"       "ibv_rc_pingpong -d rxe0 -g 1 -s 1025 -n 10 -e -c"
both ud_pingpong_s1         pp   "ibv_ud_pingpong -g 0 -s 1 -n 10 -c"             "ibv_ud_pingpong -d rxe0 -g 1 -s 1 -n 10 -c"
both ud_pingpong_s1000_e    pp   "ibv_ud_pingpong -g 0 -s 1000 -n 10 -e -c"       "ibv_ud_pingpong -d rxe0 -g 1 -s 1000 -n 10 -e -c"
both srq_pingpong_q2_s2049  pp   "ibv_srq_pingpong -g 0 -q 2 -s 2049 -n 10 -c"    "ibv_srq_pingpong -d rxe0 -g 1 -q 2 -s 2049 -n 10 -c"
both srq_pingpong_q3_e      pp   "ibv_srq_pingpong -g 0 -q 3 -s 100 -n 12 -e -c"  "ibv_srq_pingpong -d rxe0 -g 1 -q 3 -s 100 -n 12 -e -c"
both write_bw_s1            perf "ib_write_bw -d uroce0 -x 0 -s 1 -n 20"          "ib_write_bw -d rxe0 -x 1 -F -s 1 -n 20"
both write_bw_s4097         perf "ib_write_bw -d uroce0 -x 0 -s 4097 -n 10"       "ib_write_bw -d rxe0 -x 1 -F -s 4097 -n 10"
both write_bw_s65536        perf "ib_write_bw -d uroce0 -x 0 -s 65536 -n 5"       "ib_write_bw -d rxe0 -x 1 -F -s 65536 -n 5"
both write_bw_s1300_m512    perf "ib_write_bw -d uroce0 -x 0 -s 1300 -m 512 -n 10" "ib_write_bw -d rxe0 -x 1 -F -s 1300 -m 512 -n 10"
both write_lat_s1           perf "ib_write_lat -d uroce0 -x 0 -s 1 -n 20"         "ib_write_lat -d rxe0 -x 1 -F -s 1 -n 20"
both write_lat_s2500        perf "ib_write_lat -d uroce0 -x 0 -s 2500 -n 10"      "ib_write_lat -d rxe0 -x 1 -F -s 2500 -n 10"
both read_bw_s1             perf "ib_read_bw -d uroce0 -x 0 -s 1 -n 20"           "ib_read_bw -d rxe0 -x 1 -F -s 1 -n 20"
both read_bw_s2049_o4       perf "ib_read_bw -d uroce0 -x 0 -s 2049 -n 10 -o 4"   "ib_read_bw -d rxe0 -x 1 -F -s 2049 -n 10 -o 4"
both read_bw_s1300_m512     perf "ib_read_bw -d uroce0 -x 0 -s 1300 -m 512 -n 10" "ib_read_bw -d rxe0 -x 1 -F -s 1300 -m 512 -n 10"
both read_lat_s5            perf "ib_read_lat -d uroce0 -x 0 -s 5 -n 20"          "ib_read_lat -d rxe0 -x 1 -F -s 5 -n 20"
both read_lat_s3000_o1      perf "ib_read_lat -d uroce0 -x 0 -s 3000 -n 10 -o 1"  "ib_read_lat -d rxe0 -x 1 -F -s 3000 -n 10 -o 1"
both send_bw_s1             perf "ib_send_bw -d uroce0 -x 0 -s 1 -n 20"           "ib_send_bw -d rxe0 -x 1 -F -s 1 -n 20"
both send_bw_s2500          perf "ib_send_bw -d uroce0 -x 0 -s 2500 -n 10"        "ib_send_bw -d rxe0 -x 1 -F -s 2500 -n 10"
both send_bw_s1100_m512     perf "ib_send_bw -d uroce0 -x 0 -s 1100 -m 512 -n 10" "ib_send_bw -d rxe0 -x 1 -F -s 1100 -m 512 -n 10"
both send_bw_s100_e         perf "ib_send_bw -d uroce0 -x 0 -s 100 -n 20 -e"      "ib_send_bw -d rxe0 -x 1 -F -s 100 -n 20 -e"
both send_bw_ud_s512        perf "ib_send_bw -d uroce0 -x 0 -c UD -s 512 -n 20"   "ib_send_bw -d rxe0 -x 1 -F -c UD -s 512 -n 20"
both send_lat_s3            perf "ib_send_lat -d uroce0 -x 0 -s 3 -n 20"          "ib_send_lat -d rxe0 -x 1 -F -s 3 -n 20"
both send_lat_s1500_e       perf "ib_send_lat -d uroce0 -x 0 -s 1500 -n 10 -e"    "ib_send_lat -d rxe0 -x 1 -F -s 1500 -n 10 -e"
both send_lat_ud_s100       perf "ib_send_lat -d uroce0 -x 0 -c UD -s 100 -n 20"  "ib_send_lat -d rxe0 -x 1 -F -c UD -s 100 -n 20"
both atomic_bw_faa          perf "ib_atomic_bw -d uroce0 -x 0 -A FETCH_AND_ADD -n 20"     "ib_atomic_bw -d rxe0 -x 1 -F -A FETCH_AND_ADD -n 20"
both atomic_bw_cas_o4       perf "ib_atomic_bw -d uroce0 -x 0 -A CMP_AND_SWAP -n 20 -o 4" "ib_atomic_bw -d rxe0 -x 1 -F -A CMP_AND_SWAP -n 20 -o 4"
both atomic_lat_faa         perf "ib_atomic_lat -d uroce0 -x 0 -A FETCH_AND_ADD -n 20"    "ib_atomic_lat -d rxe0 -x 1 -F -A FETCH_AND_ADD -n 20"
both atomic_lat_cas         perf "ib_atomic_lat -d uroce0 -x 0 -A CMP_AND_SWAP -n 20"     "ib_atomic_lat -d rxe0 -x 1 -F -A CMP_AND_SWAP -n 20"
# IPv6 link-local GIDs (uroce bound to fe80::1 on the bridge, rxe's GID index 0).
both v6_rc_pingpong_s2500   pp,v6   "ibv_rc_pingpong -g 0 -s 2500 -n 10 -c"      "ibv_rc_pingpong -d rxe0 -g 0 -s 2500 -n 10 -c"
both v6_ud_pingpong_s100    pp,v6   "ibv_ud_pingpong -g 0 -s 100 -n 10 -c"       "ibv_ud_pingpong -d rxe0 -g 0 -s 100 -n 10 -c"
both v6_srq_pingpong        pp,v6   "ibv_srq_pingpong -g 0 -q 2 -s 1500 -n 10 -c" "ibv_srq_pingpong -d rxe0 -g 0 -q 2 -s 1500 -n 10 -c"
both v6_write_bw_s1500      perf,v6 "ib_write_bw -d uroce0 -x 0 -s 1500 -n 10"   "ib_write_bw -d rxe0 -x 0 -F -s 1500 -n 10"
both v6_read_bw_s1500       perf,v6 "ib_read_bw -d uroce0 -x 0 -s 1500 -n 10"    "ib_read_bw -d rxe0 -x 0 -F -s 1500 -n 10"
both v6_send_bw_s100        perf,v6 "ib_send_bw -d uroce0 -x 0 -s 100 -n 10"     "ib_send_bw -d rxe0 -x 0 -F -s 100 -n 10"
both v6_send_bw_ud_s256     perf,v6 "ib_send_bw -d uroce0 -x 0 -c UD -s 256 -n 10" "ib_send_bw -d rxe0 -x 0 -F -c UD -s 256 -n 10"
both v6_atomic_bw_cas       perf,v6 "ib_atomic_bw -d uroce0 -x 0 -A CMP_AND_SWAP -n 10" "ib_atomic_bw -d rxe0 -x 0 -F -A CMP_AND_SWAP -n 10"
both v6_send_lat_s3         perf,v6 "ib_send_lat -d uroce0 -x 0 -s 3 -n 10"      "ib_send_lat -d rxe0 -x 0 -F -s 3 -n 10"
# rdma_cm: rdmacm-utils and perftest -R on the drop-in librdmacm.so.1 against rdma-core's
# librdmacm over the kernel's ib_cm/rdma_cm; IPv4-mapped GIDs.
both cm_rping_v_c10       cm   "rping @SRV{-s -a @SELF@}@CLI{-c -a @PEER@} -C 10 -v"   "rping @SRV{-s -a @SELF@}@CLI{-c -a @PEER@} -C 10 -v"
both cm_rping_s4000_v     cm   "rping @SRV{-s -a @SELF@}@CLI{-c -a @PEER@} -S 4000 -C 5 -v" "rping @SRV{-s -a @SELF@}@CLI{-c -a @PEER@} -S 4000 -C 5 -v"
both cm_ucmatose_c4       cm   "ucmatose @SRV{-b @SELF@}@CLI{-s @PEER@} -c 4 -C 10"   "ucmatose @SRV{-b @SELF@}@CLI{-s @PEER@} -c 4 -C 10"
both cm_udaddy            cm,noport "udaddy @SRV{-b @SELF@}@CLI{-s @PEER@}"         "udaddy @SRV{-b @SELF@}@CLI{-s @PEER@}"
both cm_udaddy_c4_s1000    cm,noport "udaddy @SRV{-b @SELF@}@CLI{-s @PEER@} -c 4 -C 20 -S 1000" "udaddy @SRV{-b @SELF@}@CLI{-s @PEER@} -c 4 -C 20 -S 1000"
both cm_send_bw_ud_R      perf,cm "ib_send_bw -d uroce0 -R -c UD -s 512 -n 20"      "ib_send_bw -d rxe0 -F -R -c UD -s 512 -n 20"
both cm_write_bw_R        perf,cm "ib_write_bw -d uroce0 -R -s 65536 -n 20"          "ib_write_bw -d rxe0 -F -R -s 65536 -n 20"
both cm_send_lat_R        perf,cm "ib_send_lat -d uroce0 -R -s 64 -n 100"            "ib_send_lat -d rxe0 -F -R -s 64 -n 100"
# The uroce CLI against the stock tools.
both cli_pingpong_rc_s2500    pp   "uroce pingpong rc -s 2500 -n 10 -c"            "ibv_rc_pingpong -d rxe0 -g 1 -s 2500 -n 10 -c"
both cli_pingpong_rc_m512_e   pp   "uroce pingpong rc -s 1500 -m 512 -n 10 -e -c"  "ibv_rc_pingpong -d rxe0 -g 1 -s 1500 -m 512 -n 10 -e -c"
both cli_pingpong_ud_s100     pp   "uroce pingpong ud -s 100 -n 10 -c"             "ibv_ud_pingpong -d rxe0 -g 1 -s 100 -n 10 -c"
both cli_pingpong_srq_q2      pp   "uroce pingpong srq -q 2 -s 2049 -n 10 -c"      "ibv_srq_pingpong -d rxe0 -g 1 -q 2 -s 2049 -n 10 -c"
both cli_write_bw_s4097       perf "uroce bench write_bw -x 0 -s 4097 -n 10"       "ib_write_bw -d rxe0 -x 1 -F -s 4097 -n 10"
both cli_write_lat_s2500      perf "uroce bench write_lat -x 0 -s 2500 -n 10"      "ib_write_lat -d rxe0 -x 1 -F -s 2500 -n 10"
both cli_read_bw_s2049_o4     perf "uroce bench read_bw -x 0 -s 2049 -n 10 -o 4"   "ib_read_bw -d rxe0 -x 1 -F -s 2049 -n 10 -o 4"
both cli_read_lat_s5          perf "uroce bench read_lat -x 0 -s 5 -n 10"          "ib_read_lat -d rxe0 -x 1 -F -s 5 -n 10"
both cli_send_bw_s1500        perf "uroce bench send_bw -x 0 -s 1500 -n 10"        "ib_send_bw -d rxe0 -x 1 -F -s 1500 -n 10"
both cli_send_bw_ud_s512      perf "uroce bench send_bw -x 0 -c UD -s 512 -n 10"   "ib_send_bw -d rxe0 -x 1 -F -c UD -s 512 -n 10"
both cli_send_lat_s3_e        perf "uroce bench send_lat -x 0 -s 3 -n 10 -e"       "ib_send_lat -d rxe0 -x 1 -F -s 3 -n 10 -e"
both cli_atomic_bw_faa        perf "uroce bench atomic_bw -x 0 -A FETCH_AND_ADD -n 10"    "ib_atomic_bw -d rxe0 -x 1 -F -A FETCH_AND_ADD -n 10"
both cli_atomic_lat_cas       perf "uroce bench atomic_lat -x 0 -A CMP_AND_SWAP -n 10"    "ib_atomic_lat -d rxe0 -x 1 -F -A CMP_AND_SWAP -n 10"
both cli_v6_pingpong_rc       pp,v6   "uroce pingpong rc -s 1500 -n 10 -c"         "ibv_rc_pingpong -d rxe0 -g 0 -s 1500 -n 10 -c"
both cli_v6_write_bw_s1500    perf,v6 "uroce bench write_bw -x 0 -s 1500 -n 10"    "ib_write_bw -d rxe0 -x 0 -F -s 1500 -n 10"

selected=()
for c in "${CELLS[@]}"; do
    IFS='|' read -r name _ _ _ srv <<<"$c"
    id="$name/$srv-server"
    if [ -z "$only" ] || [[ "$id" =~ $only ]]; then selected+=("$c"); fi
done
if [ "$list" = 1 ]; then
    for c in "${selected[@]}"; do
        IFS='|' read -r name flags ucmd gcmd srv <<<"$c"
        printf '%-42s %-8s uroce: %s | rxe: %s\n' "$name/$srv-server" "$flags" "$ucmd" "$gcmd"
    done
    exit 0
fi
[ ${#selected[@]} -gt 0 ] || { echo "run.sh: no cell matches '$only'" >&2; exit 2; }

# --------------------------------------------------------------- prerequisites
[ "$(uname -s)" = Linux ] || skip "needs Linux"
[ "$(id -u)" = 0 ] || skip "needs root (the rxe lab creates a network namespace, taps and VMs)"
[ -x "$LAB/up" ] && [ -x "$LAB/build" ] || skip "no rxe lab at $LAB (set RXE_LAB)"
[ -e /dev/net/tun ] || skip "no /dev/net/tun (the lab's VMs need tap devices)"
if ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$NS"; then
    skip "the rxe lab is already up (namespace $NS exists); run $LAB/down first"
fi
mkdir -p "$OUT"
rm -rf "$OUT/cells"
mkdir -p "$OUT/cells"
export DEBIAN_FRONTEND=noninteractive
missing=()
for t in ibv_rc_pingpong ibv_ud_pingpong ibv_srq_pingpong ib_write_bw ib_read_bw ib_send_bw \
    ib_atomic_bw ib_write_lat ib_read_lat ib_send_lat ib_atomic_lat; do
    command -v "$t" >/dev/null 2>&1 || missing+=("$t")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "interop: installing ibverbs-utils perftest (missing: ${missing[*]})"
    { apt-get update -qq && apt-get install -y -qq ibverbs-utils perftest; } >"$OUT/apt.log" 2>&1 ||
        skip "ibverbs-utils/perftest missing and apt-get could not install them (no Debian package mirror?): $(tail -1 "$OUT/apt.log")"
fi
echo "interop: preparing the rxe lab ($LAB/build; installs qemu, tcpdump, tshark, downloads the guest's packages)"
if ! "$LAB/build" >"$OUT/lab-build.log" 2>&1; then
    skip "the rxe lab could not be built (it needs the Debian package mirror): $(tail -1 "$OUT/lab-build.log")"
fi
for t in qemu-system-x86_64 tcpdump tshark python3; do
    command -v "$t" >/dev/null 2>&1 || skip "$t is not installed"
done

# ------------------------------------------------------------------------ build
pass=0
fail=0
finish() {
    echo "interop: $pass passed, $fail failed"
    [ "$fail" = 0 ]
    exit $?
}
if [ "$build" = 1 ]; then
    echo "interop: building uroce (release) and the drop-in libraries"
    if ! cargo build --release -p uroce-cli >"$OUT/build.log" 2>&1 ||
        ! scripts/build-compat.sh >>"$OUT/build.log" 2>&1; then
        tail -20 "$OUT/build.log"
        echo "FAIL build (see $OUT/build.log)"
        fail=1
        finish
    fi
fi
UROCE=$(cd "${CARGO_TARGET_DIR:-target}" 2>/dev/null && pwd)/release/uroce
COMPAT=$ROOT/target/compat
if [ ! -x "$UROCE" ] || [ ! -e "$COMPAT/libibverbs.so.1" ]; then
    echo "FAIL: $UROCE or $COMPAT/libibverbs.so.1 missing (run without --no-build)"
    fail=1
    finish
fi
# The head start a perftest -R server in the guest needs (tests/interop/connect_delay.c).
CONNECT_DELAY=$OUT/connect_delay.so
if ! gcc -O1 -Wall -Wextra -Werror -shared -fPIC -o "$CONNECT_DELAY" \
    "$ROOT/tests/interop/connect_delay.c" >"$OUT/connect_delay.log" 2>&1; then
    echo "interop: tests/interop/connect_delay.c did not build (see $OUT/connect_delay.log); perftest -R cells with rxe as server rely on retries alone"
    CONNECT_DELAY=""
fi

# ------------------------------------------------------------------ lab up/down
LAB_UP=0
BG=()
cleanup() {
    local p
    for p in "${BG[@]}"; do kill "$p" 2>/dev/null; done
    if [ "$LAB_UP" = 1 ]; then
        "$LAB/down" >"$OUT/lab-down.log" 2>&1 || echo "interop: $LAB/down failed (see $OUT/lab-down.log)"
        LAB_UP=0
    fi
}
trap cleanup EXIT
trap 'echo "interop: interrupted"; exit 130' INT TERM

echo "interop: bringing the lab up (1 VM)"
LAB_UP=1
if ! "$LAB/up" 1 >"$OUT/lab-up.log" 2>&1; then
    tail -5 "$OUT/lab-up.log"
    echo "FAIL: the rxe lab did not come up (see $OUT/lab-up.log)"
    fail=1
    finish
fi
nsx() { ip netns exec "$NS" "$@"; }
gx() { "$LAB/exec" 1 "$@"; }
nsx ip -6 addr add "$U6/64" dev rxebr0 nodad
# The same shim for the guest's perftest -R client (host and guest are both Debian 12).
GUEST_CONNECT_DELAY=""
if [ -n "$CONNECT_DELAY" ] && "$LAB/exec" -i 1 'cat >/tmp/connect_delay.so' <"$CONNECT_DELAY" &&
    [ -z "$(gx 'LD_PRELOAD=/tmp/connect_delay.so true 2>&1')" ]; then
    GUEST_CONNECT_DELAY=/tmp/connect_delay.so
else
    echo "interop: the connect_delay shim does not load in the guest; perftest -R cells with uroce as server rely on retries alone"
fi
# The guest's link-local address (its rxe GID 0) must have finished DAD.
for _ in $(seq 100); do
    gx 'ip -6 addr show dev eth0 | grep "scope link" | grep -qv tentative' && break
    sleep 0.3
done
G6=$(gx 'cat /sys/class/infiniband/rxe0/ports/1/gids/0' 2>/dev/null | tr -d '\r')
echo "interop: rxe0 GID 0 $G6, GID 1 $(gx 'cat /sys/class/infiniband/rxe0/ports/1/gids/1' | tr -d '\r')"

GUEST_BAD="duplicate_request out_of_seq_request rcvd_seq_err rcvd_rnr_err send_rnr_err retry_exceeded_err retry_rnr_exceeded_err send_err link_downed"
# name=value lines: the guest's rxe hw_counters and its kernel's UDP receive errors.
guest_counters() {
    gx 'cd /sys/class/infiniband/rxe0/ports/1/hw_counters && for f in *; do echo "$f=$(cat $f)"; done
        awk "/^Udp:/ { if (!h) { split(\$0, k); h = 1 } else { for (i = 2; i <= NF; i++) print \"udp_\" k[i] \"=\" \$i } }" /proc/net/snmp' |
        tr -d '\r'
}
# The namespace kernel's UDP receive errors (the uroce side's drops before uroce sees a packet).
ns_counters() {
    nsx awk '/^Udp:/ { if (!h) { split($0, k); h = 1 } else { for (i = 2; i <= NF; i++) print "udp_" k[i] "=" $i } }' /proc/net/snmp
    nsx awk '$1 ~ /^Udp6/ { print "udp6_" substr($1, 5) "=" $2 }' /proc/net/snmp6
}
# delta NAME BEFORE-FILE AFTER-FILE
delta() {
    local a b
    a=$(grep -m1 "^$1=" "$2" | cut -d= -f2)
    b=$(grep -m1 "^$1=" "$3" | cut -d= -f2)
    echo $((${b:-0} - ${a:-0}))
}

guest_counters >"$OUT/guest-counters.start"
ns_counters >"$OUT/ns-counters.start"

# tshark: no payload guessing (see the header). The heuristic sub-dissectors of
# "infiniband.payload" (tshark -G heuristic-decodes) are turned off by their short names,
# and the protocols behind them as well (tshark 4.0 has no name for every heuristic, e.g.
# NVMe-oF's). RoCEv2 on 4791 is dissected by default.
TSHARK_NOHEUR=()
for h in eth_over_ib fc_infiniband iser_infiniband lnet_ib mellanox_eoib rpcrdma_infiniband \
    sdp_infiniband smb_direct_infiniband smcr_infiniband; do
    TSHARK_NOHEUR+=(--disable-heuristic "$h")
done
for p in rpcordma smb_direct smc nvme-rdma lnet iser infiniband.eoib infiniband_sdp fcoib; do
    TSHARK_NOHEUR+=(--disable-protocol "$p")
done
# tshark_scan PCAP: one pass without payload heuristics, fields of every frame into
# PCAP.tshark; prints "FRAMES FLAGGED-FROM-UROCE UNDISSECTED FLAGGED-FROM-RXE", and the first
# flagged uroce frame into PCAP.tshark-first. Flagged = malformed, or an expert item of
# severity >= PI_WARN (0x600000); undissected = no BTH opcode.
tshark_scan() {
    tshark -r "$1" "${TSHARK_NOHEUR[@]}" -T fields -E separator='|' -e frame.number \
        -e ip.src -e ipv6.src -e _ws.malformed -e _ws.expert.severity -e infiniband.bth.opcode \
        -e _ws.expert.message 2>/dev/null >"$1.tshark"
    awk -F'|' -v u4="$U4" -v u6="$U6" '
        { n++; src = ($2 != "") ? $2 : $3; flagged = ($4 != "")
          k = split($5, sev, ","); for (i = 1; i <= k; i++) if (sev[i] + 0 >= 6291456) flagged = 1
          if ($6 == "") und++
          if (flagged && (src == u4 || src == u6)) { bad++; if (!first) first = $0 }
          else if (flagged) rxe++ }
        END { print n + 0, bad + 0, und + 0, rxe + 0; printf "%s", first > (FILENAME "-first") }' "$1.tshark"
}
# The check must be able to fail: a RoCEv2 frame from uroce cut inside its BTH must be
# flagged (and counted as not dissected).
python3 - "$OUT/tshark-selftest.pcap" <<'PY'
import struct, sys
ip = bytearray(b"\x45\x00" + struct.pack("!H", 20 + 8 + 12 + 4) + b"\x00\x00\x40\x00\x40\x11\x00\x00"
               + bytes([10, 77, 0, 1, 10, 77, 0, 11]))
udp = struct.pack("!HHHH", 49152, 4791, 8 + 12 + 4, 0)
frame = b"\x52\x54\x00\x77\x00\x0b" + b"\x02\x00\x00\x00\x00\x01" + b"\x08\x00" + bytes(ip) + udp + b"\x04\x00\xff\xff\x00\x00"
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
    f.write(struct.pack("<IIII", 0, 0, len(frame), len(frame)) + frame)
PY
# An option tshark does not know makes it print nothing, which would pass every check.
if ! tshark -r "$OUT/tshark-selftest.pcap" "${TSHARK_NOHEUR[@]}" >/dev/null 2>"$OUT/tshark-options.txt" ||
    grep -qi 'no such' "$OUT/tshark-options.txt"; then
    cat "$OUT/tshark-options.txt"
    echo "FAIL: this tshark does not accept the options that turn its payload heuristics off"
    fail=1
    finish
fi
if [ "$(tshark_scan "$OUT/tshark-selftest.pcap")" != "1 1 1 0" ]; then
    echo "FAIL: tshark does not flag a truncated RoCEv2 packet with the options this script uses"
    fail=1
    finish
fi
if ! python3 tests/interop/analyze.py --selftest >"$OUT/analyze-selftest.txt" 2>&1; then
    cat "$OUT/analyze-selftest.txt"
    echo "FAIL: tests/interop/analyze.py does not find the problems of its synthetic capture"
    fail=1
    finish
fi

# uroce's counters: each uroce process publishes them (uroce::stats) in this directory, and
# `uroce stat --watch` samples them while the cell runs; the last sample of the process is
# its counters at most STAT_EVERY seconds before it exited.
STATS_DIR=$OUT/stats
STAT_EVERY=0.05
rm -rf "$STATS_DIR"
mkdir -m 0700 "$STATS_DIR"
# Must stay 0 in uroce's final counters (names as `uroce stat` prints them).
UROCE_BAD="out_of_seq_request rcvd_rnr_err send_rnr_err rcvd_seq_err retry_exceeded_err retry_rnr_exceeded_err completer_retry_err send_err retransmissions local_ack_timeouts rcvd_nak_invalid_request rcvd_nak_remote_access rcvd_nak_remote_op send_nak dropped_pkts rcv_no_wqe_drop qkey_violation port_rcv_errors rcvd_icrc_err rcvd_addr_mismatch xmit_discards xmit_no_route cq_overflow bad_wqe ring_corrupt event_drops engine_panics"
# Reported when not 0: consequences of rxe's early retransmissions (duplicate requests and
# the duplicate answers to them), or late packets of a QP the tool already destroyed.
UROCE_NOTE="duplicate_request duplicate_responses ghost_responses stale_naks rto_probes rcvd_unknown_qp"

port=18600
total_spurious=0
late_retries=0
peer_late_cells=0
declare -A RESULT

# run_cell NAME FLAGS UCMD GCMD SERVER -> 0 pass, 1 fail, 2 fail caused by the guest clock
# role_cmd TEMPLATE server|client SELF PEER: keep @SRV{..} or @CLI{..} for the role, fill in
# @SELF@ and @PEER@.
role_cmd() {
    local t=$1
    if [ "$2" = server ]; then
        t=$(sed -E 's/@CLI\{[^}]*\}//g; s/@SRV\{([^}]*)\}/\1/g' <<<"$t")
    else
        t=$(sed -E 's/@SRV\{[^}]*\}//g; s/@CLI\{([^}]*)\}/\1/g' <<<"$t")
    fi
    t=${t//@SELF@/$3}
    echo "${t//@PEER@/$4}"
}

run_cell() {
    local name=$1 flags=$2 ucmd=$3 gcmd=$4 srv=$5
    local id="$name/$srv-server" base="$OUT/cells/${name}__$srv-server"
    local udev="uroce0=$U4" guest_addr="$G4"
    local problems=() info=() td sp crc src ures gres
    [[ ",$flags," == *,v6,* ]] && udev="uroce0=$U6"
    port=$((port + 1))
    # Role templates (@SRV{..}, @CLI{..}, @SELF@, @PEER@): each side's command for its role.
    # rdma_cm tools without a TCP side channel (perftest -R still has one).
    # noport: the tool has a fixed port and no -p option (udaddy: 7174).
    local popt="-p $port" lport=$port
    [[ ",$flags," == *,noport,* ]] && popt="" lport=7174
    local cm=0 cm_only=0 cm_mads=""
    [[ ",$flags," == *,cm,* ]] && cm=1
    [[ "$cm" = 1 && ",$flags," != *,perf,* ]] && cm_only=1
    local append_peer=1
    [[ "$ucmd$gcmd" == *@PEER@* ]] && append_peer=0
    if [ "$srv" = uroce ]; then
        ucmd=$(role_cmd "$ucmd" server "$U4" "$U4")
        gcmd=$(role_cmd "$gcmd" client "$G4" "$U4")
    else
        ucmd=$(role_cmd "$ucmd" client "$U4" "$G4")
        gcmd=$(role_cmd "$gcmd" server "$G4" "$G4")
    fi
    rm -f "$base".*
    # The uroce-side command: the CLI, or a stock tool on the drop-in library.
    local -a uside
    read -r -a uside <<<"$ucmd"
    if [ "${uside[0]}" = uroce ]; then
        uside[0]=$UROCE
    fi
    # perftest -R: its server listens for the test connection only after the parameter
    # swap, which its client may beat; the client's later connections wait a moment
    # (tests/interop/connect_delay.c), on whichever side the client runs.
    local preload=()
    if [ "$cm" = 1 ] && [ "$cm_only" = 0 ]; then
        if [ "$srv" = rxe ] && [ -n "$CONNECT_DELAY" ]; then
            preload=("LD_PRELOAD=$CONNECT_DELAY")
        elif [ "$srv" = uroce ] && [ -n "$GUEST_CONNECT_DELAY" ]; then
            gcmd="env LD_PRELOAD=$GUEST_CONNECT_DELAY $gcmd"
        fi
    fi
    uside=(env "UROCE_DEVICES=$udev" "LD_LIBRARY_PATH=$COMPAT" "UROCE_STATS_DIR=$STATS_DIR"
        UROCE_STATS_KEEP=1 "${preload[@]}" timeout "$TOOL_TIMEOUT" "${uside[@]}" $popt)
    rm -f "$STATS_DIR"/*.exit.json

    # Background jobs are started without the nsx function, so that $! is the process itself
    # (ip netns exec execs the program) and can be signalled.
    ip netns exec "$NS" tcpdump -i rxebr0 --immediate-mode -B 65536 -s 0 -U -Z root -w "$base.pcap" \
        udp port 4791 2>"$base.tcpdump" &
    td=$!
    BG+=("$td")
    for _ in $(seq 100); do grep -q listening "$base.tcpdump" 2>/dev/null && break; sleep 0.1; done
    guest_counters >"$base.guest0"
    ns_counters >"$base.ns0"
    ip netns exec "$NS" env "UROCE_STATS_DIR=$STATS_DIR" "$UROCE" stat --watch "$STAT_EVERY" --json \
        >"$base.ustat" 2>/dev/null &
    local stp=$!
    BG+=("$stp")

    if [ "$srv" = uroce ]; then
        ures="$base.uroce-server.txt"
        gres="$base.rxe-client.txt"
        ip netns exec "$NS" "${uside[@]}" >"$ures" 2>&1 &
        sp=$!
        BG+=("$sp")
        for _ in $(seq 300); do
            if [ "$cm_only" = 1 ]; then
                # No TCP port to watch: the device's UDP socket, then a moment to listen.
                nsx ss -Hlun "sport = :4791" 2>/dev/null | grep -q . && { sleep 1; break; }
            elif [ "$cm" = 1 ]; then
                # perftest -R listens on rdma_cm a moment after its TCP port.
                nsx ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && { sleep 3; break; }
            else
                nsx ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
            fi
            kill -0 "$sp" 2>/dev/null || break
            sleep 0.1
        done
        if [ "$append_peer" = 1 ]; then
            gx "timeout $TOOL_TIMEOUT $gcmd $popt $U4" >"$gres" 2>&1
        else
            gx "timeout $TOOL_TIMEOUT $gcmd $popt" >"$gres" 2>&1
        fi
        crc=$?
        wait "$sp"
        src=$?
    else
        ures="$base.uroce-client.txt"
        gres="$base.rxe-server.txt"
        "$LAB/exec" 1 "timeout $TOOL_TIMEOUT $gcmd $popt" >"$gres" 2>&1 &
        sp=$!
        BG+=("$sp")
        for _ in $(seq 200); do
            if [ "$cm" = 1 ]; then
                # Listening on rdma_cm (perftest -R opens its TCP port first).
                gx "rdma res show cm_id | grep -q 'state LISTEN .*src-addr [^ ]*:$lport '" 2>/dev/null && break
            else
                gx "ss -Hltn 'sport = :$port' | grep -q ." 2>/dev/null && break
            fi
            kill -0 "$sp" 2>/dev/null || break
            sleep 0.2
        done
        if [ "$append_peer" = 1 ]; then
            nsx "${uside[@]}" "$guest_addr" >"$ures" 2>&1
        else
            nsx "${uside[@]}" >"$ures" 2>&1
        fi
        crc=$?
        wait "$sp"
        src=$?
    fi
    guest_counters >"$base.guest1"
    ns_counters >"$base.ns1"
    kill "$stp" 2>/dev/null
    wait "$stp" 2>/dev/null
    # The uroce process's counters at its exit (UROCE_STATS_KEEP=1): the newest sample.
    ip netns exec "$NS" env "UROCE_STATS_DIR=$STATS_DIR" "$UROCE" stat --exited --json \
        >>"$base.ustat" 2>/dev/null
    local exit_snaps
    exit_snaps=$(ls "$STATS_DIR"/*.exit.json 2>/dev/null | wc -l)
    sleep 0.3
    kill -INT "$td" 2>/dev/null
    wait "$td" 2>/dev/null
    BG=()

    # A capture that lost packets cannot prove anything about retransmissions or data.
    local cdrop
    cdrop=$(sed -nE 's/^([0-9]+) packets? dropped by kernel.*/\1/p' "$base.tcpdump" | tail -1)
    [ "${cdrop:-0}" = 0 ] || problems+=("tcpdump dropped $cdrop packet(s): the capture is incomplete")

    # Exit statuses and result lines.
    [ "$crc" = 0 ] || problems+=("client exit $crc")
    [ "$src" = 0 ] || problems+=("server exit $src")
    local pp=0
    [[ ",$flags," == *,pp,* ]] && pp=1
    local f
    for f in "$ures" "$gres"; do
        if [ "$pp" = 1 ]; then
            grep -qE '^[0-9]+ iters in [0-9.]+ seconds' "$f" || problems+=("no result line in $(basename "$f")")
        fi
        grep -q 'invalid data' "$f" && problems+=("$(basename "$f"): invalid data")
    done
    if [[ ",$flags," == *,cm,* ]]; then
        for f in "$ures" "$gres"; do
            case "$ucmd" in
                rping*)
                    # -v: each side prints every ping's data; -C N pings.
                    local want pings
                    want=$(sed -nE 's/.*-C ([0-9]+).*/\1/p' <<<"$ucmd")
                    pings=$(grep -c 'ping data: rdma-ping-' "$f")
                    [ "$pings" -ge "${want:-1}" ] || problems+=("$(basename "$f"): $pings of ${want:-1} pings verified")
                    ;;
                ucmatose* | udaddy*)
                    grep -q '^return status 0' "$f" || problems+=("$(basename "$f"): no 'return status 0'")
                    ;;
            esac
        done
        # The CM on the wire (IBTA Vol 1 §12.6): no MAD sent twice on a clean link. A MAD
        # is (source, attribute, transaction ID); a retransmission repeats all three.
        local cm_dups
        cm_mads=$(tshark -r "$base.pcap" -d udp.port==4791,infiniband -Y 'infiniband.mad' -T fields \
            -e ip.src -e infiniband.mad.attributeid -e infiniband.mad.transactionid 2>/dev/null)
        cm_dups=$(sort <<<"$cm_mads" | uniq -d | grep -c . || true)
        [ -n "$cm_mads" ] || problems+=("tshark found no CM MAD in the capture")
        [ "$cm_dups" = 0 ] || problems+=("$cm_dups CM MAD(s) sent more than once: $(sort <<<"$cm_mads" | uniq -d | head -2 | tr '\n\t' '; ')")
        info+=("CM MADs: $(awk '{print $2}' <<<"$cm_mads" | sort | uniq -c | awk '{printf "%s%s x%s", (NR>1?", ":""), $2, $1}')")
        local delayed
        delayed=$(cat "$ures" "$gres" | grep -c '^connect_delay:' || true)
        [ "$delayed" = 0 ] || info+=("the server had a head start: $delayed rdma_connect(s) of the client held back (tests/interop/connect_delay.c)")
    fi
    local client_out=$gres
    [ "$srv" = rxe ] && client_out=$ures
    if [ "$pp" = 0 ] && [[ ",$flags," != *,cm,* || ",$flags," == *,perf,* ]] && ! grep -qE '^ *[0-9]+ +[0-9]+ +([0-9.]+|inf|-?nan)' "$client_out"; then
        problems+=("no perftest result row from the client")
    fi

    # The capture: uroce decode (ICRC of every packet), the lab's ICRC checker, tshark.
    "$UROCE" decode "$base.pcap" >"$base.decode" 2>&1
    local summary roce garbled badicrc okicrc
    summary=$(tail -1 "$base.decode")
    read -r roce garbled badicrc < <(sed -nE 's/^[0-9]+ frames: ([0-9]+) RoCEv2 packets decoded, [0-9]+ non-RoCE frames skipped, ([0-9]+) garbled, ([0-9]+) bad ICRC$/\1 \2 \3/p' <<<"$summary")
    okicrc=$(grep -c 'icrc=ok' "$base.decode")
    if [ -z "${roce:-}" ]; then
        problems+=("uroce decode: $summary")
    elif [ "$roce" = 0 ] || [ "$garbled" != 0 ] || [ "$badicrc" != 0 ] || [ "$okicrc" != "$roce" ]; then
        problems+=("uroce decode: $roce packets, $garbled garbled, $badicrc bad ICRC, $okicrc icrc=ok")
    fi
    python3 "$LAB/tools/icrc_check.py" "$base.pcap" >"$base.icrc_check" 2>&1
    grep -qE ' 0 wrong' "$base.icrc_check" || problems+=("icrc_check.py: $(tail -1 "$base.icrc_check")")
    # tshark, one pass without payload heuristics: every udp/4791 frame must be dissected
    # (a BTH opcode), and none that uroce sent may be malformed or carry an expert warning
    # (severity >= PI_WARN 0x600000). A second pass with default settings only counts the
    # heuristics' "[Malformed Packet]" guesses on uroce's payloads, for the record.
    local tcount bad_uroce undissected rxe_flagged heur_all
    read -r tcount bad_uroce undissected rxe_flagged < <(tshark_scan "$base.pcap")
    [ "$tcount" = "${roce:-x}" ] || problems+=("tshark saw $tcount RoCEv2 frames, uroce decode ${roce:-none}")
    [ "$bad_uroce" = 0 ] || problems+=("tshark flags $bad_uroce packet(s) uroce sent: $(cat "$base.pcap.tshark-first")")
    [ "$undissected" = 0 ] || problems+=("tshark did not dissect $undissected packet(s) as InfiniBand")
    [ "$rxe_flagged" = 0 ] || info+=("tshark flags $rxe_flagged rxe packet(s): $(awk -F'|' '$7 != "" { print $7; exit }' "$base.pcap.tshark")")
    heur_all=$(tshark -r "$base.pcap" -T fields -E separator='|' -e ip.src -e ipv6.src -e _ws.malformed 2>/dev/null |
        awk -F'|' -v u4="$U4" -v u6="$U6" '($1 == u4 || $2 == u6) && $3 != "" { n++ } END { print n + 0 }')
    [ "$heur_all" = 0 ] || info+=("tshark's payload heuristics (default settings) call $heur_all uroce payload(s) malformed")

    # Retransmissions, NAKs and ping-pong data, from the capture.
    local aargs=(--uroce "$U4,$U6" --timeout-us "$QP_TIMEOUT_US")
    [ "$pp" = 1 ] && aargs+=(--pingpong)
    python3 tests/interop/analyze.py "$base.pcap" "${aargs[@]}" >"$base.analyze" 2>&1 ||
        problems+=("$(grep -v '^analyze: packets_' "$base.analyze" | head -3 | tr '\n' ';')")
    local spurious retx_rxe late_rxe retx_u peer_late
    retx_u=$(sed -nE 's/.* retx_uroce=([0-9]+).*/\1/p' "$base.analyze")
    retx_u=${retx_u:-0}
    # uroce retransmissions judged legitimate: rxe had let a request wait a QP timeout.
    peer_late=$(sed -nE 's/.*retx_uroce_peer_late=([0-9]+).*/\1/p' "$base.analyze")
    peer_late=${peer_late:-0}
    if [ "$peer_late" -gt 0 ]; then
        info+=("rxe answered later than the QP timeout (longest answer $(sed -nE 's/.*rxe_answer_max_ms=([0-9.]+).*/\1/p' "$base.analyze") ms); uroce resent $peer_late packet(s) of $retx_u after a full timeout")
        peer_late_cells=$((peer_late_cells + 1))
    fi
    # ... and its retransmission timer's probes on a QP that had timed out before.
    local probes
    probes=$(sed -nE 's/.*retx_uroce_probe=([0-9]+).*/\1/p' "$base.analyze")
    probes=${probes:-0}
    [ "$probes" -gt 0 ] &&
        info+=("uroce's retransmission timer probed $probes time(s) on QPs that had timed out against rxe, before rxe answered")
    local resent_ok=$((peer_late + probes))
    spurious=$(sed -nE 's/.*rxe_spurious_retx=([0-9]+).*/\1/p' "$base.analyze")
    spurious=${spurious:-0}
    retx_rxe=$(sed -nE 's/.* retx_rxe=([0-9]+).*/\1/p' "$base.analyze")
    retx_rxe=${retx_rxe:-0}
    late_rxe=$(sed -nE 's/.*rxe_after_last_uroce=([0-9]+).*/\1/p' "$base.analyze")
    late_rxe=${late_rxe:-0}

    # Counters: the guest's rxe and both kernels' UDP receive errors.
    local c d
    for c in $GUEST_BAD udp_InErrors udp_RcvbufErrors udp_InCsumErrors; do
        d=$(delta "$c" "$base.guest0" "$base.guest1")
        if [ "$c" = duplicate_request ] && [ "$d" -gt 0 ] && [ "$d" -le "$resent_ok" ]; then
            info+=("rxe counter $c +$d: the packets uroce resent while rxe was late")
            continue
        fi
        [ "$d" = 0 ] || problems+=("rxe counter $c +$d")
    done
    d=$(delta completer_retry_err "$base.guest0" "$base.guest1")
    if [ "$d" != 0 ]; then
        if [ "$retx_rxe" -gt 0 ]; then
            # Late ones (a full timeout) are problems above already.
            [ "$spurious" -gt 0 ] &&
                info+=("rxe spurious timer retransmissions: $spurious packet(s), completer_retry_err +$d")
        else
            # rxe's timer fired while a packet was unacknowledged, but the ACK was processed
            # before anything was resent: the same timer as above, with no effect on the wire.
            info+=("rxe counter completer_retry_err +$d with nothing resent (its timer fired as the ACK came)")
        fi
    elif [ "$spurious" -gt 0 ]; then
        info+=("rxe resent $spurious packet(s) early")
    fi
    total_spurious=$((total_spurious + spurious))
    # Kernel drops on the uroce side. rxe's IPv6 packets have UDP checksum 0, and one that
    # arrives after the uroce process closed its socket is counted as a checksum error
    # (no socket to allow it) rather than NoPorts: ibv_srq_pingpong, for one, exits with a
    # SEND whose ACK is still on its way. Such late packets (rxe's after uroce's last one)
    # are allowed; a drop while uroce was still talking is not.
    local ns_drops=0
    for c in udp_InErrors udp6_InErrors; do # (they include RcvbufErrors and InCsumErrors)
        d=$(delta "$c" "$base.ns0" "$base.ns1")
        ns_drops=$((ns_drops + d))
    done
    if [ "$ns_drops" -gt "$late_rxe" ]; then
        problems+=("the namespace kernel dropped $ns_drops packet(s) to uroce (UDP InErrors; $late_rxe arrived after uroce's last packet)")
    elif [ "$ns_drops" -gt 0 ]; then
        info+=("the namespace kernel dropped $ns_drops packet(s) that reached uroce's port after its last packet (process gone)")
    fi
    # uroce's own counters: the last `uroce stat` sample of the uroce process.
    if python3 tests/interop/analyze.py --stat-last "$base.ustat" >"$base.ucounters" 2>&1; then
        local v
        for c in $UROCE_BAD; do
            v=$(grep -m1 "^$c=" "$base.ucounters" | cut -d= -f2)
            if { { [ "$c" = retransmissions ] && [ "${v:-0}" -le "$resent_ok" ]; } ||
                { [ "$c" = local_ack_timeouts ] && [ "${v:-0}" -le "$peer_late" ]; }; } &&
                [ "${v:-0}" -gt 0 ]; then
                info+=("uroce counter $c $v: resent while rxe was late")
                continue
            fi
            [ "${v:-0}" = 0 ] || problems+=("uroce counter $c $v")
        done
        for c in $UROCE_NOTE; do
            v=$(grep -m1 "^$c=" "$base.ucounters" | cut -d= -f2)
            if [ "${v:-0}" != 0 ]; then
                if [ "$c" = duplicate_request ] && [ "$retx_rxe" = 0 ]; then
                    problems+=("uroce counter duplicate_request $v without an rxe retransmission")
                else
                    info+=("uroce counter $c $v")
                fi
            fi
        done
        grep -qE '^(sent|rcvd)_pkts=[1-9]' "$base.ucounters" ||
            problems+=("uroce stat: the uroce process counted no packet")
        grep -q '^exited=True' "$base.ucounters" ||
            problems+=("uroce stat: no snapshot of the uroce process at its exit ($exit_snaps exit file(s))")
    else
        problems+=("uroce stat: no snapshot of the uroce process")
    fi

    local line
    line=$(grep -E '^[0-9]+ iters in|^ *[0-9]+ +[0-9]+ +([0-9.]+|inf|-?nan)' "$client_out" | tail -1 | tr -s ' \t' ' ')
    if [ ${#problems[@]} = 0 ]; then
        echo "ok   $id: ${roce:-0} pkts;${line:+ $line}"
        for f in "${info[@]}"; do echo "       note: $f"; done
        RESULT[$id]=ok
        return 0
    fi
    echo "FAIL $id (host load average $(cut -d' ' -f1-3 /proc/loadavg))"
    for f in "${problems[@]}"; do echo "       $f"; done
    for f in "${info[@]}"; do echo "       note: $f"; done
    grep -vE '^ *-+$' "$ures" | tail -4 | sed 's/^/       uroce: /'
    grep -vE '^ *-+$' "$gres" | tail -4 | sed 's/^/       rxe:   /'
    RESULT[$id]=FAIL
    if grep -q 'Correlation coefficient' "$gres" && grep -q "Can't produce a report" "$gres"; then
        return 2
    fi
    # perftest -R's client connects as soon as its TCP handshake is done, which may be
    # before its server listens on rdma_cm (for UD: before its second listener exists):
    # REJ reason 8 or SIDR status 1, as with the kernel's CM on both ends. (With rxe as
    # the server the uroce client's later connections are held back, connect_delay.c.)
    # (perftest 4.5's retry after the REJ then reuses freed IDs and may crash.)
    if [ "$cm" = 1 ] && [ "$cm_only" = 0 ] &&
        { grep -qE 'RDMA_CM_EVENT_(UNREACHABLE; error: 1|REJECTED)|Unexpected CM event .* 8$' "$client_out" ||
            grep -q '	0x0012	' <<<"$cm_mads"; }; then
        return 4
    fi
    # Only late answers (rxe resent after a full QP timeout, and what follows from that):
    # the uroce process was not scheduled in time on this host, or it really stalled.
    local late=1
    for f in "${problems[@]}"; do
        case "$f" in
            *"rxe retransmitted"*) ;;
            *"beyond the QP timeout"*) ;;
            "rxe counter completer_retry_err"*) ;;
            "uroce counter duplicate_request"*) ;;
            *) late=0 ;;
        esac
    done
    [ "$late" = 1 ] && return 3
    return 1
}

# keep_try NAME SERVER: move a failed attempt's artifacts to cells/failed-attempts/.
keep_try() {
    local f dir="$OUT/cells/failed-attempts"
    mkdir -p "$dir"
    for f in "$OUT/cells/${1}__$2-server".*; do
        [ -e "$f" ] && mv "$f" "$dir/$(date +%H%M%S)-$(basename "$f")"
    done
}
# INTEROP_REPEAT=N runs every selected cell N times (hunting for flakiness).
repeat=${INTEROP_REPEAT:-1}
echo "interop: $((${#selected[@]} * repeat)) runs; artifacts in $OUT/cells"
t_start=$(date +%s)
for _ in $(seq "$repeat"); do
    for c in "${selected[@]}"; do
        IFS='|' read -r name flags ucmd gcmd srv <<<"$c"
        run_cell "$name" "$flags" "$ucmd" "$gcmd" "$srv"
        r=$?
        if [ "$r" = 2 ]; then
            keep_try "$name" "$srv"
            echo "       retrying $name/$srv-server: rxe's perftest could not calibrate its clock under emulation"
            run_cell "$name" "$flags" "$ucmd" "$gcmd" "$srv"
            r=$?
        elif [ "$r" = 4 ]; then
            # perftest -R opens a second rdma_cm connection right after the first, before
            # its server has the second listener: a race of perftest's own, which may
            # repeat (seen twice in a row); up to four more tries, as rdmacm.sh does.
            local_try=1
            while [ "$r" = 4 ] && [ "$local_try" -le 4 ]; do
                keep_try "$name" "$srv"
                echo "       retrying $name/$srv-server ($local_try of 4): perftest -R's client connected before its server listened"
                run_cell "$name" "$flags" "$ucmd" "$gcmd" "$srv"
                r=$?
                local_try=$((local_try + 1))
            done
        elif [ "$r" = 3 ]; then
            # Counted: the final lines say how many cells needed this.
            keep_try "$name" "$srv"
            late_retries=$((late_retries + 1))
            echo "       retrying $name/$srv-server once: rxe resent after a full QP timeout (uroce's answer, or rxe's handling of it, came late)"
            run_cell "$name" "$flags" "$ucmd" "$gcmd" "$srv"
            r=$?
        fi
        if [ "$r" = 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
    done
done
t_end=$(date +%s)

# ----------------------------------------------------------------- summary
guest_counters >"$OUT/guest-counters.end"
ns_counters >"$OUT/ns-counters.end"
echo "interop: matrix (uroce-server = rxe tool as client; rxe-server = uroce as client):"
names=()
for c in "${selected[@]}"; do
    IFS='|' read -r name _ <<<"$c"
    [[ " ${names[*]} " == *" $name "* ]] || names+=("$name")
done
for n in "${names[@]}"; do
    printf '  %-28s uroce-server: %-5s rxe-server: %s\n' "$n" "${RESULT[$n/uroce-server]:--}" "${RESULT[$n/rxe-server]:--}"
done
echo "interop: rxe hw_counters over the whole run (guest vm1):"
for c in sent_pkts rcvd_pkts rdma_sends rdma_recvs completer_retry_err $GUEST_BAD udp_InErrors; do
    printf '  %-24s +%s\n' "$c" "$(delta "$c" "$OUT/guest-counters.start" "$OUT/guest-counters.end")"
done
echo "interop: namespace (uroce side) kernel UDP receive errors over the whole run:"
for c in udp_InErrors udp_RcvbufErrors udp_InCsumErrors udp6_InErrors udp6_RcvbufErrors udp6_InCsumErrors; do
    printf '  %-24s +%s\n' "$c" "$(delta "$c" "$OUT/ns-counters.start" "$OUT/ns-counters.end")"
done
echo "interop: rxe spurious timer retransmissions in all captures: $total_spurious; uroce retransmissions: $(cat "$OUT"/cells/*.analyze 2>/dev/null | sed -nE 's/.*retx_uroce=([0-9]+).*/\1/p' | awk '{s += $1} END {print s + 0}')"
echo "interop: cells where rxe answered later than the QP timeout and uroce resent after a full timeout (passed with a note): $peer_late_cells"
echo "interop: cells retried after a late answer from uroce: $late_retries (see the FAIL lines above; the failed attempts are in $OUT/cells/failed-attempts)"
echo "interop: uroce counters: per cell in $OUT/cells/*.ucounters (the snapshot the uroce process left at its exit)"
echo "interop: matrix ran in $((t_end - t_start)) s"
cleanup
finish
