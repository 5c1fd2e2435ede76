//! Page-aligned heap buffers for owned memory regions ([`crate::MrBuf`]).
#![allow(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]

use std::alloc::Layout;
use std::ptr::NonNull;

/// Alignment of [`crate::MrBuf`] memory: a page, as `posix_memalign(4096)` in perftest.
pub const PAGE_SIZE: usize = 4096;

/// A zeroed, page-aligned heap allocation of `len` bytes (at least one page is allocated).
pub(crate) struct PageBuf {
    ptr: NonNull<u8>,
    len: usize,
    layout: Layout,
}

// SAFETY: a PageBuf is a unique owner of plain bytes, like `Box<[u8]>`.
unsafe impl Send for PageBuf {}
// SAFETY: shared access only hands out `&[u8]`, like `Box<[u8]>`.
unsafe impl Sync for PageBuf {}

impl PageBuf {
    /// Allocate `len` zeroed bytes; `None` if the size overflows a layout.
    pub(crate) fn new_zeroed(len: usize) -> Option<PageBuf> {
        let size = len.max(1).checked_next_multiple_of(PAGE_SIZE)?;
        let layout = Layout::from_size_align(size, PAGE_SIZE).ok()?;
        // SAFETY: `layout` has a nonzero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw)?;
        Some(PageBuf { ptr, len, layout })
    }

    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` is valid for `layout.size() ≥ len` initialized (zeroed) bytes for
        // `self`'s lifetime; the returned borrow is tied to `&self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` makes this the only Rust borrow.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Give up the allocation without freeing it: used when the device could not confirm
    /// that it stopped accessing the memory (a failed deregistration), so freeing it could
    /// let the engine write into memory that has been reused.
    pub(crate) fn leak(self) {
        std::mem::forget(self);
    }
}

impl Drop for PageBuf {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `alloc_zeroed(self.layout)` and is freed only here.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

impl core::fmt::Debug for PageBuf {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PageBuf")
            .field("addr", &format_args!("{:#x}", self.ptr.as_ptr() as usize))
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_aligned_zeroed_and_writable() {
        let mut b = PageBuf::new_zeroed(10_000).unwrap();
        assert_eq!(b.as_ptr() as usize % PAGE_SIZE, 0);
        assert_eq!(b.len(), 10_000);
        assert!(b.as_slice().iter().all(|&x| x == 0));
        b.as_mut_slice()[9_999] = 7;
        assert_eq!(b.as_slice()[9_999], 7);
        let z = PageBuf::new_zeroed(0).unwrap();
        assert_eq!(z.as_slice().len(), 0);
        assert!(PageBuf::new_zeroed(usize::MAX).is_none());
    }
}
