#!/usr/bin/env bash
# ECN congestion control (DCQCN, docs/wire.md §11) on a real kernel path: two RC flows from
# one network namespace to the other through netfault's bottleneck (a FIFO drained at
# 100 Mbit/s, tail drop above 192 KiB, CE marks above 32 KiB), once with ECN/DCQCN on and once
# with it off (UROCE_ECN=0). Each flow is a netfault_peer pair (RDMA WRITEs of 64 KiB, path
# MTU 1024) on its own pair of addresses; both share the one bottleneck.
#
#   sudo scripts/netfault-cc-test.sh        # about 80 s (plus a release build); not in the default test command
#
# Reported per mode: tail drops as % of the packets the bottleneck saw, CE marks, the
# devices' np_cnp_sent / rp_cnp_handled, each flow's goodput and their sum against the link
# rate. Goodput is measured while both flows run: two `uroce stat --json` snapshots
# CC_SAMPLE_SECS apart, from the server QPs' in-order request packets (rcvd_pkts −
# duplicate_request − out_of_seq_request, each 1024 bytes of payload).
# Checked with ECN on: tail drops < 0.1 %, aggregate ≥ 0.85 × the rate, flows within 20 %
# of each other; with it off the figures are only reported. Exit 0 pass, 1 fail; "SKIPPED"
# (exit 0) without root, namespaces or netfault.
#
# Knobs: CC_RATE_MBPS (100), CC_QUEUE_KB (192), CC_MARK_KB (32), CC_BYTES per flow (160M),
# CC_WARMUP_SECS (3), CC_SAMPLE_SECS (12), CC_MODES ("on off"), NETFAULT_DIR, NETFAULT_PEER
# (a prebuilt netfault_peer), UROCE_BIN (a prebuilt uroce). Namespaces urcca/urccb and state
# in /run/netfault-uroce-cc, so it does not collide with scripts/netfault-test.sh.
set -uo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export NETFAULT_A=urcca NETFAULT_B=urccb NETFAULT_RUN=/run/netfault-uroce-cc
RATE="${CC_RATE_MBPS:-100}" QUEUE="${CC_QUEUE_KB:-192}" MARK="${CC_MARK_KB:-32}"
BYTES="${CC_BYTES:-160M}" WARMUP="${CC_WARMUP_SECS:-3}" SAMPLE="${CC_SAMPLE_SECS:-12}"
MODES="${CC_MODES:-on off}"
SERVER_IPS=(10.79.0.1 10.79.0.11) CLIENT_IPS=(10.79.0.2 10.79.0.12) PORTS=(18611 18612)
PEER_ARGS=(--phases write --mtu 1024 --msg-size 64K --depth 16 --ack-timeout 14 --spin-us 50 --deadline 300)

say() { echo "netfault-cc-test: $*"; }
skip() { echo "SKIPPED: $*"; exit 0; }
fail() { echo "FAILED: $*"; exit 1; }

[ "$(id -u)" = 0 ] || skip "not root (network namespaces, iptables and NFQUEUE need root)"
NF="${NETFAULT_DIR:-}"
if [ -z "$NF" ]; then
	d="$ROOT/../shared/netfault"
	if [ -x "$d/up" ]; then NF="$(cd "$d" && pwd)"; fi
fi
if [ -z "$NF" ] || ! [ -x "$NF/up" ]; then skip "netfault not found (set NETFAULT_DIR)"; fi
command -v ip >/dev/null || skip "no ip(8)"
command -v python3 >/dev/null || skip "no python3 (used to read the JSON summaries)"
probe="urcc-probe-$$"
ip netns add "$probe" 2>/dev/null || skip "cannot create network namespaces here"
ip netns del "$probe"

