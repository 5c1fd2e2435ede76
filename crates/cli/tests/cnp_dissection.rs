//! The CNP a uroce QP sends (docs/wire.md §11.2) as `uroce decode` and Wireshark see it.
//!
//! Two transport QPs with ECN congestion control: the requester's RDMA WRITE reaches the
//! responder CE-marked, the responder answers with a CNP. Both packets, framed as on the wire
//! (Ethernet, IPv4 with ECT(0) or CE, UDP 4791, ICRC), go into a pcap; `uroce decode --json`
//! must report the CNP (opcode 0x81, the requester's QPN, PSN 0) with `icrc` ok, and tshark —
//! when installed — must dissect it as InfiniBand with the same opcode and destination QP and
//! with no malformed-packet or expert warning. (Wireshark 4.0 names 0x81 "Unknown (129)"; it
//! knows only the native-IB CNP 0x80.) Without tshark that half prints why and passes.

use std::io::ErrorKind;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use capture::pcap::PcapWriter;
use serde_json::Value;
use sim::transport::wire::{self, IpRepr, Opcode, Psn, Qpn, RocePacketRepr, UdpRepr};
use sim::transport::{
    bring_up, AccessFlags, DcqcnParams, LocalData, Mtu, Qp, QpAttr, QpConfig, RxMeta, SendWr,
    Service, Sge, SgeList, Time, WrOpcode,
};
use sim::{MrAccess, SimMemory};

const A: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 2);

/// An Ethernet frame around the L3 bytes of `pkt` from `src` to `dst` with TOS `tos`.
fn frame(src: Ipv4Addr, dst: Ipv4Addr, tos: u8, sport: u16, pkt: &RocePacketRepr<'_>) -> Vec<u8> {
    let ip = IpRepr::v4_socket(src, dst, tos, 64);
    let udp = UdpRepr::roce(sport);
    let mut l3 = vec![0u8; wire::frame::l3_len(&ip, pkt)];
    let n = wire::build_l3(&ip, &udp, pkt, &mut l3).expect("build frame");
    let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00];
    f.extend_from_slice(&l3[..n]);
    f
}

/// The marked WRITE (A → B) and B's CNP (B → A) as Ethernet frames.
fn packets() -> (Vec<u8>, Vec<u8>) {
    let mut mem = [SimMemory::new(), SimMemory::new()];
    mem[0].register(0x1000, 4096, MrAccess::LOCAL_WRITE);
    mem[1].register(0x8000, 4096, MrAccess::LOCAL_WRITE | MrAccess::REMOTE_WRITE);
    let (qa, qb) = (Qpn::new(0x11), Qpn::new(0x12));
    let mut qps = [qa, qb].map(|n| {
        let mut c = QpConfig::new(n, Service::Rc);
        c.cc = Some(DcqcnParams::default());
        Qp::new(c)
    });
    let attr = QpAttr {
        qp_access_flags: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        timeout: 14,
        retry_cnt: 7,
        ..QpAttr::default()
    };
    let [a, b] = &mut qps;
    bring_up(a, qb, Psn::new(5), Psn::new(9), Mtu::Mtu1024, &attr).unwrap();
    bring_up(b, qa, Psn::new(9), Psn::new(5), Mtu::Mtu1024, &attr).unwrap();
    let mut w = SendWr::new(1, WrOpcode::RdmaWrite);
    w.local = LocalData::Sges(SgeList::single(Sge {
        addr: 0x1000,
        length: 64,
        lkey: mem[0].region(0).lkey,
    }));
    w.remote_addr = 0x8000;
    w.rkey = mem[1].region(0).rkey;
    a.post_send(w).unwrap();
    let now = Time::from_micros(10);
    let mut buf = vec![0u8; 4200];
    let t = a
        .poll_transmit(now, &mut mem[0].for_qp(qa), &mut buf)
        .expect("the WRITE");
    let write = RocePacketRepr::parse(&buf[..t.len]).unwrap();
    let write_frame = frame(A, B, 0x03, 0xC011, &write);
    let meta = RxMeta {
        ce: true,
        ..RxMeta::default()
    };
    b.handle_packet(now, &write, &meta, &mut mem[1].for_qp(qb), None);
    let mut out = vec![0u8; 4200];
    let t = b
        .poll_transmit(now, &mut mem[1].for_qp(qb), &mut out)
        .expect("the CNP");
    let cnp = RocePacketRepr::parse(&out[..t.len]).unwrap();
    assert_eq!(cnp.bth.opcode, Opcode::CNP);
    assert_eq!(b.counters().np_cnp_sent, 1);
    (write_frame, frame(B, A, 0x02, 0xC012, &cnp))
}

#[test]
fn uroce_decode_and_tshark_dissect_the_cnp() {
    let (write, cnp) = packets();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join("cnp_dissection.pcap");
    let mut w = PcapWriter::ethernet(std::fs::File::create(&path).unwrap()).unwrap();
    w.write_frame(Duration::from_micros(1), &write).unwrap();
    w.write_frame(Duration::from_micros(2), &cnp).unwrap();
    w.flush().unwrap();
    drop(w);

    let out = Command::new(env!("CARGO_BIN_EXE_uroce"))
        .args(["decode", "--json"])
        .arg(&path)
        .output()
        .expect("run uroce decode");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    for l in &lines {
        assert_eq!(l["icrc"], "ok", "{l}");
    }
    let c = &lines[1];
    assert_eq!(c["opcode"], 0x81);
    assert_eq!(c["opcode_name"], "CNP", "{c}");
    assert_eq!(c["dest_qp"], 0x11);
    assert_eq!(c["psn"], 0);
    assert_eq!(
        c["payload_len"], 0,
        "the 16 reserved bytes are a header, not payload"
    );

    let t = match Command::new("tshark")
        .arg("-r")
        .arg(&path)
        .args(["-T", "fields", "-E", "separator=|"])
        .args(["-e", "frame.number", "-e", "frame.protocols"])
        .args(["-e", "infiniband.bth.opcode", "-e", "infiniband.bth.destqp"])
        .args([
            "-e",
            "infiniband.bth.psn",
            "-e",
            "_ws.malformed",
            "-e",
            "_ws.expert",
        ])
        .output()
    {
        Ok(t) => t,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            eprintln!("tshark not installed: the Wireshark half of this test is skipped");
            return;
        }
        Err(e) => panic!("tshark: {e}"),
    };
    assert!(t.status.success(), "{}", String::from_utf8_lossy(&t.stderr));
    let text = String::from_utf8(t.stdout).unwrap();
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split('|').collect()).collect();
    assert_eq!(rows.len(), 2, "{text}");
    let cnp_row = &rows[1];
    assert!(cnp_row[1].ends_with("udp:infiniband"), "{text}");
    assert_eq!(cnp_row[2], "129", "{text}");
    let destqp = cnp_row[3].trim_start_matches("0x");
    assert_eq!(u32::from_str_radix(destqp, 16).unwrap(), 0x11, "{text}");
    assert_eq!(cnp_row[4], "0", "{text}");
    for r in &rows {
        assert_eq!(r[5], "", "no malformed packet: {text}");
        assert_eq!(r[6], "", "no expert warning: {text}");
    }
}
