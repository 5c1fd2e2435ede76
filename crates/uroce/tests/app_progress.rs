//! A parked engine's work done on the application's thread (`nic::DeviceConfig::app_progress`,
//! `abi::doorbell::Progress`): `post_send` and an empty `poll_cq` run the engine's pass while
//! it sleeps, and every message still arrives intact, in order, once. Its own test binary:
//! the devices here use engines that park after 1 µs, and nothing else may keep them busy.

mod common;

use std::sync::Arc;

use common::*;
use uroce::pair::{connect, End, PairOpts};
use uroce::*;

/// A device whose engine parks as soon as it is idle (every window 1 µs).
fn parking_device(name: &str, addr: &str, app_progress: bool) -> Device {
    let addr = addr.parse().unwrap();
    let mut cfg = nic::DeviceConfig::new(name, addr);
    cfg.spin_us = 1;
    cfg.max_spin_us = 1;
    cfg.busy_spin_us = 1;
    cfg.max_busy_spin_us = 1;
    cfg.dedicated_engine = true;
    cfg.app_progress = app_progress;
    let provider: Arc<dyn Provider> = Arc::new(nic::EmbeddedProvider::new().with_config(cfg));
    Device::new(
        DeviceSpec {
            name: name.into(),
            addr,
        },
        provider,
    )
}

fn app_passes(name: &str) -> u64 {
    let dev = nic::device(name).expect("device runs");
    dev.port_counters().engine.app_passes
}

/// `n` SEND ping-pongs of `len` bytes between `a` and `b` (over UDP), each checked: B
/// echoes what it received, A must get back exactly what it sent.
fn ping_pong(a: &End, b: &End, n: u32, len: usize) {
    let l = len as u32;
    let (mut sa, ra, mut sb, rb) = (buf(a, len), buf(a, len), buf(b, len), buf(b, len));
    for i in 0..n {
        let id = u64::from(i);
        let data = pattern(i as u8, len);
        b.qp.post_recv(&[RecvWr::new(id, &[rb.sge(0, l)])]).unwrap();
        a.qp.post_recv(&[RecvWr::new(id, &[ra.sge(0, l)])]).unwrap();
        sa.copy_from_slice(&data);
        a.qp.post_send(&[SendWr::send(id, &[sa.sge(0, l)]).signaled()])
            .unwrap();
        let w = wait1(&b.cq);
        assert_eq!(
            (w.status, w.opcode, w.wr_id, w.byte_len),
            (WcStatus::Success, WcOpcode::Recv, id, l)
        );
        sb.copy_from_slice(&rb);
        b.qp.post_send(&[SendWr::send(id, &[sb.sge(0, l)]).signaled()])
            .unwrap();
        let w = wait1(&b.cq);
        assert_eq!(
            (w.status, w.opcode, w.wr_id),
            (WcStatus::Success, WcOpcode::Send, id)
        );
        let mut got: Vec<_> = wait(&a.cq, 2)
            .iter()
            .map(|w| (w.status, w.opcode, w.wr_id))
            .collect();
        got.sort_by_key(|&(_, op, _)| op != WcOpcode::Send);
        assert_eq!(
            got,
            [
                (WcStatus::Success, WcOpcode::Send, id),
                (WcStatus::Success, WcOpcode::Recv, id)
            ]
        );
        assert_eq!(&ra[..], &data[..], "round trip {i}");
    }
}

#[test]
fn the_application_thread_does_a_parked_engine_s_work_and_nothing_is_lost() {
    // On: the polling/posting thread serves the parked engines.
    let (a, b) = (
        parking_device("apon0", "127.77.6.1", true),
        parking_device("apon1", "127.77.6.2", true),
    );
    let (ea, eb) = connect(&a, &b, &PairOpts::default()).expect("connect");
    ping_pong(&ea, &eb, 300, 3000);
    let on = app_passes("apon0") + app_passes("apon1");
    assert!(on > 0, "no engine pass ran on the application thread");

    // Off: the same traffic works through wake-ups alone, and no pass runs on this thread.
    let (c, d) = (
        parking_device("apoff0", "127.77.6.3", false),
        parking_device("apoff1", "127.77.6.4", false),
    );
    let (ec, ed) = connect(&c, &d, &PairOpts::default()).expect("connect");
    ping_pong(&ec, &ed, 300, 3000);
    assert_eq!(app_passes("apoff0") + app_passes("apoff1"), 0);
}

#[test]
fn threads_racing_to_do_the_engine_s_work_lose_nothing() {
    // Four threads, each with its own connected pair on the same two parked-engine devices,
    // post and poll at once: they contend for the engines' work (one at a time gets it,
    // the others fall back to waking the engine) and every message must still arrive.
    let (a, b) = (
        parking_device("apmt0", "127.77.6.5", true),
        parking_device("apmt1", "127.77.6.6", true),
    );
    let pairs: Vec<(End, End)> = (0..4)
        .map(|_| connect(&a, &b, &PairOpts::default()).expect("connect"))
        .collect();
    std::thread::scope(|s| {
        for (ea, eb) in &pairs {
            s.spawn(move || ping_pong(ea, eb, 150, 1500));
        }
    });
    assert!(app_passes("apmt0") + app_passes("apmt1") > 0);
}
