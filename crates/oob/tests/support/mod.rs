//! Test support: a TCP payload extractor for the simple exchange captures (classic pcap,
//! Ethernet II, IPv4, TCP), a scripted peer that replays one direction of a capture, and
//! helpers to read the captured console outputs.
#![allow(dead_code)]

use std::io::{self, Read, Write};
use std::path::PathBuf;

/// The capture directory.
pub fn captures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/exchange-captures")
}

/// A TCP segment with payload.
#[derive(Clone, Debug)]
pub struct Segment {
    /// Capture order (record index).
    pub index: usize,
    /// Sent by the client (the side that did not use port 18515).
    pub from_client: bool,
    /// Offset of the first payload byte in its direction's stream.
    pub offset: u32,
    /// The payload.
    pub payload: Vec<u8>,
}

/// The payload-carrying segments of the one TCP connection in a capture.
#[derive(Clone, Debug)]
pub struct TcpCapture {
    /// Segments in capture order, retransmissions removed.
    pub segments: Vec<Segment>,
}

fn u16_at(b: &[u8], at: usize, le: bool) -> Option<u16> {
    let s: [u8; 2] = b.get(at..at + 2)?.try_into().ok()?;
    Some(if le {
        u16::from_le_bytes(s)
    } else {
        u16::from_be_bytes(s)
    })
}

fn u32_at(b: &[u8], at: usize, le: bool) -> Option<u32> {
    let s: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
    Some(if le {
        u32::from_le_bytes(s)
    } else {
        u32::from_be_bytes(s)
    })
}

impl TcpCapture {
    /// Loads `name` from the capture directory. Panics on anything unexpected (test data).
    pub fn load(name: &str) -> TcpCapture {
        let path = captures_dir().join(name);
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        TcpCapture::parse(&bytes).unwrap_or_else(|| panic!("{name}: not a simple TCP capture"))
    }

    /// Parses a classic pcap of Ethernet/IPv4/TCP frames on port 18515.
    pub fn parse(bytes: &[u8]) -> Option<TcpCapture> {
        let magic = u32_at(bytes, 0, true)?;
        let le = match magic {
            0xa1b2_c3d4 | 0xa1b2_3c4d => true,
            0xd4c3_b2a1 | 0x4d3c_b2a1 => false,
            _ => return None,
        };
        if u32_at(bytes, 20, le)? != 1 {
            return None; // not Ethernet
        }
        let mut pos = 24;
        let mut index = 0;
        // (from_client, seq) → ISN from the SYN, data offsets relative to ISN+1.
        let mut isn: [Option<u32>; 2] = [None, None];
        let mut raw: Vec<(usize, bool, u32, Vec<u8>)> = Vec::new();
        while pos + 16 <= bytes.len() {
            let incl = u32_at(bytes, pos + 8, le)? as usize;
            let frame = bytes.get(pos + 16..pos + 16 + incl)?;
            pos += 16 + incl;
            index += 1;
            let mut eth = 14;
            let mut ethertype = u16_at(frame, 12, false)?;
            while ethertype == 0x8100 {
                ethertype = u16_at(frame, eth + 2, false)?;
                eth += 4;
            }
            if ethertype != 0x0800 {
                continue;
            }
            let ip = frame.get(eth..)?;
            let ihl = usize::from(ip.first()? & 0x0f) * 4;
            let total = usize::from(u16_at(ip, 2, false)?);
            if *ip.get(9)? != 6 {
                continue;
            }
            let tcp = ip.get(ihl..total)?;
            let sport = u16_at(tcp, 0, false)?;
            let dport = u16_at(tcp, 2, false)?;
            let seq = u32_at(tcp, 4, false)?;
            let doff = usize::from(tcp.get(12)? >> 4) * 4;
            let flags = *tcp.get(13)?;
            let from_client = dport == 18515;
            if sport != 18515 && dport != 18515 {
                continue;
            }
            let dir = usize::from(!from_client);
            if flags & 0x02 != 0 {
                isn[dir] = Some(seq);
            }
            let payload = tcp.get(doff..)?.to_vec();
            if !payload.is_empty() {
                raw.push((index, from_client, seq, payload));
            }
        }
        let mut segments: Vec<Segment> = Vec::new();
        for (index, from_client, seq, payload) in raw {
            let dir = usize::from(!from_client);
            let base = isn[dir]?.wrapping_add(1);
            let offset = seq.wrapping_sub(base);
            if segments
                .iter()
                .any(|s| s.from_client == from_client && s.offset == offset)
            {
                continue; // retransmission
            }
            segments.push(Segment {
                index,
                from_client,
                offset,
                payload,
            });
        }
        Some(TcpCapture { segments })
    }

