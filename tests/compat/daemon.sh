#!/usr/bin/env bash
# uroced: one device shared by every process of the host (docs/daemon.md). The script starts
# its own daemon on $DAEMON_ADDR (default 127.0.0.77) with its sockets in a private
# directory (UROCE_DAEMON), so nothing else on the machine attaches to it, and checks:
#
#  1. listing: ibv_devices and `uroce devinfo` see the daemon's device with no UROCE_DEVICES;
#  2. eight perftest pairs at once (ib_write_bw, ib_read_lat, ib_send_bw, ib_atomic_bw, twice
#     each) on the one device and address, every process exiting 0, with `uroce devinfo` and
#     `uroce stat` run while they do (stat must show the daemon and its clients), and the
#     daemon's Prometheus endpoint (`uroced --metrics`) scraped twice: the exposition parses
#     (python3 prometheus_client, when installed) and every process's packet counter grows or
#     stays (none goes down);
#  3. ibv_rc_pingpong (--chk) and `uroce bench write_bw --verify` between two processes;
#     rping -v, udaddy and ucmatose through the daemon's CM routing; `uroce capture -d uroce0`
#     beside a pair of processes (every packet once, good ICRCs, nothing malformed in tshark);
#  4. a client killed with SIGKILL mid-transfer: another pair's 256 MiB verified WRITE stream
#     finishes with every payload matching, the daemon logs the reclaim and `uroce stat`
#     no longer lists the killed process;
#  5. the daemon killed with SIGKILL under a running pair: both processes end (no hang) with
#     an error, and a restarted daemon serves a new pair;
#  6. permissions (root only): a user the socket's mode excludes gets EACCES ("Permission
#     denied") opening the device but still lists it; one in the socket's group opens it;
#  (the fast path's system calls on a daemon-attached device are counted by
#  crates/uroce/tests/syscalls.rs, in the test command's cargo test).
#
#   tests/compat/daemon.sh [--no-build]
#
# Needs ibverbs-utils, perftest, rdmacm-utils (installed when root, else the script skips).
# Ends with a "N passed, M failed" line; exit status 1 if anything failed.
set -uo pipefail
cd "$(dirname "$0")/../.."

build=1
for arg in "$@"; do
    case "$arg" in
        --no-build) build=0 ;;
        *) echo "daemon.sh: unknown option $arg" >&2; exit 2 ;;
    esac
done

ADDR=${DAEMON_ADDR:-127.0.0.77}
port=${DAEMON_TCP_PORT:-19300}

# shellcheck source=tests/compat/lib.sh
. tests/compat/lib.sh
compat_need_tools "ibverbs-utils perftest rdmacm-utils" ibv_devices ibv_rc_pingpong ib_write_bw ib_read_lat ib_send_bw ib_atomic_bw rping udaddy ucmatose

compat_build compat-daemon
if [ "$build" = 1 ]; then
    cargo build --release -q -p uroce-cli || { echo "FAIL build"; echo "compat-daemon: 0 passed, 1 failed"; exit 1; }
fi
compat_free_addrs compat-daemon DAEMON_ADDR "$ADDR"

