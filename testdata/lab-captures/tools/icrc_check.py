#!/usr/bin/env python3
"""Check the RoCEv2 ICRC of every udp/4791 packet in a pcap, IPv4 and IPv6.

Usage: icrc_check.py FILE.pcap... [-v]

Standard library only. The ICRC (docs/wire.md section 3; Linux rxe_icrc.c) is
CRC-32 (zlib polynomial) over 8 bytes of 0xff (the stand-in for the IB LRH),
the IP header with its variant fields set to all ones (IPv4: TOS, TTL, header
checksum; IPv6: traffic class, flow label, hop limit), the UDP header with its
checksum set to 0xffff, the BTH with byte 4 set to 0xff, and everything after
it up to the ICRC, which is stored little-endian in the last 4 bytes of the
UDP payload. The lab's own tools/icrc_check.py handles IPv4 only; the lab
captures include IPv6 (GID index 0) ones, hence this script.

Exit status 1 if any ICRC is wrong or any packet could not be checked.
"""
import struct
import sys
import zlib


def icrc(ip: bytes, udp: bytes, ib: bytes) -> int:
    ip = bytearray(ip)
    if ip[0] >> 4 == 4:
        ip[1] = 0xFF                 # TOS
        ip[8] = 0xFF                 # TTL
        ip[10:12] = b"\xff\xff"      # header checksum
    else:
        ip[0] |= 0x0F                # traffic class, high nibble
        ip[1:4] = b"\xff\xff\xff"    # traffic class low nibble + flow label
        ip[7] = 0xFF                 # hop limit
    udp = bytearray(udp)
    udp[6:8] = b"\xff\xff"
    ib = bytearray(ib)
    ib[4] = 0xFF                     # BTH FECN/BECN/resv6
    return zlib.crc32(b"\xff" * 8 + bytes(ip) + bytes(udp) + bytes(ib))


def frames(path):
    with open(path, "rb") as f:
        head = f.read(24)
        magic = struct.unpack("<I", head[:4])[0]
        end = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
        if struct.unpack(end + "I", head[20:24])[0] != 1:
            raise SystemExit(f"{path}: not an Ethernet capture")
        while True:
            rec = f.read(16)
            if len(rec) < 16:
                return
            _, _, incl, orig = struct.unpack(end + "IIII", rec)
            yield f.read(incl), incl == orig


def roce_parts(d):
    """(ip, udp, udp_payload) of a RoCEv2 frame, or None."""
    off = 14
    etype = struct.unpack("!H", d[12:14])[0]
    if etype == 0x8100:
        etype = struct.unpack("!H", d[16:18])[0]
        off = 18
    if etype == 0x0800:
        ihl = (d[off] & 0xF) * 4
        end = off + struct.unpack("!H", d[off + 2:off + 4])[0]
        proto, iplen = d[off + 9], ihl
    elif etype == 0x86DD:
        end = off + 40 + struct.unpack("!H", d[off + 4:off + 6])[0]
        proto, iplen = d[off + 6], 40
    else:
        return None
    udp = d[off + iplen:off + iplen + 8]
    if proto != 17 or len(udp) < 8 or struct.unpack("!H", udp[2:4])[0] != 4791:
        return None
    return d[off:off + iplen], udp, d[off + iplen + 8:end]


def main():
    verbose = "-v" in sys.argv[1:]
    failed = False
    for path in [a for a in sys.argv[1:] if a != "-v"]:
        ok = bad = skipped = 0
        for n, (d, full) in enumerate(frames(path), 1):
            parts = roce_parts(d) if full else None
            if parts is None or len(parts[2]) < 16:
                skipped += 1
                print(f"{path}: frame {n}: not a complete RoCEv2 frame")
                continue
            ip, udp, pay = parts
            want = struct.unpack("<I", pay[-4:])[0]
            got = icrc(ip, udp, pay[:-4])
            good = want == got
            ok += good
            bad += not good
            if verbose or not good:
                print(f"{path}: frame {n}: opcode 0x{pay[0]:02x} ICRC 0x{want:08x} computed 0x{got:08x} "
                      f"{'OK' if good else 'BAD'}")
        print(f"{path}: {ok} ICRC correct, {bad} wrong, {skipped} not checked")
        failed |= bool(bad or skipped)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