    /// One direction's segments ordered by sequence number.
    pub fn writes(&self, from_client: bool) -> Vec<Vec<u8>> {
        let mut segs: Vec<&Segment> = self
            .segments
            .iter()
            .filter(|s| s.from_client == from_client)
            .collect();
        segs.sort_by_key(|s| s.offset);
        segs.iter().map(|s| s.payload.clone()).collect()
    }

    /// One direction's byte stream.
    pub fn stream(&self, from_client: bool) -> Vec<u8> {
        self.writes(from_client).concat()
    }

    /// For replaying the peer of `our_side_is_client`: the peer's bytes, and for each
    /// peer segment (in stream order) how many bytes the peer had then and how many of
    /// our bytes had been captured before it (the peer only sent it after reading those).
    pub fn gates(&self, our_side_is_client: bool) -> Vec<Gate> {
        let mut ours_so_far = 0usize;
        let mut peer_so_far = 0usize;
        let mut gates = Vec::new();
        for s in &self.segments {
            if s.from_client == our_side_is_client {
                ours_so_far += s.payload.len();
            } else {
                peer_so_far += s.payload.len();
                gates.push(Gate {
                    peer_bytes_upto: peer_so_far,
                    ours_needed: ours_so_far,
                });
            }
        }
        gates
    }
}

/// Peer bytes up to `peer_bytes_upto` become readable once we have written
/// `ours_needed` bytes.
#[derive(Copy, Clone, Debug)]
pub struct Gate {
    /// Peer stream length available after this gate opens.
    pub peer_bytes_upto: usize,
    /// Our bytes that must have been written first.
    pub ours_needed: usize,
}

/// A peer that plays back captured bytes, only as fast as the lock-step allows: a read
/// that would need peer bytes the peer had not yet sent (because we have not written
/// what it was waiting for) fails with `WouldBlock` — in a real exchange that read would
/// hang. After the last peer byte, reads return EOF (the peer closed). Every `write()`
/// call is recorded.
#[derive(Debug)]
pub struct ScriptedPeer {
    incoming: Vec<u8>,
    gates: Vec<Gate>,
    pos: usize,
    max_chunk: usize,
    /// Each `write()` call's bytes.
    pub writes: Vec<Vec<u8>>,
    written: usize,
}

impl ScriptedPeer {
    /// Replays `capture`'s other side for our side (`we_are_client`), returning at most
    /// `max_chunk` bytes per read (small values exercise the read loops).
    pub fn new(capture: &TcpCapture, we_are_client: bool, max_chunk: usize) -> ScriptedPeer {
        ScriptedPeer {
            incoming: capture.stream(!we_are_client),
            gates: capture.gates(we_are_client),
            pos: 0,
            max_chunk: max_chunk.max(1),
            writes: Vec::new(),
            written: 0,
        }
    }

    /// A peer that sends `bytes` at once, with no lock-step gating.
    pub fn from_bytes(bytes: &[u8], max_chunk: usize) -> ScriptedPeer {
        ScriptedPeer {
            incoming: bytes.to_vec(),
            gates: vec![Gate {
                peer_bytes_upto: bytes.len(),
                ours_needed: 0,
            }],
            pos: 0,
            max_chunk: max_chunk.max(1),
            writes: Vec::new(),
            written: 0,
        }
    }

    fn available(&self) -> usize {
        self.gates
            .iter()
            .filter(|g| g.ours_needed <= self.written)
            .map(|g| g.peer_bytes_upto)
            .max()
            .unwrap_or(0)
    }

    /// All bytes written.
    pub fn written_bytes(&self) -> Vec<u8> {
        self.writes.concat()
    }

    /// Peer bytes not consumed.
    pub fn unread(&self) -> usize {
        self.incoming.len() - self.pos
    }
}

impl Read for ScriptedPeer {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos == self.incoming.len() {
            return Ok(0);
        }
        let avail = self.available();
        if self.pos >= avail {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!(
                    "read before writing what the peer waits for (wrote {}, peer at {})",
                    self.written, self.pos
                ),
            ));
        }
        let n = buf.len().min(avail - self.pos).min(self.max_chunk);
        buf[..n].copy_from_slice(&self.incoming[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

impl Write for ScriptedPeer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.writes.push(buf.to_vec());
        self.written += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The console output captured for `name` (e.g. `pt_write_bw.pcap.client.txt`).
pub fn console(name: &str) -> String {
    let path = captures_dir().join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
