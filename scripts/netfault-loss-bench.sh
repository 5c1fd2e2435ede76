#!/usr/bin/env bash
# Goodput under random loss, measured as perftest users would: `uroce bench write_bw` and
# `send_bw` with perftest's defaults (64 KiB messages, tx depth 128, the device's MTU 1024,
# local ACK timeout 14) and --verify, server in one network namespace and client in the other,
# through netfault (NFQUEUE, a user-space hop in each direction) with no loss, 0.1 % loss and
# 1 % loss. All profiles run on the same namespaces: only netfault's impairer processes are
# restarted between them, so every ratio is against a clean baseline taken minutes apart on
# the same path. Rounds repeat the whole sequence (the machine is shared: the spread matters).
#
#   sudo scripts/netfault-loss-bench.sh      # about 2-4 min per round; not in the test command
#
# Reported per round, test and loss: the bench's average MB/s, its ratio to the clean run of
# the same round, and the packets the client's side put on the wire per payload packet (the
# impairer's `seen` in the client's namespace, acknowledgements excluded since they flow the
# other way, over bytes / 1024). Exit 0 when every round's 1 % ratio is >= LOSS_MIN_RATIO
# (default 0.5; the goal in docs/wire.md §5.5), 1 otherwise; "SKIPPED" without root/netfault.
#
# A profile is a loss probability or `hostile`: netfault-test.sh's faults (loss 5 %, reorder
# 25 %, duplicate 2 %, corrupt 1 %), e.g. LOSS_PROFILES="0 hostile" LOSS_ITERS=4096 for the
# 256 MiB transfers.
#
# Knobs: LOSS_ROUNDS (3), LOSS_ITERS (-n, 1024 = 64 MiB), LOSS_PROFILES ("0 0.001 0.01"),
# LOSS_TESTS ("write_bw send_bw"), LOSS_MIN_RATIO (0.5), UROCE_BIN (a prebuilt uroce),
# LOSS_BENCH_ARGS (extra `uroce bench` options; empty = perftest's defaults), NETFAULT_DIR,
# LOSS_SELECTIVE_REPEAT (1: both ends run with --selective-repeat, docs/wire.md §5.6).
set -uo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export NETFAULT_A=urlba NETFAULT_B=urlbb NETFAULT_RUN=/run/netfault-uroce-loss
ROUNDS="${LOSS_ROUNDS:-3}" ITERS="${LOSS_ITERS:-1024}"
PROFILES="${LOSS_PROFILES:-0 0.001 0.01}" TESTS="${LOSS_TESTS:-write_bw send_bw}"
MIN_RATIO="${LOSS_MIN_RATIO:-0.5}"
SERVER_IP=10.79.0.1 CLIENT_IP=10.79.0.2 PORT=18531

say() { echo "netfault-loss-bench: $*"; }
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
command -v python3 >/dev/null || skip "no python3"

