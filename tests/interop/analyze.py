#!/usr/bin/env python3
"""Wire-level checks of one interop capture (tests/interop/run.sh).

Usage: analyze.py FILE.pcap --uroce ADDR[,ADDR] [--timeout-us US] [--pingpong]
       analyze.py --selftest
       analyze.py --stat-last FILE.jsonl   (the last `uroce stat --watch --json` sample)

Reads a classic pcap (Ethernet) of udp/4791 taken on the rxe lab bridge and checks, per
sender (uroce = the packets whose IP source is ADDR, rxe = every other one):

* retransmissions: a request packet (RC/UC SEND, WRITE, READ request, atomic) whose
  (source, destination QP, PSN) was already seen. uroce must have none on the clean lab
  link. rxe has some: its retransmit timer is armed when the first packet of a QP goes
  out and is not re-armed by ACKs that leave nothing outstanding, so it fires one QP
  timeout after that first packet and rxe then resends whatever is unacknowledged at that
  moment, however recently it was sent (drivers/infiniband/sw/rxe: rxe_req.c update_state
  arms it only if !timer_pending; rxe_comp.c re-arms it only while packets are
  outstanding; the same spurious retries show up between two rxe hosts in
  testdata/lab-captures/README.md). Such a retransmission follows its original by less
  than the QP timeout and is reported as "spurious"; one that comes a full timeout or
  more after its original means the peer did not answer in time, which is an error.
  uroce's retransmissions are judged against rxe's answer times, measured the same way
  (a request is answered by the first rxe response, ACK, READ response or atomic ACK,
  that covers its PSN): one that comes after rxe had answered the request, or while the
  oldest request rxe had not answered on that QP was younger than the QP timeout, is an
  error (uroce's timer fired early or ignored an ACK); one that comes when rxe had let
  a request wait a full QP timeout or more, and rxe did answer it later, is the IBTA's
  local ACK timeout doing its job (IBTA Vol 1 ch. 9, reliable service: go-back-N from
  the oldest unacknowledged PSN) against a slow peer, and is only counted
  (retx_uroce_peer_late) — the emulated rxe VM sometimes takes longer than 67 ms to
  answer. One that an rxe sequence NAK or RNR NAK asked for is counted too
  (retx_uroce_after_nak): the NAK is the problem reported. Once such a timeout or NAK has
  happened on a QP, uroce's retransmission timer is armed there (it stays off until a
  path has lost something, crates/transport/src/recovery.rs): it probes from the oldest
  unacknowledged PSN after srtt + 4 rttvar of the answer times it measured (RFC 6298),
  at least 1 ms, long before the QP timeout. A retransmission on that QP of a request
  rxe had not answered yet, at least PROBE_FLOOR_US after its original, and that rxe did
  answer later, is such a probe against a peer slower than it had been, and is counted
  (retx_uroce_probe). On a QP that never lost anything, any early retransmission stays
  an error.
* NAKs: any AETH whose syndrome is a NAK (PSN sequence error, invalid request, remote
  access or operational error) or an RNR NAK, from either side.
* with --pingpong: the bytes of the SEND messages (reassembled from FIRST/MIDDLE/LAST,
  pad removed). The ping-pong tools send and receive through one buffer, so each side
  sends back exactly what it last received and every message of a run equals the
  client's first one: a byte that either stack delivered wrongly shows up in the next
  message. The first message must be one of the tools' fills: rdma-core's rc/ud
  pp_init_ctx fills 0x7b with a 0 at the start of each 4 KiB page under --chk,
  srq_pingpong (and `uroce pingpong`) fill zeros.

Prints one `analyze:` summary line with key=value counts, a line per problem, and exits 1
if there is a problem (2 if the file cannot be read). Standard library only.
"""
import ipaddress
import json
import struct
import sys

