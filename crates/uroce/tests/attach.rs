//! A tool attached to this process's attach socket (docs/operations.md §4) that stops
//! reading can never stall the device: the device keeps completing work, the records its
//! queue cannot hold are dropped and counted (`capture_lost`, and a dropped-count frame to
//! the tool, or the tool is detached once a write to it has been blocked for 5 s), and once
//! the tool is gone nothing more is recorded or lost.

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use common::*;

fn lost() -> u64 {
    nic::attach::capture_lost("uroce0")
}

fn writes(a: &uroce::pair::End, b: &uroce::pair::End, n: u64) {
    let src = buf(a, 4096);
    let dst = buf(b, 4096);
    let rm = dst.remote();
    write_stream(a, &[src.sge(0, 4096)], rm.rkey, |_| rm.at(0), n, 32, 8);
}

#[test]
fn a_tool_that_stops_reading_never_stalls_the_device() {
    let dir = std::env::temp_dir().join(format!("uroce-attach-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    // Before the first device starts the publisher.
    std::env::set_var("UROCE_STATS_DIR", &dir);
    let (a, b) = rc(Topo::SameDevice);
    let path = dir.join(format!("{}.attach", std::process::id()));
    let start = Instant::now();
    while !path.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no attach socket"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // A malformed request gets an error line, not an attachment.
    let mut bad = UnixStream::connect(&path).unwrap();
    bad.write_all(b"capture snaplen=0\n").unwrap();
    let answer = String::from_utf8(abi::attach::read_line(&mut bad).unwrap()).unwrap();
    assert!(answer.starts_with("error "), "{answer}");

    let mut tool = UnixStream::connect(&path).unwrap();
    tool.write_all(b"capture snaplen=262144\n").unwrap();
    let answer = String::from_utf8(abi::attach::read_line(&mut tool).unwrap()).unwrap();
    assert!(
        answer.starts_with(&format!("ok pid={} devices=uroce0", std::process::id())),
        "{answer}"
    );
    // The tool reads nothing while 20,000 4 KiB WRITEs (100,000 packets with their ACKs)
    // run: far more than its queue (8192 records) and the socket's buffer hold.
    assert_eq!(lost(), 0);
    writes(&a, &b, 20_000);
    let lost_attached = lost();
    assert!(lost_attached > 0, "nothing was dropped");

    // Now read: the attachment reports its drops, or — if a write to the tool was blocked
    // for 5 s — it ended the attachment (end of stream).
    tool.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut got = Vec::new();
    let mut chunk = vec![0u8; 1 << 16];
    let mut reported = None;
    'read: while reported.is_none() {
        let n = tool.read(&mut chunk).expect("reading the attachment");
        if n == 0 {
            // Detached: a write to the tool was blocked for 5 s.
            break;
        }
        got.extend_from_slice(&chunk[..n]);
        let mut at = 0;
        while let Some((kind, body, used)) = abi::attach::split_frame(&got[at..]).unwrap() {
            if kind == abi::attach::FRAME_DROPPED {
                reported = Some(u64::from_le_bytes(body.try_into().unwrap()));
                break 'read;
            }
            at += used;
        }
        got.drain(..at);
    }
    if let Some(r) = reported {
        assert!(r > 0, "a dropped-count frame of 0");
    }
    // The tool goes away: within the attachment's poll interval the device stops recording.
    drop(tool);
    std::thread::sleep(nic::attach::POLL * 3 + Duration::from_millis(200));
    let before = lost();
    writes(&a, &b, 20_000);
    assert_eq!(lost(), before, "records still queued after the tool left");
    let _ = std::fs::remove_dir_all(&dir);
}