cd "$ROOT" || fail "cd $ROOT"
T="${CARGO_TARGET_DIR:-target}"
case "$T" in /*) ;; *) T="$ROOT/$T" ;; esac
if [ -z "${UROCE_BIN:-}" ]; then
	say "building uroce (release)"
	"${CARGO:-cargo}" build --release -q -p uroce-cli --bin uroce || fail "build uroce"
fi
UROCE="${UROCE_BIN:-$T/release/uroce}"
[ -x "$UROCE" ] || fail "no uroce binary at $UROCE"

WORK="$(mktemp -d /tmp/netfault-loss-bench.XXXXXX)"
RMEM=/proc/sys/net/core/rmem_default
old_rmem="$(cat "$RMEM" 2>/dev/null || true)"
server_pid=""
cleanup() {
	[ -n "$old_rmem" ] && echo "$old_rmem" >"$RMEM" 2>/dev/null
	[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null
	"$NF/down" >/dev/null 2>&1
	[ -n "${LOSS_KEEP:-}" ] && echo "kept $WORK" || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# NFQUEUE's socket buffer is rmem_default when an impairer starts (see netfault-test.sh).
[ -n "$old_rmem" ] && echo $((32 << 20)) >"$RMEM" 2>/dev/null
"$NF/up" >"$WORK/up.log" 2>&1 || { sed 's/^/  up: /' "$WORK/up.log"; skip "netfault could not start"; }

# Restart both impairers with profile P (same namespaces, same NFQUEUE rules; fresh counters).
set_loss() {
	local p="$1" q=1 ns faults peer dup
	faults=(--loss "$p")
	[ "$p" = hostile ] && faults=(--loss 0.05 --reorder 0.25 --corrupt 0.01)
	for ns in "$NETFAULT_A" "$NETFAULT_B"; do
		peer=10.79.0.2
		[ "$ns" = "$NETFAULT_B" ] && peer=10.79.0.1
		# Duplicates come from iptables' TEE ahead of the NFQUEUE rule (as netfault's up does).
		dup=(-p udp -m statistic --mode random --probability 0.02 -j TEE --gateway "$peer")
		ip netns exec "$ns" iptables-legacy -t mangle -D POSTROUTING "${dup[@]}" 2>/dev/null
		[ "$p" = hostile ] && ip netns exec "$ns" iptables-legacy -t mangle -I POSTROUTING 1 "${dup[@]}"
		local pid
		pid="$(cat "$NETFAULT_RUN/pid.$ns")"
		kill "$pid" 2>/dev/null
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		rm -f "$NETFAULT_RUN/stats.$ns"
		ip netns exec "$ns" setsid "$NETFAULT_RUN/netfault" --queue "$q" "${faults[@]}" \
			--seed "$((RANDOM + 1))" --stats "$NETFAULT_RUN/stats.$ns" \
			</dev/null >"$NETFAULT_RUN/log.$ns" 2>&1 &
		echo $! >"$NETFAULT_RUN/pid.$ns"
		renice -n -10 -p "$!" >/dev/null 2>&1
		q=$((q + 1))
	done
	sleep 0.3
}
seen() { # namespace: the impairer's final `seen` (it rewrites its stats file on SIGTERM)
	grep -o 'seen=[0-9]*' "$NETFAULT_RUN/stats.$1" 2>/dev/null | cut -d= -f2
}

# shellcheck disable=SC2206
EXTRA=(${LOSS_BENCH_ARGS:-})
[ "${LOSS_SELECTIVE_REPEAT:-0}" = 1 ] && EXTRA+=(--selective-repeat)
echo "round test loss mbs client_pkts server_pkts secs ok" >"$WORK/results"
for r in $(seq "$ROUNDS"); do
	for t in $TESTS; do
		for p in $PROFILES; do
			set_loss "$p"
			rm -rf "$WORK/stats"
			mkdir -p "$WORK/stats"
			chmod 700 "$WORK/stats"
			export UROCE_STATS_DIR="$WORK/stats" UROCE_STATS_KEEP=1
			UROCE_DEVICES="lb0=$SERVER_IP" ip netns exec "$NETFAULT_A" "$UROCE" bench "$t" \
				-p "$PORT" -x 0 -s 65536 -n "$ITERS" --verify "${EXTRA[@]}" \
				>"$WORK/server.out" 2>&1 &
			server_pid=$!
			sleep 0.5
			start=$(date +%s%N)
			UROCE_DEVICES="lb0=$CLIENT_IP" timeout 900 ip netns exec "$NETFAULT_B" "$UROCE" bench "$t" \
				-p "$PORT" -x 0 -s 65536 -n "$ITERS" --verify "${EXTRA[@]}" "$SERVER_IP" \
				>"$WORK/client.out" 2>&1
			rc=$?
			ms=$(( ($(date +%s%N) - start) / 1000000 ))
			wait "$server_pid"
			src=$?
			server_pid=""
			# Final stats: stop the impairers (they write their counters on SIGTERM).
			for ns in "$NETFAULT_A" "$NETFAULT_B"; do kill "$(cat "$NETFAULT_RUN/pid.$ns")" 2>/dev/null; done
			sleep 0.5
			# perftest's result line: bytes iterations peak average msg-rate.
			mbs="$(awk '$1 == 65536 && NF >= 5 {print $4}' "$WORK/client.out" | tail -n1)"
			ok=$([ "$rc" = 0 ] && [ "$src" = 0 ] && [ -n "$mbs" ] && echo yes || echo no)
			[ "$ok" = yes ] || sed 's/^/    client: /' "$WORK/client.out" | tail -n 5
			echo "$r $t $p ${mbs:-0} $(seen "$NETFAULT_B") $(seen "$NETFAULT_A") $ms $ok" |
				awk '{ $7 = sprintf("%.1f", $7 / 1000); print }' >>"$WORK/results"
			tail -n1 "$WORK/results" | sed 's/^/  /'
			"$UROCE" stat --json --exited >"$WORK/stat.json" 2>/dev/null
			python3 - "$WORK/stat.json" <<'PY' | sed 's/^/    /'
import json, sys
keys = ("retransmissions", "rcvd_seq_err", "local_ack_timeouts", "rto_probes", "spurious_timeouts", "duplicate_request",
        "out_of_seq_request", "send_nak", "sr_out_of_order_kept", "sr_out_of_order_dropped",
        "sr_hole_naks_sent", "sr_single_resends", "sr_naks_ignored")
try:
    snap = json.load(open(sys.argv[1]))
except Exception:
    sys.exit(0)
tot = {}
for p in snap.get("processes", []):
    for d in p.get("devices", []):
        c = d["counters"] if isinstance(d["counters"], dict) else dict(d["counters"])
        for k in keys:
            tot[k] = tot.get(k, 0) + c.get(k, 0)
print(" ".join(f"{k}={tot.get(k, 0)}" for k in keys))
PY
		done
	done
done

python3 - "$WORK/results" "$ITERS" "$MIN_RATIO" <<'EOF'
import sys, statistics
path, iters, min_ratio = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
rows = [l.split() for l in open(path)][1:]
payload = iters * 64  # 64 KiB messages of MTU-1024 packets
def num(loss):
    return 0.05 if loss == "hostile" else float(loss)
base = {(r[0], r[1]): float(r[3]) for r in rows if r[2] == "0"}
table = {}
ok = True
print("round  test     profile    MB/s   ratio  pkts/payload  secs  ok")
for r in rows:
    rnd, test, loss, mbs, cli, srv, secs, good = r
    b = base.get((rnd, test), 0.0)
    ratio = float(mbs) / b if b > 0 else 0.0
    wire = int(cli or 0) / payload
    print(f"{rnd:>5}  {test:8} {loss:>7} {float(mbs):7.2f} {ratio:6.2f} {wire:10.3f}  {secs:>6}  {good}")
    table.setdefault((test, loss), []).append((float(mbs), ratio, wire))
    if good != "yes":
        ok = False
    if loss != "hostile" and abs(num(loss) - 0.01) < 1e-9 and ratio < min_ratio:
        ok = False
print("summary (min / median / max over rounds)")
for (test, loss), v in sorted(table.items()):
    def s(i, f):
        xs = [x[i] for x in v]
        return f"{f.format(min(xs))} / {f.format(statistics.median(xs))} / {f.format(max(xs))}"
    print(f"  {test:8} profile {loss:>7}: MB/s {s(0, '{:.2f}')}; ratio {s(1, '{:.2f}')}; "
          f"pkts/payload {s(2, '{:.3f}')}")
sys.exit(0 if ok else 1)
EOF
rc=$?
[ $rc = 0 ] && echo "PASSED" || echo "FAILED: see above"
exit $rc