# opcode -> (kind, position, extension header bytes after the BTH)
# kind: "req" (requests, retransmittable), "resp" (responses/ACKs), "ud"
_REQ = {
    # RC (0x00..) and UC (0x20..): SEND, WRITE, READ request, atomics
    0x00: ("send", "first", 0), 0x01: ("send", "middle", 0), 0x02: ("send", "last", 0),
    0x03: ("send", "last", 4), 0x04: ("send", "only", 0), 0x05: ("send", "only", 4),
    0x06: ("write", "first", 16), 0x07: ("write", "middle", 0), 0x08: ("write", "last", 0),
    0x09: ("write", "last", 4), 0x0A: ("write", "only", 16), 0x0B: ("write", "only", 20),
    0x0C: ("read", "only", 16), 0x13: ("atomic", "only", 28), 0x14: ("atomic", "only", 28),
    0x16: ("send", "last", 4), 0x17: ("send", "only", 4),
}
# responses (RC) that carry an AETH right after the BTH: READ response first/last/only,
# Acknowledge, Atomic Acknowledge
_AETH = (0x0D, 0x0F, 0x10, 0x11, 0x12)
_UD = {0x64: 8, 0x65: 12}

PAGE = 4096
# A response answers the rxe requests whose PSN is at most this far below its own (PSNs of
# different QPs start at random points of the 2^24 space, so they rarely fall this close).
ANSWER_WINDOW = 1 << 16
# Capture timestamps are taken on the lab bridge, not where uroce's timer runs: a
# retransmission this much earlier than one QP timeout after the oldest unanswered request
# still counts as one QP timeout after it.
TIMER_SLACK_US = 1000
# uroce's retransmission timer never fires sooner than this after what it resends (the
# `min_ns` floor of crates/transport/src/recovery.rs `rto_ns`).
PROBE_FLOOR_US = 1000


def frames(path):
    """(timestamp seconds, frame bytes) of every frame of a classic pcap."""
    with open(path, "rb") as f:
        head = f.read(24)
        if len(head) < 24:
            raise ValueError("not a pcap file")
        magic = struct.unpack("<I", head[:4])[0]
        if magic in (0xA1B2C3D4, 0xA1B23C4D):
            end = "<"
        elif magic in (0xD4C3B2A1, 0x4D3CB2A1):
            end = ">"
        else:
            raise ValueError("not a classic pcap file")
        nano = magic in (0xA1B23C4D, 0x4D3CB2A1)
        linktype = struct.unpack(end + "I", head[20:24])[0]
        if linktype != 1:
            raise ValueError(f"link type {linktype} is not Ethernet")
        while True:
            h = f.read(16)
            if len(h) < 16:
                return
            sec, frac, incl, _orig = struct.unpack(end + "IIII", h)
            data = f.read(incl)
            yield sec + frac / (1e9 if nano else 1e6), data


def roce(data):
    """(src address, dst address, BTH..pad bytes without ICRC) of a RoCEv2 frame, else
    None."""
    if len(data) < 14:
        return None
    etype = struct.unpack("!H", data[12:14])[0]
    off = 14
    if etype == 0x8100 and len(data) >= 18:
        etype = struct.unpack("!H", data[16:18])[0]
        off = 18
    if etype == 0x0800:
        if len(data) < off + 20:
            return None
        ihl = (data[off] & 0xF) * 4
        total = struct.unpack("!H", data[off + 2:off + 4])[0]
        if data[off + 9] != 17:
            return None
        src = ipaddress.ip_address(data[off + 12:off + 16])
        dst = ipaddress.ip_address(data[off + 16:off + 20])
        udp = off + ihl
        end = off + total
    elif etype == 0x86DD:
        if len(data) < off + 40 or data[off + 6] != 17:
            return None
        src = ipaddress.ip_address(data[off + 8:off + 24])
        dst = ipaddress.ip_address(data[off + 24:off + 40])
        udp = off + 40
        end = udp + struct.unpack("!H", data[off + 4:off + 6])[0]
    else:
        return None
    if len(data) < end or end < udp + 8 + 12 + 4:
        return None
    if struct.unpack("!H", data[udp + 2:udp + 4])[0] != 4791:
        return None
    return src, dst, data[udp + 8:end - 4]


