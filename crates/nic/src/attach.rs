//! The process side of the attach protocol (`abi::attach`, docs/operations.md §4): a
//! `uroce capture` or `uroce trace` running beside this process connects to its attach
//! socket (published by the `uroce` crate beside the `uroce stat` socket) and gets this
//! process's packets or commands as they happen, until it disconnects.
//!
//! Each attachment runs on a thread of its own ([`serve`]): the devices hand records or
//! lines to a bounded queue (`tap::Sink`, `trace::Sub`) without ever waiting, this thread
//! writes them to the tool, and what a full queue lost is counted and sent as a
//! `FRAME_DROPPED` frame. A tool that stops reading for [`WRITE_TIMEOUT`] is detached; a
//! tool that disconnects is noticed within [`POLL`] (the only periodic wake-up, and only
//! while a tool is attached). Without an attached tool the devices pay what they pay with
//! capture and trace off: one relaxed load per packet and per command.

use std::io;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use abi::attach::{self, Answer, Kind, Request};

use crate::sys;

/// How long a tool may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a write to a tool may block before the tool is detached.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// How often an idle attachment checks that its tool is still there.
pub const POLL: Duration = Duration::from_millis(200);

/// Serve one tool connected to this process's attach socket, until it disconnects (or the
/// protocol fails). Errors are the connection's end, never the process's problem.
pub fn serve(mut stream: UnixStream) {
    let _ = stream.set_read_timeout(Some(REQUEST_TIMEOUT));
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    let req = match attach::read_line(&mut stream).map(|l| Request::parse(&l)) {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            let _ = answer(&stream, &Answer::Refused(e.to_string()));
            return;
        }
        Err(_) => return,
    };
    let devs: Vec<_> = crate::registry::attachable()
        .into_iter()
        .filter(|d| req.device.as_deref().is_none_or(|n| n == d.cfg.name))
        .collect();
    if devs.is_empty() {
        let why = match &req.device {
            Some(n) => format!("this process has no device {n:?}"),
            None => "this process has no running device".to_string(),
        };
        let _ = answer(&stream, &Answer::Refused(why));
        return;
    }
    let ok = Answer::Ok {
        pid: std::process::id(),
        devices: devs.iter().map(|d| d.cfg.name.clone()).collect(),
    };
    if answer(&stream, &ok).is_err() {
        return;
    }
    match req.kind {
        Kind::Capture => {
            let locals = devs.iter().map(|d| d.cfg.addr).collect();
            let (sink, mut records) = crate::tap::Sink::stream(req.snaplen, req.ring_rx, locals);
            for d in &devs {
                d.tap.add(sink.clone());
            }
            let mut sent_dropped = 0;
            loop {
                let batch = records.next_batch(POLL);
                let dropped = sink.dropped.load(Relaxed);
                if !pass(
                    &stream,
                    attach::FRAME_RECORDS,
                    batch,
                    dropped,
                    &mut sent_dropped,
                ) {
                    break;
                }
            }
            for d in &devs {
                d.tap.remove(&sink);
            }
        }
        Kind::Trace => {
            let (sub, rx) = crate::trace::subscribe(req.device.clone(), req.fast, req.fast_rate);
            let mut sent_dropped = 0;
            let mut text = String::new();
            loop {
                text.clear();
                match rx.recv_timeout(POLL) {
                    Ok(l) => {
                        text.push_str(&l);
                        while text.len() < (1 << 20) {
                            match rx.try_recv() {
                                Ok(l) => text.push_str(&l),
                                Err(_) => break,
                            }
                        }
                    }
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => break,
                }
                let dropped = sub.dropped.load(Relaxed);
                if !pass(
                    &stream,
                    attach::FRAME_LINES,
                    text.as_bytes(),
                    dropped,
                    &mut sent_dropped,
                ) {
                    break;
                }
            }
            crate::trace::unsubscribe(&sub);
        }
    }
}

/// One round of an attachment: send `body` as a frame of `kind` (if any) and the dropped
/// count if it changed since `sent_dropped`; with nothing to send, check the tool is still
/// there. `false`: the tool is gone (or a write to it failed or timed out).
fn pass(stream: &UnixStream, kind: u8, body: &[u8], dropped: u64, sent_dropped: &mut u64) -> bool {
    let mut out = Vec::with_capacity(body.len() + 32);
    if !body.is_empty() {
        attach::encode_frame(kind, body, &mut out);
    }
    if dropped != *sent_dropped {
        attach::encode_frame(attach::FRAME_DROPPED, &dropped.to_le_bytes(), &mut out);
        *sent_dropped = dropped;
    }
    if out.is_empty() {
        !sys::peer_closed(stream.as_fd())
    } else {
        sys::send_all(stream.as_fd(), &out).is_ok()
    }
}

fn answer(stream: &UnixStream, a: &Answer) -> io::Result<()> {
    sys::send_all(stream.as_fd(), a.encode().as_bytes())
}

/// Records lost by the captures of device `name` in this process (queue full or write
/// errors), for `uroce stat`.
pub fn capture_lost(name: &str) -> u64 {
    crate::registry::attachable()
        .iter()
        .filter(|d| d.cfg.name == name)
        .map(|d| d.tap.lost())
        .sum()
}
