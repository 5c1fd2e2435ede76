#!/usr/bin/env python3
"""Wire-level checks of one interop capture (tests/interop/run.sh).

Usage: analyze.py FILE.pcap --uroce ADDR [--timeout-us US] [--pingpong]

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
_RESP = {0x0D: 0, 0x0E: 4, 0x0F: 4, 0x10: 0, 0x11: 4, 0x12: 12}
_UD = {0x64: 8, 0x65: 12}

PAGE = 4096


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
    """(src address, BTH..pad bytes without ICRC) of a RoCEv2 frame, else None."""
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
        udp = off + ihl
        end = off + total
    elif etype == 0x86DD:
        if len(data) < off + 40 or data[off + 6] != 17:
            return None
        src = ipaddress.ip_address(data[off + 8:off + 24])
        udp = off + 40
        end = udp + struct.unpack("!H", data[off + 4:off + 6])[0]
    else:
        return None
    if len(data) < end or end < udp + 8 + 12 + 4:
        return None
    if struct.unpack("!H", data[udp + 2:udp + 4])[0] != 4791:
        return None
    return src, data[udp + 8:end - 4]


def main(argv):
    args = argv[1:]
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
    try:
        for n, (t, data) in enumerate(frames(path), 1):
            r = roce(data)
            if r is None:
                continue
            src, ib = r
            who = "uroce" if src in uroce else "rxe"
            packets[who] += 1
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
                else:
                    retx[who] += 1
                    gap_us = (t - first) * 1e6
                    if who == "rxe" and gap_us < timeout_us:
                        spurious += 1
                    else:
                        problems.append(
                            f"frame {n}: {who} retransmitted {src} qp=0x{dqp:06x} "
                            f"psn=0x{psn:06x} {gap_us / 1000:.1f} ms after the original")
            if op is not None and op in _RESP and op in (0x0D, 0x10, 0x11) and len(ib) >= 16:
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
        print(f"analyze: {path}: {e}")
        return 2

    print(f"analyze: packets_uroce={packets['uroce']} packets_rxe={packets['rxe']} "
          f"retx_uroce={retx['uroce']} retx_rxe={retx['rxe']} rxe_spurious_retx={spurious} "
          f"naks={naks}" + (f" pingpong_msgs={msgs}" if pingpong else ""))
    if packets["uroce"] == 0:
        problems.append("no packet from uroce in the capture")
    if packets["rxe"] == 0:
        problems.append("no packet from rxe in the capture")
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