def analyze(path, uroce, timeout_us, pingpong):
    """(counts, problems) of the capture at `path` (see the module docs)."""
    problems = []
    seen = {}  # (src, dqp, psn) -> first time
    retx = {"uroce": 0, "rxe": 0}
    spurious = 0
    naks = 0
    packets = {"uroce": 0, "rxe": 0}
    msgs = 0
    partial = {}  # (src, dqp) -> bytearray of the SEND being reassembled
    first_msg = None
    sends_seen = set()  # (src, dqp, psn) of SEND packets already appended
    last_uroce = 0  # frame number of uroce's last packet
    rxe_frames = []
    awaiting = []  # rxe requests that await uroce's answer: (t, psn, src, dst, frame)
    answers = []  # uroce's answer times, ms
    # uroce's RC requests: (src, dst, dqp, psn) ->
    #     [time sent, frame, time answered or None, time a NAK asked to resend it or None]
    u_sent = {}
    u_waiting = []  # keys of u_sent not answered yet, oldest first
    rxe_answers = []  # rxe's answer times to uroce's requests, ms
    peer_late = []  # (frame, key) of uroce retransmissions made while rxe was late
    probes = []  # (frame, key) of uroce's timer probes on a QP that had lost something
    armed = set()  # (src, dst, dqp) of QPs where uroce resent after a timeout or a NAK
    after_nak = 0  # uroce retransmissions a NAK asked for (the NAK is the problem reported)
    try:
        for n, (t, data) in enumerate(frames(path), 1):
            r = roce(data)
            if r is None:
                continue
            src, dst, ib = r
            who = "uroce" if src in uroce else "rxe"
            packets[who] += 1
            if who == "uroce":
                last_uroce = n
            else:
                rxe_frames.append(n)
            opcode = ib[0]
            pad = (ib[1] >> 4) & 3
            dqp = int.from_bytes(ib[5:8], "big")
            psn = int.from_bytes(ib[9:12], "big")
            op = opcode & 0x1F if opcode < 0x40 else None
            if op is not None and op in _REQ:
                key = (src, dqp, psn)
                first = seen.get(key)
                if first is None:
                    seen[key] = t
                    if who == "uroce" and opcode < 0x20:
                        ukey = (src, dst, dqp, psn)
                        u_sent[ukey] = [t, n, None, None]
                        u_waiting.append(ukey)
                else:
                    retx[who] += 1
                    gap_us = (t - first) * 1e6
                    if who == "rxe" and gap_us < timeout_us:
                        spurious += 1
                    elif who == "uroce":
                        verdict = judge_uroce_retx(t, (src, dst, dqp, psn), u_sent, u_waiting,
                                                   timeout_us, armed)
                        if verdict == "late":
                            peer_late.append((n, (src, dst, dqp, psn)))
                            armed.add((src, dst, dqp))
                        elif verdict == "nak":
                            after_nak += 1
                            armed.add((src, dst, dqp))
                        elif verdict == "probe":
                            probes.append((n, (src, dst, dqp, psn)))
                        else:
                            problems.append(
                                f"frame {n}: uroce retransmitted {src} qp=0x{dqp:06x} "
                                f"psn=0x{psn:06x} {gap_us / 1000:.1f} ms after the original, "
                                f"{verdict}")
                    else:
                        problems.append(
                            f"frame {n}: {who} retransmitted {src} qp=0x{dqp:06x} "
                            f"psn=0x{psn:06x} {gap_us / 1000:.1f} ms after the original")
            # uroce's answers to rxe's requests that ask for one (AckReq, READ, atomics).
            if who == "rxe" and op is not None and opcode < 0x20 and op in _REQ and \
                    (ib[8] & 0x80 or _REQ[op][0] in ("read", "atomic")) and \
                    not any(a[1] == psn and a[2] == src for a in awaiting):
                awaiting.append((t, psn, src, dst, n))
            if who == "uroce" and opcode < 0x20 and (opcode in _AETH or opcode == 0x0E):
                keep = []
                for a in awaiting:
                    if a[2] == dst and a[3] == src and (psn - a[1]) % (1 << 24) < ANSWER_WINDOW:
                        ms = (t - a[0]) * 1e3
                        answers.append(ms)
                        if ms * 1000 >= timeout_us:
                            problems.append(
                                f"frame {n}: uroce answered rxe's request psn=0x{a[1]:06x} "
                                f"(frame {a[4]}) {ms:.1f} ms after it, beyond the QP timeout")
                    else:
                        keep.append(a)
                awaiting = keep
            # rxe's answers to uroce's requests: a response covers every request up to its
            # PSN (ACKs are cumulative, IBTA Vol 1 §9.7.5.1.2); a NAK or RNR NAK only those
            # before it (its PSN is the request it refuses).
            if who == "rxe" and opcode < 0x20 and (opcode in _AETH or opcode == 0x0E):
                nak = opcode in _AETH and len(ib) >= 16 and (ib[12] >> 5) in (1, 3)
                keep = []
                for k in u_waiting:
                    d = (psn - k[3]) % (1 << 24)
                    if k[0] == dst and k[1] == src and d < ANSWER_WINDOW and not (nak and d == 0):
                        u_sent[k][2] = t
                        rxe_answers.append((t - u_sent[k][0]) * 1e3)
                    else:
                        keep.append(k)
                        # A sequence NAK or RNR NAK asks for its PSN and everything after it
                        # again (IBTA Vol 1 ch. 9, reliable service).
                        if nak and k[0] == dst and k[1] == src and u_sent[k][3] is None and \
                                (k[3] - psn) % (1 << 24) < ANSWER_WINDOW and \
                                ((ib[12] >> 5) == 1 or ib[12] == 0x60):
                            u_sent[k][3] = t
                u_waiting[:] = keep
            if opcode in _AETH and len(ib) >= 16:
                syn = ib[12]
                kind = syn >> 5
                if kind in (1, 3):
                    naks += 1
                    what = "RNR NAK" if kind == 1 else f"NAK code {syn & 0x1F}"
                    problems.append(f"frame {n}: {who} ({src}) sent {what} qp=0x{dqp:06x} "
                                    f"psn=0x{psn:06x}")
            if not pingpong:
                continue
            if op is not None and op in _REQ and _REQ[op][0] == "send":
                _, pos, ext = _REQ[op]
                if (src, dqp, psn) in sends_seen:
                    continue  # a retransmission carries the same bytes again
                sends_seen.add((src, dqp, psn))
                body = ib[12 + ext:len(ib) - pad]
                key = (src, dqp)
                if pos in ("first", "only"):
                    partial[key] = bytearray()
                buf = partial.get(key)
                if buf is None:
                    continue  # the capture started mid-message
                buf += body
                if pos in ("last", "only"):
                    msgs += 1
                    first_msg, p = check_message(n, src, bytes(buf), first_msg)
                    problems += p
                    del partial[key]
            elif opcode in _UD:
                msgs += 1
                body = bytes(ib[12 + _UD[opcode]:len(ib) - pad])
                first_msg, p = check_message(n, src, body, first_msg)
                problems += p
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: {e}") from e

    # A retransmission made while rxe was late is legitimate only if rxe did answer in the
    # end: a request it never answers was lost or refused, which the other checks explain.
    # So is a probe.
    def answered(resends):
        ok = 0
        for n, k in resends:
            if u_sent[k][2] is None:
                problems.append(f"frame {n}: uroce retransmitted {k[0]} qp=0x{k[2]:06x} "
                                f"psn=0x{k[3]:06x}, which rxe never answered")
            else:
                ok += 1
        return ok
    late_ok = answered(peer_late)
    probe_ok = answered(probes)
    counts = {"packets_uroce": packets["uroce"], "packets_rxe": packets["rxe"],
              "retx_uroce": retx["uroce"], "retx_uroce_peer_late": late_ok,
              "retx_uroce_probe": probe_ok,
              "retx_uroce_after_nak": after_nak,
              "retx_rxe": retx["rxe"],
              "rxe_spurious_retx": spurious, "naks": naks,
              "uroce_answers": len(answers),
              "uroce_answer_max_ms": round(max(answers), 2) if answers else 0,
              "rxe_unanswered": len(awaiting),
              "rxe_answers": len(rxe_answers),
              "rxe_answer_max_ms": round(max(rxe_answers), 2) if rxe_answers else 0,
              "uroce_unanswered": len(u_waiting),
              # rxe packets after uroce's last one: when uroce is the side that finishes,
              # these can reach a process that is gone (its port closed)
              "rxe_after_last_uroce": sum(1 for f in rxe_frames if f > last_uroce)}
    if pingpong:
        counts["pingpong_msgs"] = msgs
    # One side may rightly send nothing (the receiver of a UD send_bw); nothing at all is
    # a broken capture.
    if packets["uroce"] + packets["rxe"] == 0:
        problems.append("no RoCEv2 packet in the capture")
    return counts, problems


