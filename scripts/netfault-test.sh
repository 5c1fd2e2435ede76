#!/usr/bin/env bash
# Two uroce devices in two network namespaces, with faults on the real kernel path between
# them (loss 5 %, reorder 25 %, duplicate 2 %, corrupt 1 %), move NETFAULT_BYTES by RDMA
# WRITE and as much by SEND with perftest's defaults (128 messages of 64 KiB in flight, path
# MTU 1024, local ACK timeout 14 = 67 ms), every byte verified, and the devices' counters
# show the retransmissions and the ICRC drops.
#
#   sudo scripts/netfault-test.sh            # what crates/uroce/tests/netfault.rs runs
#
# This kernel has no sch_netem; ../shared/netfault (NETFAULT_DIR) builds the namespaces and
# the faults with NFQUEUE + iptables (read its README). Without root, namespaces, iptables or
# NFQUEUE the script prints "SKIPPED: <why>" and exits 0; any failure of the transfer or of
# a check prints "FAILED: <why>" and exits 1. netfault is always brought down on exit.
#
# How: builds examples/netfault_peer (release; CARGO_TARGET_DIR is honoured), brings netfault
# up in its own namespaces (urnfa = 10.79.0.1 runs the server, urnfb = 10.79.0.2 the client),
# runs the transfer and checks both one-line JSON summaries. Knobs (environment):
# NETFAULT_BYTES (default 32M, to keep the test's run time near a minute; 256M is the full
# transfer), NETFAULT_PEER_ARGS (extra netfault_peer options, e.g. "--depth 2"), NETFAULT_PEER
# (a prebuilt netfault_peer; skips the build), NETFAULT_TIME_LIMIT (seconds, default 900).
set -uo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export NETFAULT_A=urnfa NETFAULT_B=urnfb NETFAULT_RUN=/run/netfault-uroce-test
FAULTS=(--loss 0.05 --reorder 0.25 --dup 0.02 --corrupt 0.01)
BYTES="${NETFAULT_BYTES:-32M}"
LIMIT="${NETFAULT_TIME_LIMIT:-900}"
# perftest's defaults, no tuning: the requester's congestion window and retransmission
# timer (crates/transport/src/recovery.rs) keep go-back-N's resends and waits bounded.
# * --spin-us 50 (engine spin window fixed at 50 us): with the device's adaptive default
#   (up to 4 ms, 50 ms while completions are unread) both engines keep both cores busy and
#   starve the impairer and each other.
PEER_ARGS=(--mtu 1024 --msg-size 64K --depth 128 --ack-timeout 14 --spin-us 50 --deadline "$LIMIT")
SERVER_IP=10.79.0.1 CLIENT_IP=10.79.0.2

say() { echo "netfault-test: $*"; }
skip() { echo "SKIPPED: $*"; exit 0; }
fail() { echo "FAILED: $*"; exit 1; }

[ "${UROCE_SKIP_NETFAULT:-0}" = 1 ] && skip "UROCE_SKIP_NETFAULT=1"
[ "$(id -u)" = 0 ] || skip "not root (network namespaces, iptables and NFQUEUE need root)"
NF="${NETFAULT_DIR:-}"
if [ -z "$NF" ]; then
	d="$ROOT/../shared/netfault"
	if [ -x "$d/up" ]; then NF="$(cd "$d" && pwd)"; fi
fi
if [ -z "$NF" ] || ! [ -x "$NF/up" ]; then skip "netfault not found at ${NF:-$ROOT/../shared/netfault} (set NETFAULT_DIR)"; fi
command -v ip >/dev/null || skip "no ip(8) (iproute2)"
probe="urnf-probe-$$"
ip netns add "$probe" 2>/dev/null || skip "cannot create network namespaces here"
ip netns del "$probe"

# --- build the peer (a failure here is a failure, not a skip)
cd "$ROOT" || fail "cd $ROOT"
if [ -n "${NETFAULT_PEER:-}" ]; then
	PEER="$NETFAULT_PEER"
