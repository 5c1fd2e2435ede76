//! A small slab: objects addressed by dense `u32` indices (the control plane's handles and
//! the MR/QP key indices), with freed indices reused lowest-first like the kernel's IDR, or
//! in rotation for QP numbers.

use std::collections::BTreeSet;

/// Dense storage with reusable indices. Entry `i` is stored at `items[i - first]`, so a
/// slab whose indices start high (a daemon client's QP-number window) costs nothing below.
#[derive(Debug)]
pub(crate) struct Slab<T> {
    items: Vec<Option<T>>,
    free: BTreeSet<u32>,
    len: usize,
    /// Indices below this are never handed out (rxe starts QP and MR indices above 0).
    first: u32,
    /// Where [`Slab::insert_rotating`] looks first.
    cursor: u32,
}

impl<T> Slab<T> {
    pub(crate) fn new(first: u32) -> Slab<T> {
        Slab {
            items: Vec::new(),
            free: BTreeSet::new(),
            len: 0,
            first,
            cursor: first,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn pos(&self, idx: u32) -> Option<usize> {
        idx.checked_sub(self.first).map(|p| p as usize)
    }

    /// The index one past the highest ever stored.
    fn end(&self) -> Option<u32> {
        self.first
            .checked_add(u32::try_from(self.items.len()).ok()?)
    }

    fn put(&mut self, idx: u32, value: T) -> Option<u32> {
        let p = self.pos(idx)?;
        if p >= self.items.len() {
            self.items.resize_with(p + 1, || None);
        }
        *self.items.get_mut(p)? = Some(value);
        self.len += 1;
        Some(idx)
    }

    /// Insert, returning the index; `None` if `limit` entries are already present.
    pub(crate) fn insert(&mut self, value: T, limit: u32) -> Option<u32> {
        if self.len >= limit as usize {
            return None;
        }
        let idx = match self.free.pop_first() {
            Some(i) => i,
            None => self.end()?,
        };
        self.put(idx, value)
    }

    /// Insert like [`Slab::insert`], but hand out indices in rotation: the lowest free index
    /// at or after the one after the last handed out, wrapping around within
    /// `[first, first + limit)`. A freed index is therefore reused as late as possible, as
    /// rxe's pools do for QP numbers, so that packets still in flight to a destroyed QP do not
    /// land on a new QP that got its number.
    pub(crate) fn insert_rotating(&mut self, value: T, limit: u32) -> Option<u32> {
        if self.len >= limit as usize {
            return None;
        }
        let end = self.first.saturating_add(limit);
        let grown = self.end()?;
        let idx = if let Some(&i) = self.free.range(self.cursor..).next() {
            i
        } else if grown < end {
            grown
        } else {
            *self.free.range(self.first..).next()?
        };
        self.free.remove(&idx);
        self.put(idx, value)?;
        self.cursor = idx.saturating_add(1);
        Some(idx)
    }

    /// Make [`Slab::insert_rotating`] start from the lowest index again.
    pub(crate) fn reset_rotation(&mut self) {
        self.cursor = self.first;
    }

    pub(crate) fn get(&self, idx: u32) -> Option<&T> {
        self.items.get(self.pos(idx)?)?.as_ref()
    }

    pub(crate) fn get_mut(&mut self, idx: u32) -> Option<&mut T> {
        let p = self.pos(idx)?;
        self.items.get_mut(p)?.as_mut()
    }

    pub(crate) fn remove(&mut self, idx: u32) -> Option<T> {
        let p = self.pos(idx)?;
        let v = self.items.get_mut(p)?.take()?;
        self.free.insert(idx);
        self.len -= 1;
        Some(v)
    }

    fn index_of(&self, p: usize) -> Option<u32> {
        self.first.checked_add(u32::try_from(p).ok()?)
    }

    /// Indices of the entries for which `f` holds.
    pub(crate) fn indices_where(&self, mut f: impl FnMut(&T) -> bool) -> Vec<u32> {
        self.items
            .iter()
            .enumerate()
            .filter_map(|(p, v)| match v {
                Some(v) if f(v) => self.index_of(p),
                _ => None,
            })
            .collect()
    }

    pub(crate) fn iter_mut_all(&mut self) -> impl Iterator<Item = (u32, &mut T)> {
        let first = self.first;
        self.items.iter_mut().enumerate().filter_map(move |(p, v)| {
            Some((first.checked_add(u32::try_from(p).ok()?)?, v.as_mut()?))
        })
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.items
            .iter()
            .enumerate()
            .filter_map(|(p, v)| Some((self.index_of(p)?, v.as_ref()?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_lowest_and_respects_limit_and_first() {
        let mut s: Slab<&str> = Slab::new(16);
        assert_eq!(s.insert("a", 3), Some(16));
        assert_eq!(s.insert("b", 3), Some(17));
        assert_eq!(s.insert("c", 3), Some(18));
        assert_eq!(s.insert("d", 3), None);
        assert_eq!(s.remove(17), Some("b"));
        assert_eq!(s.get(17), None);
        assert_eq!(s.get(3), None);
        assert_eq!(s.insert("e", 3), Some(17));
        assert_eq!(s.len(), 3);
        assert_eq!(s.indices_where(|v| *v != "a"), vec![17, 18]);
        assert_eq!(s.remove(99), None);
    }

    #[test]
    fn rotating_reuses_freed_indices_last() {
        let mut s: Slab<u32> = Slab::new(16);
        assert_eq!(s.insert_rotating(0, 4), Some(16));
        assert_eq!(s.insert_rotating(1, 4), Some(17));
        assert_eq!(s.remove(16), Some(0));
        // 16 is free, but 18 comes first.
        assert_eq!(s.insert_rotating(2, 4), Some(18));
        assert_eq!(s.remove(17), Some(1));
        assert_eq!(s.insert_rotating(3, 4), Some(19));
        // The range [16, 20) is used up to its end: wrap to the lowest free index.
        assert_eq!(s.insert_rotating(4, 4), Some(16));
        assert_eq!(s.insert_rotating(5, 4), Some(17));
        assert_eq!(s.insert_rotating(6, 4), None);
        assert_eq!(s.len(), 4);
        assert_eq!(s.remove(18), Some(2));
        assert_eq!(s.insert_rotating(7, 4), Some(18));
        assert_eq!(s.get(18), Some(&7));
    }

    #[test]
    fn a_high_first_index_stores_nothing_below_it() {
        let mut s: Slab<u32> = Slab::new(5 << 14);
        assert_eq!(s.insert_rotating(1, 4), Some(5 << 14));
        assert_eq!(s.insert(2, 4), Some((5 << 14) + 1));
        assert!(s.items.len() <= 2);
        assert_eq!(s.get(3), None);
        assert_eq!(s.remove(17), None);
        assert_eq!(
            s.iter().map(|(i, _)| i).collect::<Vec<_>>(),
            vec![5 << 14, (5 << 14) + 1]
        );
    }
}