work=$(mktemp -d)
chmod 755 "$work"
dir="$work/d"
export UROCE_DAEMON="$dir"
unset UROCE_DEVICES
export LD_LIBRARY_PATH="$(pwd)/target/compat"
# The processes publish their stats and attach sockets here (uroce stat, uroce capture).
export UROCE_STATS_DIR="$work/stats"
mkdir -m 700 "$UROCE_STATS_DIR"
UROCED="$(pwd)/target/release/uroced"
UROCE="$(pwd)/target/release/uroce"
daemon_pid=""
pids=()
cleanup() {
    for p in "${pids[@]}" $daemon_pid; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

passed=0
failed=0
ok() { echo "ok   $1"; passed=$((passed + 1)); }
bad() {
    echo "FAIL $1"
    shift
    for f in "$@"; do [ -f "$f" ] && sed 's/^/    | /' "$f" | tail -n 15; done
    failed=$((failed + 1))
}

start_daemon() { # LOG [extra flags]
    local log=$1
    shift
    "$UROCED" --device "uroce0=$ADDR" --dir "$dir" "$@" >"$log" 2>&1 &
    daemon_pid=$!
    for _ in $(seq 100); do
        [ -S "$dir/uverbs0" ] && [ -f "$dir/uverbs0.dev" ] && return 0
        sleep 0.05
    done
    echo "FAIL daemon did not come up"; cat "$log"; return 1
}

stop_daemon() {
    [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
    daemon_pid=""
}

mport=$((port + 90))
start_daemon "$work/daemon.log" --metrics "$mport" || { echo "compat-daemon: 0 passed, 1 failed"; exit 1; }

# scrape OUT: GET the daemon's /metrics; with python3's prometheus_client the exposition must
# parse; prints "clients=N sent=M" (daemon clients, sum of every process's sent_pkts).
# The system python3 is where Debian's python3-prometheus-client goes; a python3 earlier in
# PATH (pyenv, a venv) may lack it.
scrape_py=python3
for py in python3 /usr/bin/python3; do
    if "$py" -c 'import prometheus_client' >/dev/null 2>&1; then scrape_py=$py; break; fi
done
scrape() {
    "$scrape_py" - "$mport" >"$1" 2>&1 <<'PY'
import sys, urllib.request
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=20).read().decode()
samples = []
try:
    from prometheus_client.parser import text_string_to_metric_families
    for fam in text_string_to_metric_families(text):
        samples += [(s.name, sorted(s.labels.items()), s.value) for s in fam.samples]
    how = "parsed by prometheus_client"
except ImportError:
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples.append((name.split("{")[0], name.partition("{")[2], float(value)))
    how = "prometheus_client not installed: split by hand"
clients = sum(v for n, l, v in samples if n == "uroce_daemon_clients")
sent = [(l, v) for n, l, v in samples if n == "uroce_sent_pkts_total"]
print(f"clients={int(clients)} sent={int(sum(v for _, v in sent))} ({how}, {len(samples)} samples)")
for l, v in sent:
    print(f"series {l} {int(v)}")
PY
}

# counters_grow A B: a counter never goes down — every uroce_sent_pkts_total series (one per
# process: the labels carry the pid) present in both scrapes has a value in B at least that
# in A, and one has grown. The sum over series may fall: a process that exits takes its
# series with it, as a Prometheus target's series end.
counters_grow() {
    awk '$1 == "series" { v = $NF; $NF = ""; if (FILENAME == ARGV[1]) a[$0] = v; else b[$0] = v }
        END {
            for (k in b) if (k in a) { both++; if (b[k] + 0 < a[k] + 0) down++; if (b[k] + 0 > a[k] + 0) up++ }
            printf "%d series in both scrapes, %d grew, %d went down\n", both, up, down
            exit !(both > 0 && up > 0 && down == 0)
        }' "$1" "$2"
}

# 1. Listing without UROCE_DEVICES.
if ibv_devices >"$work/devs" 2>&1 && grep -q uroce0 "$work/devs" \
    && "$UROCE" devinfo >"$work/devinfo" 2>&1 && grep -q "hca_id:.*uroce0" "$work/devinfo"; then
    ok "listing: ibv_devices and uroce devinfo see the daemon's uroce0"
else
    bad "listing" "$work/devs" "$work/devinfo"
fi

# 2. Eight perftest pairs at once on one device and address, each running 8 s (-D) so the
# pairs outlast the scrapes, `uroce devinfo` and `uroce stat` below however fast they go.
tests=(ib_write_bw ib_read_lat ib_send_bw ib_atomic_bw ib_write_bw ib_read_lat ib_send_bw ib_atomic_bw)
spids=()
cpids=()
for i in "${!tests[@]}"; do
    timeout 180 "${tests[$i]}" -x 0 -D 8 -p $((port + i)) >"$work/s$i" 2>&1 &
    spids+=($!)
done
sleep 1
for i in "${!tests[@]}"; do
    # perftest's client retries nothing: give its server time to listen.
    timeout 180 "${tests[$i]}" -x 0 -D 8 -p $((port + i)) 127.0.0.1 >"$work/c$i" 2>&1 &
    cpids+=($!)
done
sleep 2
scrape "$work/scrape1"
sleep 1
scrape "$work/scrape2"
"$UROCE" devinfo >"$work/devinfo2" 2>&1
devinfo_rc=$?
"$UROCE" stat >"$work/stat2" 2>&1
stat_rc=$?
all=0
for i in "${!tests[@]}"; do
    wait "${spids[$i]}"; s=$?
    wait "${cpids[$i]}"; c=$?
    if [ "$s" != 0 ] || [ "$c" != 0 ]; then
        bad "perftest pair $i ${tests[$i]}: server exit $s, client exit $c" "$work/s$i" "$work/c$i"
        all=1
    fi
done
[ "$all" = 0 ] && ok "eight perftest pairs at once on one daemon device ($ADDR): all 16 processes exit 0"
clients=$(sed -n 's/^daemon uroce0 .* clients \([0-9]*\) .*/\1/p' "$work/stat2")
c1=$(sed -n 's/^clients=\([0-9]*\) .*/\1/p' "$work/scrape1")
s1=$(sed -n 's/^clients=[0-9]* sent=\([0-9]*\) .*/\1/p' "$work/scrape1")
s2=$(sed -n 's/^clients=[0-9]* sent=\([0-9]*\) .*/\1/p' "$work/scrape2")
if [ "${c1:-0}" -ge 2 ] && [ -n "$s1" ] && [ -n "$s2" ] \
    && counters_grow "$work/scrape1" "$work/scrape2" >"$work/grow"; then
    ok "uroced --metrics scraped during the pairs: $(head -1 "$work/scrape1"), then $(cat "$work/grow")"
else
    cat "$work/grow" >>"$work/scrape2"
    bad "metrics endpoint (clients ${c1:-?}, sent ${s1:-?} then ${s2:-?})" "$work/scrape1" "$work/scrape2"
fi
if [ "$devinfo_rc" = 0 ] && grep -q "hca_id:.*uroce0" "$work/devinfo2" && [ "$stat_rc" = 0 ] \
    && [ "${clients:-0}" -ge 2 ] && grep -q "^link uroce0/1 addr $ADDR" "$work/stat2"; then
    ok "uroce devinfo and uroce stat while the pairs run (daemon reports $clients clients)"
else
    bad "devinfo/stat during the pairs" "$work/devinfo2" "$work/stat2"
fi

# 3. Two processes: ibv_rc_pingpong with data checks, uroce bench --verify, rping -v.
pair() { # NAME SERVER-CMD... -- CLIENT-CMD...
    local name=$1
    shift
    local srv=() cli=()
    while [ "$1" != -- ]; do srv+=("$1"); shift; done
    shift
    cli=("$@")
    timeout 60 "${srv[@]}" >"$work/$name.s" 2>&1 &
    local sp=$!
    sleep 0.7
    timeout 60 "${cli[@]}" >"$work/$name.c" 2>&1
    local c=$?
    wait "$sp"
    local s=$?
    if [ "$s" = 0 ] && [ "$c" = 0 ]; then ok "$name"; else
        bad "$name: server exit $s, client exit $c" "$work/$name.s" "$work/$name.c"; fi
}
pair "ibv_rc_pingpong --chk, two processes" \
    ibv_rc_pingpong -g 0 -n 200 --chk -p $((port + 20)) -- \
    ibv_rc_pingpong -g 0 -n 200 --chk -p $((port + 20)) 127.0.0.1
pair "uroce bench write_bw --verify, two processes" \
    "$UROCE" bench write_bw -n 2000 --verify -p $((port + 21)) -- \
    "$UROCE" bench write_bw -n 2000 --verify -p $((port + 21)) 127.0.0.1
pair "rping -v -C 20 through the daemon's CM routing" \
    rping -s -a "$ADDR" -C 20 -v -p $((port + 22)) -- \
    rping -c -a "$ADDR" -C 20 -v -p $((port + 22))
pair "udaddy (UD over SIDR) through the daemon" \
    udaddy -b "$ADDR" -- \
    udaddy -s "$ADDR"
pair "ucmatose -c 4 -C 10 through the daemon" \
    ucmatose -b "$ADDR" -c 4 -C 10 -p $((port + 24)) -- \
    ucmatose -s "$ADDR" -c 4 -C 10 -p $((port + 24))

# 3b. `uroce capture -d uroce0` beside two processes of the daemon device: it attaches to
# each client process (never opening a device itself); every packet between them is recorded
# once (by its sender), decodes with a good ICRC, and tshark finds nothing malformed.
timeout 120 "$UROCE" capture -d uroce0 -w "$work/dcap.pcap" -c 400 >"$work/dcap.out" 2>&1 &
cap=$!
pair "uroce bench write_bw between two processes under uroce capture -d uroce0" \
    "$UROCE" bench write_bw -s 4096 -n 20000 -p $((port + 25)) -- \
    "$UROCE" bench write_bw -s 4096 -n 20000 -p $((port + 25)) 127.0.0.1
wait "$cap"
cap_rc=$?
"$UROCE" decode --json "$work/dcap.pcap" >"$work/dcap.json" 2>"$work/dcap.sum"
if [ "$cap_rc" = 0 ] && grep -q "400 packets captured" "$work/dcap.out" \
    && grep -q "400 frames: 400 RoCEv2 packets decoded, 0 non-RoCE frames skipped, 0 garbled, 0 bad ICRC" "$work/dcap.sum" \
    && python3 - "$work/dcap.json" "$ADDR" >"$work/dcap.chk" 2>&1 <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
addr = sys.argv[2]
assert all(r["src"] == addr and r["dst"] == addr for r in recs), "addresses"
writes = [(r["dest_qp"], r["psn"]) for r in recs if "WRITE" in r["opcode_name"]]
assert writes, "no WRITE packets"
assert len(set(writes)) == len(writes), "a packet recorded twice"
print(f"{len(recs)} packets, {len(writes)} WRITE packets, each once")
PY
then
    tshark_bad=""
    if command -v tshark >/dev/null 2>&1; then
        tshark_bad=$(tshark -n -r "$work/dcap.pcap" -Y "_ws.malformed || _ws.expert.severity >= warning" -T fields -e frame.number 2>/dev/null)
    fi
    if [ -z "$tshark_bad" ]; then
        ok "uroce capture -d uroce0 (daemon device, two processes): $(cat "$work/dcap.chk")"
    else
        bad "uroce capture -d uroce0: tshark flags frames $tshark_bad"
    fi
else
    bad "uroce capture -d uroce0 (exit $cap_rc)" "$work/dcap.out" "$work/dcap.sum" "$work/dcap.chk"
fi

# 4. SIGKILL a client while another pair streams 256 MiB of verified WRITEs.
timeout 300 "$UROCE" bench write_bw -s 65536 -n 4096 --verify -p $((port + 30)) >"$work/ka.s" 2>&1 &
ka_s=$!
timeout 120 "$UROCE" bench write_bw -D 60 --timeout 15 -p $((port + 31)) >"$work/kb.s" 2>&1 &
kb_s=$!
sleep 0.7
timeout 300 "$UROCE" bench write_bw -s 65536 -n 4096 --verify -p $((port + 30)) 127.0.0.1 >"$work/ka.c" 2>&1 &
ka_c=$!
"$UROCE" bench write_bw -D 60 --timeout 15 -p $((port + 31)) 127.0.0.1 >"$work/kb.c" 2>&1 &
kb_c=$!
pids+=("$ka_s" "$kb_s" "$ka_c" "$kb_c")
sleep 2
kill -9 "$kb_c"
wait "$kb_c" 2>/dev/null
wait "$ka_c"; a_c=$?
wait "$ka_s"; a_s=$?
wait "$kb_s"; b_s=$?
sleep 0.5
"$UROCE" stat >"$work/stat4" 2>&1
if [ "$a_c" = 0 ] && [ "$a_s" = 0 ] && grep -q "every payload checked matched" "$work/ka.c" \
    && grep -q "pid $kb_c detached; reclaimed" "$work/daemon.log" \
    && ! grep -q "client pid $kb_c " "$work/stat4" && ! grep -q "^pid $kb_c " "$work/stat4"; then
    ok "SIGKILL of a client (pid $kb_c) mid-transfer: the other pair's 256 MiB verified, the daemon reclaimed the killed client's share, its server exited ($b_s)"
else
    bad "kill test (pair A exits $a_s/$a_c, killed pair's server $b_s)" "$work/ka.c" "$work/kb.s" "$work/daemon.log" "$work/stat4"
fi

# 5. The daemon dies under a running pair; a restarted daemon serves a new one.
timeout 120 "$UROCE" bench write_bw -D 60 --timeout 20 -p $((port + 40)) >"$work/dd.s" 2>&1 &
dd_s=$!
sleep 0.7
timeout 120 "$UROCE" bench write_bw -D 60 --timeout 20 -p $((port + 40)) 127.0.0.1 >"$work/dd.c" 2>&1 &
dd_c=$!
pids+=("$dd_s" "$dd_c")
sleep 2
kill -9 "$daemon_pid"
wait "$daemon_pid" 2>/dev/null
daemon_pid=""
t0=$(date +%s)
wait "$dd_c"; d_c=$?
wait "$dd_s"; d_s=$?
took=$(( $(date +%s) - t0 ))
if [ "$d_c" != 0 ] && [ "$d_c" != 124 ] && [ "$d_s" != 124 ] && grep -q "went away" "$work/dd.c" "$work/dd.s"; then
    ok "daemon killed under a running pair: both processes ended with errors in ${took} s (client $d_c, server $d_s), no hang"
else
    bad "daemon death (client exit $d_c, server $d_s; 124 = hung until timeout)" "$work/dd.c" "$work/dd.s"
fi
start_daemon "$work/daemon2.log" || true
pair "a restarted daemon serves a new pair" \
    "$UROCE" bench write_bw -n 500 --verify -p $((port + 41)) -- \
    "$UROCE" bench write_bw -n 500 --verify -p $((port + 41)) 127.0.0.1

# 6. Permissions, as for /dev/infiniband/uverbs0.
if [ "$(id -u)" = 0 ]; then
    stop_daemon
    start_daemon "$work/daemon3.log" --mode 660 --group 0 || true
    # The other user runs copies of the binary and the drop-in libraries in $work (0755):
    # the checkout may sit under a directory only its owner may enter (mktemp -d, a home).
    cp "$UROCE" "$work/uroce" && chmod 755 "$work/uroce"
    cp -rL "$LD_LIBRARY_PATH" "$work/compat" && chmod -R a+rX "$work/compat"
    as_nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups env UROCE_DAEMON="$dir"
               LD_LIBRARY_PATH="$work/compat")
    as_group=(setpriv --reuid=65534 --regid=0 --clear-groups env UROCE_DAEMON="$dir"
              LD_LIBRARY_PATH="$work/compat")
    "${as_nobody[@]}" "$work/uroce" devinfo >"$work/perm1" 2>&1
    r1=$?
    "${as_nobody[@]}" ibv_devices >"$work/perm2" 2>&1
    "${as_group[@]}" "$work/uroce" devinfo >"$work/perm3" 2>&1
    r3=$?
    if [ "$r1" != 0 ] && grep -qi "permission denied" "$work/perm1" && grep -q uroce0 "$work/perm2" \
        && [ "$r3" = 0 ] && grep -q "hca_id:.*uroce0" "$work/perm3"; then
        ok "socket mode 660 group root: nobody gets EACCES opening uroce0 (but lists it), a member of the group opens it"
    else
        bad "permissions (nobody exit $r1, group member exit $r3)" "$work/perm1" "$work/perm2" "$work/perm3"
    fi
else
    echo "skip permissions: needs root to run a client as another user"
fi


stop_daemon
echo "compat-daemon: $passed passed, $failed failed"
[ "$failed" = 0 ]
