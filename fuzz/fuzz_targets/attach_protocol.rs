//! Fuzz what the attach protocol reads from another process (`abi::attach`,
//! docs/operations.md §4): a tool's request line (read by every uroce process), a process's
//! answer line and frames, and the pcap records inside a records frame (read by `uroce
//! capture`). Whatever a request or answer parser accepts must survive a round trip.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = abi::attach::Request::parse(data) {
        assert_eq!(abi::attach::Request::parse(r.encode().as_bytes()), Ok(r));
    }
    if let Ok(a) = abi::attach::Answer::parse(data) {
        if let Ok(b) = abi::attach::Answer::parse(a.encode().as_bytes()) {
            if let abi::attach::Answer::Ok { .. } = a {
                assert_eq!(a, b);
            }
        }
    }
    let mut at = 0;
    while let Ok(Some((kind, body, used))) = abi::attach::split_frame(&data[at..]) {
        assert!(used > 0 && at + used <= data.len());
        if kind == abi::attach::FRAME_RECORDS {
            for (rec, frame) in capture::frame::stream_records(body) {
                assert!(rec.len() >= 16 + frame.data.len());
                let _ = capture::Decoded::from_frame(&frame);
            }
        }
        at += used;
    }
});
