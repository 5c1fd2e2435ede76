//! `uroced`'s host-wide state seen through its socket (docs/daemon.md): clients are kept
//! apart (one cannot take or release another's service ID), a malformed client is cut off
//! without disturbing the others, a closed client's share is reclaimed, and the routing of
//! received datagrams never panics on arbitrary bytes.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use abi::daemon::{self as proto, Msg};
use nic::daemon::{classify, DaemonConfig, RawClient, Route, WINDOW_BITS};

struct Daemon {
    dir: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<std::io::Result<()>>>,
}

impl Daemon {
    fn start(tag: &str, addr: &str) -> Daemon {
        let dir = std::env::temp_dir().join(format!("uroce-daemon-{tag}-{}", std::process::id()));
        let cfg = DaemonConfig {
            devices: vec![nic::DeviceConfig::new("uroce0", addr.parse().unwrap())],
            dir: dir.clone(),
            mode: 0o600,
            group: None,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || nic::daemon::run_until(cfg, &s));
        for _ in 0..500 {
            if dir.join("uverbs0.dev").exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(dir.join("uverbs0").exists(), "the daemon did not come up");
        Daemon {
            dir,
            stop,
            thread: Some(thread),
        }
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("uverbs0")
    }

    fn stats(&self) -> HashMap<String, String> {
        match proto::request(&self.socket(), &Msg::Stats).expect("STATS") {
            Msg::StatsText(t) => proto::parse_stats(&t)
                .into_iter()
                .filter(|(k, _)| k != "client")
                .collect(),
            m => panic!("unexpected answer {m:?}"),
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join()
                .expect("daemon thread")
                .expect("daemon ran without error");
        }
        // The daemon removes its nodes when it stops.
        assert!(!self.dir.join("uverbs0").exists());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..1000 {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("timed out waiting for {what}");
}

const SID: u64 = 0x0106_4e20; // RDMA_PS_TCP port 20000

#[test]
fn clients_cannot_take_or_release_each_others_service_ids() {
    let d = Daemon::start("sid", "127.0.0.81");
    let a = RawClient::attach(&d.socket()).expect("attach a");
    let b = RawClient::attach(&d.socket()).expect("attach b");
    let (ga, gb) = (a.grant(), b.grant());
    assert_ne!(ga.slot, gb.slot);
    assert_eq!(ga.qpn_base, ga.slot << WINDOW_BITS);
    assert!(
        ga.qpn_base >= 1 << WINDOW_BITS,
        "window 0 (QP 0 and 1) is the daemon's"
    );
    assert_ne!(ga.id_prefix, gb.id_prefix);

    a.listen(SID).expect("a listens");
    a.listen(SID)
        .expect("listening again on one's own service ID is fine");
    let e = b.listen(SID).expect_err("b takes a's service ID");
    assert_eq!(e.raw_os_error(), Some(libc::EADDRINUSE), "{e}");
    // b cannot release it for a either.
    b.try_unlisten(SID);
    let e = b.listen(SID).expect_err("a's service ID released by b");
    assert_eq!(e.raw_os_error(), Some(libc::EADDRINUSE), "{e}");
    assert_eq!(d.stats()["clients"], "2");
    assert_eq!(d.stats()["listens"], "1");

    // a goes away: its share is reclaimed and b may listen.
    drop(a);
    wait_for("a's reclaim", || d.stats()["clients_reclaimed"] == "1");
    assert_eq!(d.stats()["clients"], "1");
    assert_eq!(d.stats()["listens_reclaimed"], "1");
    b.listen(SID).expect("b listens once a is gone");
}

fn raw_request(s: &mut UnixStream, bytes: &[u8]) -> std::io::Result<Msg> {
    s.write_all(bytes)?;
    proto::read_msg(s)
}

#[test]
fn malformed_requests_get_errors_and_a_flood_is_cut_off() {
    let d = Daemon::start("bad", "127.0.0.82");
    let a = RawClient::attach(&d.socket()).expect("attach");

    let mut s = UnixStream::connect(d.socket()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // An unknown op and a body of the wrong size: an error reply, the connection stays.
    let m = raw_request(&mut s, &[77, 0, 0, 0, 0, 0, 0, 0]).expect("reply");
    assert!(
        matches!(m, Msg::Error(ref e) if e.errno == libc::EINVAL),
        "{m:?}"
    );
    let m = raw_request(&mut s, &[3, 0, 0, 0, 2, 0, 0, 0, 1, 2]).expect("reply");
    assert!(matches!(m, Msg::Error(_)), "{m:?}");
    // LISTEN without ATTACH.
    let listen = proto::encode(&Msg::Listen(proto::ListenReq { service_id: SID }));
    let m = raw_request(&mut s, &listen).expect("reply");
    assert!(matches!(m, Msg::Error(_)), "{m:?}");
    // ATTACH without its data socket.
    let attach = proto::encode(&Msg::Attach(proto::AttachReq {
        pid: 1,
        reserved: 0,
    }));
    let m = raw_request(&mut s, &attach).expect("reply");
    assert!(
        matches!(m, Msg::Error(ref e) if e.errno == libc::EINVAL),
        "{m:?}"
    );
    assert!(matches!(
        raw_request(&mut s, &proto::encode(&Msg::Query)),
        Ok(Msg::Info(_))
    ));

    // A header announcing more than any message holds: the daemon hangs up.
    s.write_all(&[5, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f]).unwrap();
    let mut b = [0u8; 8];
    assert_eq!(
        s.read(&mut b).unwrap_or(0),
        0,
        "the daemon kept a flooding client"
    );

    // The attached client never noticed.
    a.listen(SID)
        .expect("listen after the other client's garbage");
    assert_eq!(d.stats()["clients"], "1");
}

#[test]
fn datagrams_route_by_qp_window_and_arbitrary_bytes_never_panic() {
    let listens: HashMap<u64, u64> = [(SID, 7)].into_iter().collect();
    let slots: HashMap<u32, u64> = [(1, 7), (2, 8)].into_iter().collect();
    // A BTH: opcode RC SEND ONLY (4), dest QP in bytes 5..8.
    let mut pkt = vec![0u8; 12 + 4];
    pkt[0] = 4;
    pkt[5..8].copy_from_slice(&((2u32 << WINDOW_BITS) + 5).to_be_bytes()[1..]);
    assert_eq!(classify(&pkt, &listens, &slots), Route::Client(8));
    pkt[5..8].copy_from_slice(&((9u32 << WINDOW_BITS) + 5).to_be_bytes()[1..]);
    assert_eq!(classify(&pkt, &listens, &slots), Route::Unowned);
    pkt[5..8].copy_from_slice(&[0, 0, 1]);
    assert_eq!(classify(&pkt, &listens, &slots), Route::DaemonCm);
    assert_eq!(classify(&[1, 2, 3], &listens, &slots), Route::Bad);
    // Arbitrary bytes (a fixed-seed generator; the fuzz target covers more).
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for len in 0..2000usize {
        let bytes: Vec<u8> = (0..len % 400)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let _ = classify(&bytes, &listens, &slots);
        let _ = abi::fuzzing::decode_daemon_message(&bytes);
    }
}