cd "$ROOT" || fail "cd $ROOT"
T="${CARGO_TARGET_DIR:-target}"
case "$T" in /*) ;; *) T="$ROOT/$T" ;; esac
if [ -z "${NETFAULT_PEER:-}" ] || [ -z "${UROCE_BIN:-}" ]; then
	say "building netfault_peer and uroce (release)"
	"${CARGO:-cargo}" build --release -q -p uroce --example netfault_peer || fail "build netfault_peer"
	"${CARGO:-cargo}" build --release -q -p uroce-cli --bin uroce || fail "build uroce"
fi
PEER="${NETFAULT_PEER:-$T/release/examples/netfault_peer}"
UROCE="${UROCE_BIN:-$T/release/uroce}"
[ -x "$PEER" ] && [ -x "$UROCE" ] || fail "no netfault_peer / uroce binaries"

WORK="$(mktemp -d /tmp/netfault-cc-test.XXXXXX)"
RMEM=/proc/sys/net/core/rmem_default
old_rmem="$(cat "$RMEM" 2>/dev/null || true)"
pids=()
cleanup() {
	[ -n "$old_rmem" ] && echo "$old_rmem" >"$RMEM" 2>/dev/null
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	"$NF/down" >/dev/null 2>&1
	[ -n "${CC_KEEP:-}" ] && echo "kept $WORK" || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

snapshot() { UROCE_STATS_DIR="$WORK/stats" "$UROCE" stat --json >"$1" 2>/dev/null; }

run_mode() {
	local mode="$1" ecn=1 dir="$WORK/$1"
	[ "$mode" = off ] && ecn=0
	mkdir -p "$dir" "$WORK/stats"
	chmod 700 "$WORK/stats"
	# NFQUEUE's socket buffer is rmem_default when netfault starts (see netfault-test.sh).
	[ -n "$old_rmem" ] && echo $((32 << 20)) >"$RMEM" 2>/dev/null
	if ! "$NF/up" --rate-mbps "$RATE" --queue-kb "$QUEUE" --mark-kb "$MARK" >"$dir/up.log" 2>&1; then
		sed 's/^/  up: /' "$dir/up.log"
		skip "netfault could not start"
	fi
	[ -n "$old_rmem" ] && echo "$old_rmem" >"$RMEM" 2>/dev/null
	# The impairer keeps its link's clock in user space: descheduled on a busy host, it
	# takes a burst of queued arrivals at once and its queue overflows in one instant, an
	# artifact of the host rather than the senders. So it runs at a higher priority.
	for ns in "$NETFAULT_A" "$NETFAULT_B"; do
		[ -s "$NETFAULT_RUN/pid.$ns" ] && renice -n -10 -p "$(cat "$NETFAULT_RUN/pid.$ns")" >/dev/null 2>&1
	done
	# The second flow's addresses, on the same veth pair (so behind the same bottleneck).
	ip -n "$NETFAULT_A" addr add "${SERVER_IPS[1]}/24" dev nfva || fail "addr add"
	ip -n "$NETFAULT_B" addr add "${CLIENT_IPS[1]}/24" dev nfvb || fail "addr add"
	say "ECN $mode: netfault up --rate-mbps $RATE --queue-kb $QUEUE --mark-kb $MARK; 2 flows of $BYTES"
	local i
	for i in 0 1; do
		UROCE_ECN=$ecn UROCE_STATS_DIR="$WORK/stats" UROCE_DEVICES="cc$i=${SERVER_IPS[$i]}" \
			ip netns exec "$NETFAULT_A" "$PEER" --server --port "${PORTS[$i]}" "${PEER_ARGS[@]}" \
			>"$dir/server$i.json" 2>"$dir/server$i.err" &
		pids+=($!)
	done
	sleep 0.5
	local start_ns cpids=()
	start_ns=$(date +%s%N)
	for i in 0 1; do
		UROCE_ECN=$ecn UROCE_STATS_DIR="$WORK/stats" UROCE_DEVICES="cc$((i + 2))=${CLIENT_IPS[$i]}" \
			ip netns exec "$NETFAULT_B" "$PEER" --client "${SERVER_IPS[$i]}" --port "${PORTS[$i]}" \
			--bytes "$BYTES" "${PEER_ARGS[@]}" >"$dir/client$i.json" 2>"$dir/client$i.err" &
		cpids+=($!)
		pids+=($!)
	done
	sleep "$WARMUP"
	snapshot "$dir/s1.json"
	cp "$NETFAULT_RUN/stats.$NETFAULT_B" "$dir/nf1.txt" 2>/dev/null
	sleep "$SAMPLE"
	snapshot "$dir/s2.json"
	cp "$NETFAULT_RUN/stats.$NETFAULT_B" "$dir/nf2.txt" 2>/dev/null
	local alive=0
	for p in "${cpids[@]}"; do kill -0 "$p" 2>/dev/null && alive=$((alive + 1)); done
	echo "$alive" >"$dir/alive_at_s2"
	for p in "${cpids[@]}"; do wait "$p"; done
	echo $((($(date +%s%N) - start_ns) / 1000000)) >"$dir/elapsed_ms"
	sleep 1.5 # the servers' final summaries, netfault's last stats line
	NETFAULT_A="$NETFAULT_A" NETFAULT_B="$NETFAULT_B" "$NF/stats" >"$dir/netfault.txt" 2>&1
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	pids=()
	"$NF/down" >/dev/null 2>&1
	rm -rf "$WORK/stats"
}

for m in $MODES; do run_mode "$m"; done

python3 - "$WORK" "$RATE" "$MODES" <<'EOF'
import json, sys, re
work, rate, modes = sys.argv[1], float(sys.argv[2]), sys.argv[3].split()

def counters(c):
    return c if isinstance(c, dict) else {k: v for k, v in c}

def servers(path):
    """{device: (time_ms, in-order request packets)} of the server devices."""
    out = {}
    try:
        snap = json.load(open(path))
    except Exception:
        return out
    for p in snap.get("processes", []):
        for d in p.get("devices", []):
            if d["name"] in ("cc0", "cc1"):
                c = counters(d["counters"])
                good = c.get("rcvd_pkts", 0) - c.get("duplicate_request", 0) - c.get("out_of_seq_request", 0)
                out[d["name"]] = (p["time_ms"], good)
    return out

def summary(path):
    try:
        line = [l for l in open(path) if l.startswith("{")][-1]
        return json.loads(line)
    except Exception:
        return {}

ok = True
for mode in modes:
    d = f"{work}/{mode}"
    nf = open(f"{d}/netfault.txt").read()
    side_b = [l for l in nf.splitlines() if l.startswith("urccb")]
    def field(name):
        m = re.search(rf"\b{name}=(\d+)", side_b[0]) if side_b else None
        return int(m.group(1)) if m else 0
    seen, tail, ce, nonect = field("seen"), field("tail_dropped"), field("ce_marked"), field("nonect")
    def nf(path, name):
        try:
            m = re.search(rf"\b{name}=(\d+)", open(path).read())
            return int(m.group(1)) if m else 0
        except OSError:
            return 0
    win_seen = nf(f"{d}/nf2.txt", "seen") - nf(f"{d}/nf1.txt", "seen")
    win_tail = nf(f"{d}/nf2.txt", "tail_dropped") - nf(f"{d}/nf1.txt", "tail_dropped")
    win_pct = 100.0 * win_tail / win_seen if win_seen > 0 else 0.0
    s1, s2 = servers(f"{d}/s1.json"), servers(f"{d}/s2.json")
    flows = []
    for dev in ("cc0", "cc1"):
        if dev in s1 and dev in s2:
            dt = (s2[dev][0] - s1[dev][0]) / 1000.0
            flows.append((s2[dev][1] - s1[dev][1]) * 1024 * 8 / dt / 1e6 if dt > 0 else 0.0)
        else:
            flows.append(0.0)
    agg = sum(flows)
    srv = [summary(f"{d}/server{i}.json") for i in (0, 1)]
    cli = [summary(f"{d}/client{i}.json") for i in (0, 1)]
    cnp_sent = sum(s.get("counters", {}).get("np_cnp_sent", 0) for s in srv)
    marked = sum(s.get("counters", {}).get("np_ecn_marked_roce_packets", 0) for s in srv)
    handled = sum(c.get("counters", {}).get("rp_cnp_handled", 0) for c in cli)
    retrans = sum(c.get("counters", {}).get("retransmissions", 0) for c in cli)
    whole = [c.get("write_mib_s", 0.0) * 8 * 1.048576 for c in cli]
    oks = [c.get("ok") for c in cli] + [s.get("ok") for s in srv]
    alive = open(f"{d}/alive_at_s2").read().strip()
    elapsed = int(open(f"{d}/elapsed_ms").read()) / 1000
    drop_pct = 100.0 * tail / seen if seen else 0.0
    spread = (max(flows) - min(flows)) / max(flows) if max(flows) > 0 else 1.0
    print(f"ECN {mode}: bottleneck saw {seen} packets: tail_dropped {tail} ({drop_pct:.3f} %; "
          f"{win_tail} of {win_seen} = {win_pct:.3f} % while sampling), ce_marked {ce}, nonect {nonect}")
    print(f"  np_ecn_marked_roce_packets {marked}, np_cnp_sent {cnp_sent}, rp_cnp_handled {handled}, "
          f"retransmissions {retrans}")
    print(f"  goodput while both ran: flow 1 {flows[0]:.1f}, flow 2 {flows[1]:.1f}, "
          f"sum {agg:.1f} Mbit/s = {agg / rate:.3f} x {rate:.0f} Mbit/s; spread {100 * spread:.1f} %"
          f" (flows alive at the 2nd sample: {alive}/2)")
    print(f"  whole transfers: {whole[0]:.1f} and {whole[1]:.1f} Mbit/s, {elapsed:.1f} s; ok {oks}")
    if not all(oks):
        print(f"  FAIL: a transfer failed"); ok = False
    if mode == "on":
        checks = [(drop_pct < 0.1, f"tail drops {drop_pct:.3f} % < 0.1 %"),
                  (agg >= 0.85 * rate, f"aggregate {agg:.1f} >= {0.85 * rate:.1f} Mbit/s"),
                  (spread <= 0.2, f"flows within 20 % ({100 * spread:.1f} %)"),
                  (alive == "2", "both flows ran through the sample"),
                  (cnp_sent > 0 and handled > 0, "CNPs sent and handled")]
        for good, what in checks:
            print(f"  {'ok  ' if good else 'FAIL'} {what}")
            ok &= good
sys.exit(0 if ok else 1)
EOF
rc=$?
[ $rc = 0 ] && echo "PASSED" || echo "FAILED: see above"
exit $rc
