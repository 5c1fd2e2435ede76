//! Panic-free big-endian helpers shared by the header views.
//!
//! Field accessors index the buffer with ranges from each module's private `field` table; after
//! `new_checked` those slices always exist. These helpers then read or write any slice length
//! without a fallible conversion, so no `unwrap` is needed anywhere on the parse path.

/// Big-endian value of `b` (at most 8 bytes are meaningful).
#[inline]
pub(crate) fn be(b: &[u8]) -> u64 {
    b.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x))
}

/// Writes the low `dst.len()` bytes of `v` into `dst`, big-endian.
#[inline]
pub(crate) fn put_be(dst: &mut [u8], v: u64) {
    let mut v = v;
    for byte in dst.iter_mut().rev() {
        *byte = (v & 0xFF) as u8;
        v >>= 8;
    }
}

/// The boilerplate of a fixed-length header view: `Packet<T>` with `new_unchecked`,
/// `new_checked` (length validated once), `check_len`, `into_inner` and `as_bytes`.
macro_rules! fixed_header_view {
    ($what:literal) => {
        #[doc = concat!("Zero-copy view of a ", $what, " over a byte buffer.")]
        ///
        /// Construct with [`Packet::new_checked`] for untrusted bytes: it validates the length
        /// once and every accessor is then infallible and panic-free. Bytes after the header
        /// are ignored.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct Packet<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> Packet<T> {
            /// Wraps `buffer` without checking its length. Accessors panic if it is shorter
            /// than [`HEADER_LEN`]; use [`Packet::new_checked`] for untrusted input.
            #[inline]
            pub const fn new_unchecked(buffer: T) -> Packet<T> {
                Packet { buffer }
            }

            /// Wraps `buffer` after checking it holds at least [`HEADER_LEN`] bytes.
            #[inline]
            pub fn new_checked(buffer: T) -> $crate::Result<Packet<T>> {
                let p = Packet::new_unchecked(buffer);
                p.check_len()?;
                Ok(p)
            }

            /// `Err(Truncated)` if the buffer is shorter than the header.
            #[inline]
            pub fn check_len(&self) -> $crate::Result<()> {
                if self.buffer.as_ref().len() < HEADER_LEN {
                    Err($crate::Error::Truncated)
                } else {
                    Ok(())
                }
            }

            /// The wrapped buffer.
            #[inline]
            pub fn into_inner(self) -> T {
                self.buffer
            }

            #[inline]
            fn data(&self) -> &[u8] {
                self.buffer.as_ref()
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
            #[inline]
            fn data_mut(&mut self) -> &mut [u8] {
                self.buffer.as_mut()
            }
        }
    };
}
pub(crate) use fixed_header_view;
