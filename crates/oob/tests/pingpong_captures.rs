//! Replays the rdma-core pingpong captures (`pp_rc`, `pp_ud`, `pp_srq`) and the console
//! checks of the pingpong failures.

mod support;

use oob::pingpong::{
    self, client_exchange, local_line, remote_line, result_lines, server_exchange, PingpongError,
    PpDest, Variant, MSG_LEN, SRQ_RECORDS,
};
use support::{console, ScriptedPeer, TcpCapture};

fn decode_records(stream: &[u8]) -> Vec<PpDest> {
    assert_eq!(stream.len() % MSG_LEN, 0);
    stream
        .chunks_exact(MSG_LEN)
        .map(|c| {
            let d = PpDest::decode(c).expect("record decodes");
            assert_eq!(&d.encode().expect("encodes")[..], c, "re-encodes exactly");
            d
        })
        .collect()
}

fn lines(text: &str) -> Vec<&str> {
    text.lines().collect()
}

#[test]
fn rc_and_ud_captures() {
    for (pcap, variant) in [("pp_rc.pcap", Variant::Rc), ("pp_ud.pcap", Variant::Ud)] {
        let cap = TcpCapture::load(pcap);
        let cw = cap.writes(true);
        let sw = cap.writes(false);
        assert_eq!(cw.len(), 2, "{pcap}: address, then done");
        assert_eq!(cw[1].as_slice(), pingpong::DONE);
        assert_eq!(sw.len(), 1);
        let client = decode_records(&cw[0])[0];
        let server = decode_records(&sw[0])[0];

        // (a) as printed by the tools.
        let ctxt = console(&format!("{pcap}.client.txt"));
        let stxt = console(&format!("{pcap}.server.txt"));
        assert_eq!(lines(&ctxt)[0], local_line(variant, &client), "{pcap}");
        assert_eq!(lines(&ctxt)[1], remote_line(&server), "{pcap}");
        assert_eq!(lines(&stxt)[0], local_line(variant, &server), "{pcap}");
        assert_eq!(lines(&stxt)[1], remote_line(&client), "{pcap}");
        assert!(client.needs_grh() && server.needs_grh());

        // (c) both sides against the captured other side.
        for chunk in [1, 5, 100] {
            let mut peer = ScriptedPeer::new(&cap, true, chunk);
            let remote = client_exchange(&mut peer, variant, &[client]).expect("client");
            assert_eq!(remote, vec![server]);
            assert_eq!(peer.writes, cw, "{pcap}: client writes");

            let mut peer = ScriptedPeer::new(&cap, false, chunk);
            let mut connected = None;
            let remote = server_exchange(&mut peer, variant, &[server], |r| {
                connected = Some(r.to_vec());
                Ok(())
            })
            .expect("server");
            assert_eq!(remote, vec![client]);
            assert_eq!(connected, Some(vec![client]), "connect before replying");
            assert_eq!(peer.writes, sw, "{pcap}: server writes");
            assert_eq!(peer.unread(), 0, "the server reads done");
        }
    }
}

#[test]
fn srq_capture_256_records_each_way() {
    let pcap = "pp_srq.pcap";
    let cap = TcpCapture::load(pcap);
    let cstream = cap.stream(true);
    let sstream = cap.stream(false);
    assert_eq!(cstream.len(), SRQ_RECORDS * MSG_LEN + 5);
    assert_eq!(&cstream[SRQ_RECORDS * MSG_LEN..], pingpong::DONE);
    assert_eq!(sstream.len(), SRQ_RECORDS * MSG_LEN);
    let client = decode_records(&cstream[..SRQ_RECORDS * MSG_LEN]);
    let server = decode_records(&sstream);
    let q = 16;
    for recs in [&client, &server] {
        assert!(recs[..q].iter().all(|d| d.qpn != 0));
        assert!(
            recs[q..].iter().all(|d| *d == PpDest::default()),
            "zero records"
        );
    }

    let ctxt = console(&format!("{pcap}.client.txt"));
    let stxt = console(&format!("{pcap}.server.txt"));
    let (cl, sl) = (lines(&ctxt), lines(&stxt));
    for i in 0..q {
        assert_eq!(cl[i], local_line(Variant::Srq, &client[i]));
        assert_eq!(cl[q + i], remote_line(&server[i]));
        assert_eq!(sl[i], local_line(Variant::Srq, &server[i]));
        assert_eq!(sl[q + i], remote_line(&client[i]));
    }

    for chunk in [13, 52, 1448] {
        let mut peer = ScriptedPeer::new(&cap, true, chunk);
        let remote = client_exchange(&mut peer, Variant::Srq, &client[..q]).expect("client");
        assert_eq!(remote, server[..q]);
        assert_eq!(peer.written_bytes(), cstream);
        // rdma-core writes one record per write() (Nagle merged them on the wire).
        assert_eq!(peer.writes.len(), SRQ_RECORDS + 1);
        assert!(peer.writes[..SRQ_RECORDS]
            .iter()
            .all(|w| w.len() == MSG_LEN));

        let mut peer = ScriptedPeer::new(&cap, false, chunk);
        let remote =
            server_exchange(&mut peer, Variant::Srq, &server[..q], |_| Ok(())).expect("server");
        assert_eq!(remote, client[..q]);
        assert_eq!(peer.written_bytes(), sstream);
        assert_eq!(peer.writes.len(), SRQ_RECORDS);
    }
}