def judge_uroce_retx(t, key, u_sent, u_waiting, timeout_us, armed):
    """"late" when uroce's retransmission of `key` at time `t` is a local ACK timeout
    against a late rxe, "nak" when an rxe NAK asked for it, "probe" when it is the
    retransmission timer's probe on a QP in `armed` (one that lost something before),
    else why it is an error."""
    entry = u_sent.get(key)
    if entry is None:
        return "and the original was not an RC request (nothing to time out)"
    if entry[2] is not None and entry[2] <= t:
        return (f"after rxe had answered it {(entry[2] - entry[0]) * 1e3:.1f} ms after the "
                f"original")
    if entry[3] is not None and entry[3] <= t:
        return "nak"
    # The timer restarts on every acknowledgement, so when it fires the oldest request
    # still unanswered on that QP has waited at least one QP timeout.
    oldest = min((u_sent[k][0] for k in u_waiting if k[:3] == key[:3]), default=entry[0])
    waited_us = (t - oldest) * 1e6
    if waited_us + TIMER_SLACK_US >= timeout_us:
        return "late"
    if key[:3] in armed and (t - entry[0]) * 1e6 >= PROBE_FLOOR_US:
        return "probe"
    return (f"while the oldest request rxe had not answered on that QP had waited only "
            f"{waited_us / 1000:.1f} ms (QP timeout {timeout_us / 1000:.1f} ms)")