else
	say "building examples/netfault_peer (release)"
	"${CARGO:-cargo}" build --release -q -p uroce --example netfault_peer || fail "cargo build of netfault_peer"
	PEER="${CARGO_TARGET_DIR:-target}/release/examples/netfault_peer"
	case "$PEER" in /*) ;; *) PEER="$ROOT/$PEER" ;; esac
fi
[ -x "$PEER" ] || fail "no netfault_peer at $PEER"

# --- netfault up; everything below is undone by cleanup
WORK="$(mktemp -d /tmp/netfault-test.XXXXXX)"
RMEM=/proc/sys/net/core/rmem_default
old_rmem="$(cat "$RMEM" 2>/dev/null || true)"
server_pid=""
cleanup() {
	[ -n "$old_rmem" ] && echo "$old_rmem" >"$RMEM" 2>/dev/null
	[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null
	"$NF/down" >/dev/null 2>&1
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# netfault's own tools (gcc, libnetfilter-queue-dev, iptables): its `up` installs them with
# apt-get but does not refresh the package lists, which a fresh machine needs first.
if ! [ -e /usr/include/libnetfilter_queue/libnetfilter_queue.h ] || ! command -v iptables-legacy >/dev/null ||
	! command -v gcc >/dev/null; then
	say "installing netfault's prerequisites (apt-get)"
	DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 || true
fi
# The impairer reads packets from an NFQUEUE netlink socket, whose receive buffer is
# net.core.rmem_default when it starts (netfault does not set one). The default (208 KiB)
# overflows under a burst of 4 KiB packets and the kernel then drops them before netfault
# sees them (nfnetlink_queue "user_dropped"): loss far above the 5 % asked for. So raise the
# default while netfault starts, and put it back right after.
[ -n "$old_rmem" ] && echo $((32 << 20)) >"$RMEM" 2>/dev/null
say "netfault up: ${FAULTS[*]}"
if ! "$NF/up" "${FAULTS[@]}" >"$WORK/up.log" 2>&1; then
	sed 's/^/  up: /' "$WORK/up.log"
	skip "netfault could not set up the namespaces / iptables / NFQUEUE (its output is above)"
fi
[ -n "$old_rmem" ] && echo "$old_rmem" >"$RMEM" 2>/dev/null
cat "$WORK/up.log"
# shellcheck disable=SC2206
PEER_ARGS+=(${NETFAULT_PEER_ARGS:-})

# --- the transfer: server in A, client in B; the device comes from UROCE_DEVICES
start_ns=$(date +%s%N)
UROCE_DEVICES="nf0=$SERVER_IP" ip netns exec "$NETFAULT_A" "$PEER" --server "${PEER_ARGS[@]}" \
	>"$WORK/server.json" 2> >(sed 's/^/  /' >&2) &
server_pid=$!
say "client: $BYTES by WRITE, then $BYTES by SEND (${PEER_ARGS[*]})"
UROCE_DEVICES="nf0=$CLIENT_IP" timeout "$((LIMIT + 30))" ip netns exec "$NETFAULT_B" "$PEER" \
	--client "$SERVER_IP" --bytes "$BYTES" "${PEER_ARGS[@]}" >"$WORK/client.json" 2> >(sed 's/^/  /' >&2)
client_rc=$?
server_rc=0
for _ in $(seq 100); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$server_pid" 2>/dev/null; then
	kill "$server_pid"
	server_rc=124
else
	wait "$server_pid"
	server_rc=$?
fi
server_pid=""
wall_ms=$((($(date +%s%N) - start_ns) / 1000000))
wall="$((wall_ms / 1000)).$(printf %03d $((wall_ms % 1000)))"

echo "== netfault stats (per namespace: what the impairers did)"
"$NF/stats"
echo "== server summary ($NETFAULT_A, $SERVER_IP; exit $server_rc)"
cat "$WORK/server.json"
echo "== client summary ($NETFAULT_B, $CLIENT_IP; exit $client_rc)"
cat "$WORK/client.json"

# --- checks
# Value of "key" in a one-line summary (keys are unique in netfault_peer's JSON).
val() { grep -o "\"$2\":[^,}]*" "$WORK/$1.json" | head -n1 | cut -d: -f2; }
num() { local v; v="$(val "$1" "$2")"; case "$v" in '' | *[!0-9]*) echo -1 ;; *) echo "$v" ;; esac; }
need=$(numfmt --from=iec "$BYTES" 2>/dev/null || echo 268435456)
problems=()
check() { # description, condition...
	local what="$1"
	shift
	if "$@"; then echo "  ok    $what"; else
		echo "  FAIL  $what"
		problems+=("$what")
	fi
}
ge() { [ "$1" -ge "$2" ]; }
echo "== checks"
# The "error" value is a JSON string that may hold commas, so it is cut out whole.
why() { grep -o '"error":\("[^"]*"\|null\)' "$WORK/$1.json" | head -n1 | cut -d: -f2-; }
check "client exited $client_rc and says ok (error: $(why client))" [ "$client_rc" = 0 -a "$(val client ok)" = true ]
check "server exited $server_rc and says ok (error: $(why server))" [ "$server_rc" = 0 -a "$(val server ok)" = true ]
check "WRITE: client moved $(num client write_bytes) >= $need bytes" ge "$(num client write_bytes)" "$need"
check "WRITE: server verified $(num server write_verified_bytes) bytes" ge "$(num server write_verified_bytes)" "$need"
check "SEND: client moved $(num client send_bytes) >= $need bytes" ge "$(num client send_bytes)" "$need"
check "SEND: server verified $(num server send_verified_bytes) bytes" ge "$(num server send_verified_bytes)" "$need"
check "client (requester) retransmissions: $(num client retransmissions)" ge "$(num client retransmissions)" 1
check "client sequence NAKs received: $(num client rcvd_seq_err), ACK timeouts: $(num client local_ack_timeouts)" \
	ge $(($(num client rcvd_seq_err) + $(num client local_ack_timeouts))) 1
check "server (receiver) ICRC drops rcvd_icrc_err: $(num server rcvd_icrc_err)" ge "$(num server rcvd_icrc_err)" 1
check "server out_of_seq_request: $(num server out_of_seq_request), duplicate_request: $(num server duplicate_request)" \
	ge "$(( $(num server out_of_seq_request) < $(num server duplicate_request) ? $(num server out_of_seq_request) : $(num server duplicate_request) ))" 1
check "no engine_panics / ring_corrupt on either side" \
	[ "$(num client engine_panics)$(num server engine_panics)$(num client ring_corrupt)$(num server ring_corrupt)" = 0000 ]
echo "  info  client ICRC drops (corrupted ACKs/NAKs): $(num client rcvd_icrc_err), RNR NAKs: $(num client rcvd_rnr_err)"
echo "netfault-test: WRITE $(val client write_mib_s) MiB/s, SEND $(val client send_mib_s) MiB/s under faults; wall time ${wall}s"
if [ ${#problems[@]} -gt 0 ]; then
	fail "$(printf '%s; ' "${problems[@]}")"
fi
echo "PASSED: $BYTES by WRITE and by SEND verified under ${FAULTS[*]}"
