//! Polling registered memory that the device writes with no completion to announce it:
//! `write_lat` waits for the peer's RDMA WRITE by watching the last byte of its receive
//! region, as perftest does with a `volatile char *`.
//!
//! The device (the engine thread, playing the NIC's DMA) writes that memory through raw
//! pointers at any time; a plain read through `&[u8]` could be hoisted out of the loop by
//! the compiler. A volatile load re-reads memory every time, and the Acquire fence after
//! it orders the reads of the rest of the message after the poll byte was seen (the
//! device writes a message's bytes in order, the poll byte last).
#![allow(unsafe_code)]

use std::sync::atomic::{fence, Ordering};

use uroce::MrBuf;

/// The byte at `offset` of `buf`, read with a volatile load; `None` outside the buffer.
pub fn load_u8(buf: &MrBuf, offset: usize) -> Option<u8> {
    let bytes = buf.as_slice();
    if offset >= bytes.len() {
        return None;
    }
    let p = bytes.as_ptr().wrapping_add(offset);
    // SAFETY: `offset < bytes.len()`, so `p` points into the live allocation `buf` owns
    // (it is freed only when `buf` is dropped, which the borrow prevents). A byte is
    // always initialised (MrBuf memory starts zeroed) and a one-byte load cannot tear.
    let v = unsafe { std::ptr::read_volatile(p) };
    fence(Ordering::Acquire);
    Some(v)
}