def selftest():
    """The checks must be able to fail: a synthetic capture with one instance of each
    problem must yield exactly those problems."""
    import os
    import tempfile

    u, r = "10.77.0.1", "10.77.0.11"

    def frame(src, dst, opcode, dqp, psn, rest=b""):
        bth = bytes([opcode, 0, 0xFF, 0xFF, 0]) + dqp.to_bytes(3, "big") + b"\x80" \
            + psn.to_bytes(3, "big")
        udp_payload = bth + rest + b"\0\0\0\0"  # ICRC (not checked here)
        ip = b"\x45\x00" + struct.pack("!H", 28 + len(udp_payload)) + b"\0\0\x40\0\x40\x11\0\0" \
            + ipaddress.ip_address(src).packed + ipaddress.ip_address(dst).packed
        udp = struct.pack("!HHHH", 49152, 4791, 8 + len(udp_payload), 0)
        return b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00" + ip + udp + udp_payload

    msg = bytes([0]) + b"\x7b" * 99
    ack = bytes([0x1F, 0, 0, 1])
    frames_ = [
        (0.000, frame(u, r, 0x04, 0x11, 5, msg)),      # uroce SEND
        (0.001, frame(r, u, 0x11, 0x10, 5, ack)),      # rxe ACK
        (0.010, frame(r, u, 0x04, 0x10, 9, msg)),      # rxe SEND (echo)
        (0.020, frame(r, u, 0x04, 0x10, 9, msg)),      # rxe resends after 10 ms: spurious
        (0.030, frame(r, u, 0x04, 0x10, 10, msg)),
        (0.200, frame(r, u, 0x04, 0x10, 10, msg)),     # rxe resends after 170 ms: problem
        (0.210, frame(u, r, 0x04, 0x11, 5, msg)),      # uroce resends: problem
        (0.220, frame(u, r, 0x11, 0x11, 9, bytes([0x60, 0, 0, 1]))),  # NAK: problem
        (0.230, frame(u, r, 0x04, 0x11, 6, msg[:50] + b"\x7c" + msg[51:])),  # corrupt: problem
        # rxe late: it answers 80 ms after uroce's request; uroce resends after one QP
        # timeout (67.1 ms) from the oldest unanswered request, go-back-N: both legitimate
        (0.300, frame(u, r, 0x04, 0x21, 0x500000, msg)),
        (0.310, frame(u, r, 0x04, 0x21, 0x500001, msg)),
        (0.3675, frame(u, r, 0x04, 0x21, 0x500000, msg)),
        (0.3676, frame(u, r, 0x04, 0x21, 0x500001, msg)),
        (0.380, frame(r, u, 0x11, 0x20, 0x500001, ack)),
        # rxe in time on a QP that never lost anything: it answers 30 ms after the
        # request; uroce resent after 20 ms: problem
        (0.400, frame(u, r, 0x04, 0x31, 0x600000, msg)),
        (0.420, frame(u, r, 0x04, 0x31, 0x600000, msg)),
        (0.430, frame(r, u, 0x11, 0x30, 0x600000, ack)),
        # rxe never answers: a resend after a full timeout is still a problem
        (0.500, frame(u, r, 0x04, 0x21, 0x700000, msg)),
        (0.600, frame(u, r, 0x04, 0x21, 0x700000, msg)),
        # an RNR NAK asks for a resend: the NAK is the problem, not the resend
        (0.700, frame(u, r, 0x04, 0x21, 0x800000, msg)),
        (0.701, frame(r, u, 0x11, 0x20, 0x800000, bytes([0x2C, 0, 0, 1]))),
        (0.712, frame(u, r, 0x04, 0x21, 0x800000, msg)),
        (0.713, frame(r, u, 0x11, 0x20, 0x800000, ack)),
        # after a local ACK timeout against a late rxe on QP 0x41 (counted late), a probe
        # 5 ms after its original, which rxe answers 20 ms after it, is counted; one
        # 0.2 ms after (below the timer's floor) is a problem
        (0.800, frame(u, r, 0x04, 0x41, 0x900000, msg)),
        (0.870, frame(u, r, 0x04, 0x41, 0x900000, msg)),
        (0.880, frame(r, u, 0x11, 0x40, 0x900000, ack)),
        (0.900, frame(u, r, 0x04, 0x41, 0x900001, msg)),
        (0.905, frame(u, r, 0x04, 0x41, 0x900001, msg)),
        (0.920, frame(r, u, 0x11, 0x40, 0x900001, ack)),
        (0.930, frame(u, r, 0x04, 0x41, 0x900002, msg)),
        (0.9302, frame(u, r, 0x04, 0x41, 0x900002, msg)),
        (0.940, frame(r, u, 0x11, 0x40, 0x900002, ack)),
    ]
    fd, path = tempfile.mkstemp(suffix=".pcap")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
            for t, fr in frames_:
                f.write(struct.pack("<IIII", int(t), int(round((t % 1) * 1e6)), len(fr), len(fr)))
                f.write(fr)
        counts, problems = analyze(path, {ipaddress.ip_address(u)}, 4.096 * (1 << 14), True)
    finally:
        os.unlink(path)
    want = ["frame 6: rxe retransmitted",
            "frame 7: uroce retransmitted 10.77.0.1 qp=0x000011 psn=0x000005 210.0 ms after "
            "the original, after rxe had answered it 1.0 ms after the original",
            "frame 8: uroce answered rxe's request psn=0x000009 (frame 3) 210.0 ms after it",
            "frame 8: uroce (10.77.0.1) sent NAK",
            "frame 9: 10.77.0.1 sent a ping-pong message that differs from the first one at "
            "offset 50",
            "frame 16: uroce retransmitted 10.77.0.1 qp=0x000031 psn=0x600000 20.0 ms after "
            "the original, while the oldest request rxe had not answered on that QP had "
            "waited only 20.0 ms",
            "frame 21: rxe (10.77.0.11) sent RNR NAK qp=0x000020 psn=0x800000",
            "frame 31: uroce retransmitted 10.77.0.1 qp=0x000041 psn=0x900002 0.2 ms after "
            "the original, while the oldest request rxe had not answered on that QP had "
            "waited only 0.2 ms",
            "frame 19: uroce retransmitted 10.77.0.1 qp=0x000021 psn=0x700000, which rxe "
            "never answered"]
    ok = (len(problems) == len(want)
          and all(p.startswith(w) for p, w in zip(problems, want))
          and counts["rxe_spurious_retx"] == 1 and counts["naks"] == 2
          and counts["retx_rxe"] == 2 and counts["retx_uroce"] == 9
          and counts["retx_uroce_peer_late"] == 3 and counts["retx_uroce_after_nak"] == 1
          and counts["retx_uroce_probe"] == 1
          and counts["rxe_answers"] == 8 and counts["rxe_answer_max_ms"] == 80.0
          and counts["uroce_unanswered"] == 2
          and counts["uroce_answers"] == 1 and counts["rxe_unanswered"] == 1)
    print(f"analyze: selftest {'ok' if ok else 'FAILED'}: {counts} {problems}")
    # A real uroce defect recorded in the lab (testdata/interop/README.md): uroce resent a
    # SEND First 13 µs after sending it while rxe answered in 2 ms. It must stay a problem.
    real = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "testdata",
                        "interop", "rc_pingpong_m512_spurious_retx.pcap")
    counts, problems = analyze(real, {ipaddress.ip_address(u)}, 4.096 * (1 << 14), True)
    real_ok = (counts["retx_uroce"] == 1 and counts["retx_uroce_peer_late"] == 0
               and len(problems) == 1
               and problems[0].startswith("frame 18: uroce retransmitted 10.77.0.1 "
                                          "qp=0x00001d psn=0x16dc61"))
    print(f"analyze: selftest (recorded early retransmission) {'ok' if real_ok else 'FAILED'}: "
          f"{problems}")
    return 0 if ok and real_ok else 1