#[test]
fn result_lines_match_the_captures() {
    // (file, size, iters, elapsed µs) — the elapsed time is usec/iter × iters.
    for (file, size, iters, usec) in [
        ("pp_rc.pcap.client.txt", 4096, 5, 25948),
        ("pp_rc.pcap.server.txt", 4096, 5, 26164),
        ("pp_ud.pcap.client.txt", 1024, 5, 41055),
        ("pp_ud.pcap.server.txt", 1024, 5, 43563),
        ("pp_srq.pcap.client.txt", 4096, 5, 256),
        ("pp_srq.pcap.server.txt", 4096, 5, 15202),
    ] {
        let txt = console(file);
        let l = lines(&txt);
        let [bytes, iters_line] = result_lines(size, iters, usec);
        assert_eq!(l[l.len() - 2], bytes, "{file}");
        assert_eq!(l[l.len() - 1], iters_line, "{file}");
    }
}

#[test]
fn pingpong_failures_say_what_the_tools_said() {
    let client_msg = *b"0000:000021:863d34:00000000000000000000ffff0a4d000c\0";
    let local = [PpDest {
        qpn: 0x3a,
        psn: 0xb4a524,
        gid: oob::gid::gid_from_ipv4([10, 77, 0, 11].into()),
        lid: 0,
    }];

    // console_neg_rc_pingpong_short_msg: 51 bytes, then the client closed.
    let mut peer = ScriptedPeer::from_bytes(&client_msg[..51], 7);
    let err = server_exchange(&mut peer, Variant::Rc, &local, |_| Ok(())).expect_err("short");
    assert!(matches!(
        err,
        PingpongError::ServerRead { got: 51, want: 52 }
    ));
    let txt = console("console_neg_rc_pingpong_short_msg.server.txt");
    assert_eq!(lines(&txt)[1], err.to_string());
    let that_server = PpDest {
        qpn: 0x39,
        psn: 0x3254af,
        ..local[0]
    };
    assert_eq!(lines(&txt)[2], local_line(Variant::Rc, &that_server));
    assert!(peer.writes.is_empty(), "no reply to a short address");

    // console_neg_rc_pingpong_no_done: 52 bytes, read the reply, closed without done.
    let mut peer = ScriptedPeer::from_bytes(&client_msg, 52);
    let err = server_exchange(&mut peer, Variant::Rc, &local, |_| Ok(())).expect_err("no done");
    assert!(matches!(err, PingpongError::ServerSendRecv));
    let txt = console("console_neg_rc_pingpong_no_done.server.txt");
    assert_eq!(lines(&txt)[0], err.to_string());
    assert_eq!(lines(&txt)[1], local_line(Variant::Rc, &local[0]));
    assert_eq!(peer.writes.len(), 1, "it did reply");

    // console_neg_rc_pingpong_no_gid: without -g the GIDs are zero, so no GRH: the
    // server's RTR fails; the client then sees the connection close.
    let zero_gid = PpDest {
        qpn: 0x3b,
        psn: 0xb3a2ba,
        ..PpDest::default()
    };
    let encoded = zero_gid.encode().expect("encodes");
    let mut peer = ScriptedPeer::from_bytes(&encoded, 52);
    let err = server_exchange(&mut peer, Variant::Rc, &[PpDest::default()], |remote| {
        if remote[0].needs_grh() {
            Ok(())
        } else {
            Err("Failed to modify QP to RTR".into())
        }
    })
    .expect_err("RTR fails without a GRH on RoCE");
    assert!(matches!(err, PingpongError::ConnectQp(_)));
    let stxt = console("console_neg_rc_pingpong_no_gid.server.txt");
    assert_eq!(lines(&stxt)[1], err.to_string());
    let mut peer = ScriptedPeer::from_bytes(&[], 52);
    let err = client_exchange(&mut peer, Variant::Rc, &[zero_gid]).expect_err("closed");
    let ctxt = console("console_neg_rc_pingpong_no_gid.client.txt");
    assert_eq!(lines(&ctxt)[1], err.to_string());
    assert_eq!(lines(&ctxt)[2], local_line(Variant::Rc, &zero_gid));
    assert_eq!(peer.writes, vec![encoded.to_vec()]);
}

#[test]
fn srq_short_record_and_bad_local() {
    let mut peer = ScriptedPeer::from_bytes(&[b'0'; 60], 60);
    let err = client_exchange(&mut peer, Variant::Srq, &[PpDest::default()]).expect_err("short");
    assert_eq!(err.to_string(), "8/52: Couldn't read remote address [1]");
    let too_many = vec![PpDest::default(); 256];
    let mut peer = ScriptedPeer::from_bytes(&[], 1);
    assert!(matches!(
        client_exchange(&mut peer, Variant::Srq, &too_many),
        Err(PingpongError::BadLocal(_))
    ));
    assert!(matches!(
        client_exchange(&mut peer, Variant::Rc, &[]),
        Err(PingpongError::BadLocal(_))
    ));
    assert!(peer.writes.is_empty());
}
