//! Typed offsets: what applications store in shared memory instead of pointers.

use std::fmt;
use std::marker::PhantomData;

/// A nullable offset of a `T` from the heap base. It names the same bytes in every process that
/// maps the heap (PC-S); turn it into a pointer with [`crate::Heap::pointer`], which checks it.
#[repr(transparent)]
pub struct Offset<T> {
    raw: u64,
    _type: PhantomData<*const T>,
}

// SAFETY: an offset is an integer; it grants no access by itself.
unsafe impl<T> Send for Offset<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for Offset<T> {}

impl<T> Offset<T> {
    /// The null offset (0 is the heap header, never a block).
    pub const NULL: Self = Self::from_raw(0);

    /// Wraps a raw value (for instance one read from shared memory).
    pub const fn from_raw(raw: u64) -> Self {
        Self { raw, _type: PhantomData }
    }

    /// The raw value, for storing in shared memory.
    pub const fn raw(self) -> u64 {
        self.raw
    }

    /// Whether this is the null offset.
    pub const fn is_null(self) -> bool {
        self.raw == 0
    }

    /// The same offset, typed as `U`.
    pub const fn cast<U>(self) -> Offset<U> {
        Offset::from_raw(self.raw)
    }
}

impl<T> Clone for Offset<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Offset<T> {}
impl<T> PartialEq for Offset<T> {
    fn eq(&self, other: &Self) -> bool {
        self.raw == other.raw
    }
}
impl<T> Eq for Offset<T> {}
impl<T> fmt::Debug for Offset<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Offset({:#x})", self.raw)
    }
}
impl<T> Default for Offset<T> {
    fn default() -> Self {
        Self::NULL
    }
}