def stat_last(path):
    """The last counters `uroce stat --watch --json` (and `--exited --json`) saw of the
    (single) uroce process of a cell: `name=value` lines, port counters of its devices
    summed, and whether that snapshot is the one the process left at its exit."""
    last = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                report = json.loads(line)
            except ValueError:
                continue  # a line cut off when the sampler was stopped
            for proc in report.get("processes", []):
                # The exit snapshot is the process's last word: a live sample the watcher
                # took while the process was still tearing down (its stats socket answers
                # until its last atexit handler) may carry a later time, never newer counts.
                key = (bool(proc.get("exited")), proc.get("time_ms", 0))
                if last is None or key >= (bool(last.get("exited")), last.get("time_ms", 0)):
                    last = proc
    if last is None:
        print("stat: no snapshot")
        return 1
    total = {}
    for dev in last.get("devices", []):
        for name, value in dev.get("counters", {}).items():
            total[name] = total.get(name, 0) + value
    print(f"pid={last.get('pid')}")
    print(f"program={last.get('program')}")
    print(f"exited={bool(last.get('exited'))}")
    for name, value in total.items():
        print(f"{name}={value}")
    return 0


def main(argv):
    args = argv[1:]
    if args == ["--selftest"]:
        return selftest()
    if len(args) == 2 and args[0] == "--stat-last":
        return stat_last(args[1])
    if not args or args[0].startswith("-"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    path = args[0]
    uroce = None
    timeout_us = 4.096 * (1 << 14)  # the tools' QP timeout 14 (perftest -u, pingpong)
    pingpong = False
    i = 1
    while i < len(args):
        a = args[i]
        if a == "--uroce" and i + 1 < len(args):
            uroce = {ipaddress.ip_address(x) for x in args[i + 1].split(",")}
            i += 2
        elif a == "--timeout-us" and i + 1 < len(args):
            timeout_us = float(args[i + 1])
            i += 2
        elif a == "--pingpong":
            pingpong = True
            i += 1
        else:
            print(f"analyze: unknown argument {a}", file=sys.stderr)
            return 2
    if not uroce:
        print("analyze: --uroce ADDR is required", file=sys.stderr)
        return 2

    try:
        counts, problems = analyze(path, uroce, timeout_us, pingpong)
    except ValueError as e:
        print(f"analyze: {e}")
        return 2
    print("analyze: " + " ".join(f"{k}={v}" for k, v in counts.items()))
    for p in problems[:20]:
        print(f"analyze: {p}")
    if len(problems) > 20:
        print(f"analyze: ... {len(problems) - 20} more")
    return 1 if problems else 0


def check_message(frame, src, msg, first):
    """(the run's first message, problems) after ping-pong message `msg`."""
    if first is None:
        return msg, check_fill(frame, src, msg)
    if msg == first:
        return first, []
    if len(msg) != len(first):
        return first, [f"frame {frame}: {src} sent a ping-pong message of {len(msg)} bytes, "
                       f"not {len(first)}"]
    off = next(i for i, (a, b) in enumerate(zip(msg, first)) if a != b)
    return first, [f"frame {frame}: {src} sent a ping-pong message that differs from the "
                   f"first one at offset {off} (0x{msg[off]:02x}, not 0x{first[off]:02x})"]


def check_fill(frame, src, msg):
    """The tools' initial buffer: all zero, or 0x7b with 0 allowed at page starts."""
    if all(b == 0 for b in msg):
        return []
    for off, b in enumerate(msg):
        if b == 0x7B or (b == 0 and off % PAGE == 0):
            continue
        return [f"frame {frame}: {src} sent a first ping-pong message of {len(msg)} bytes "
                f"with 0x{b:02x} at offset {off} (not a ping-pong fill)"]
    return []


if __name__ == "__main__":
    sys.exit(main(sys.argv))
