//! `open_enum!` and `open_flags!`: wire codes as open newtypes (rustls `enum_builder!` style).
//!
//! Unknown values survive a round trip and print in hex; named values print their name.

/// An open enumeration: `pub struct Name(pub T)` with named constants.
macro_rules! open_enum {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident($ty:ty) {
            $( $(#[$cmeta:meta])* $c:ident = $v:expr, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
        #[repr(transparent)]
        $vis struct $name(pub $ty);

        impl $name {
            $( $(#[$cmeta])* pub const $c: $name = $name($v); )*

            /// Every named value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$c),*];

            /// The constant's name (`"RTS"`), or `None` for a value without one.
            pub fn name(self) -> Option<&'static str> {
                $( if self.0 == $v { return Some(stringify!($c)); } )*
                None
            }

            /// Whether this value has a name here.
            pub fn is_known(self) -> bool {
                self.name().is_some()
            }
        }

        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                match self.name() {
                    Some(n) => write!(f, "{}", n),
                    None => write!(f, "{}({:#x})", stringify!($name), self.0),
                }
            }
        }

        impl core::fmt::Display for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                core::fmt::Debug::fmt(self, f)
            }
        }

        impl From<$ty> for $name {
            fn from(v: $ty) -> Self {
                $name(v)
            }
        }

        impl From<$name> for $ty {
            fn from(v: $name) -> Self {
                v.0
            }
        }
    };
}

/// An open bit set: `pub struct Name(pub T)` with named single-bit (or multi-bit) constants.
/// Unknown bits are retained; `Debug` prints `A | B | 0x40`.
macro_rules! open_flags {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident($ty:ty) {
            $( $(#[$cmeta:meta])* $c:ident = $v:expr, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Copy, Clone, PartialEq, Eq, Hash, Default)]
        #[repr(transparent)]
        $vis struct $name(pub $ty);

        impl $name {
            $( $(#[$cmeta])* pub const $c: $name = $name($v); )*

            /// No bits.
            pub const EMPTY: $name = $name(0);

            /// Every named flag with its name, in declaration order.
            pub const NAMED: &'static [(&'static str, $name)] = &[$((stringify!($c), $name::$c)),*];

            /// The union of all named bits.
            pub const KNOWN: $name = $name(0 $(| $v)*);

            /// The raw bits.
            pub const fn bits(self) -> $ty {
                self.0
            }

            /// Whether every bit of `other` is set in `self`.
            pub const fn contains(self, other: $name) -> bool {
                self.0 & other.0 == other.0
            }

            /// Whether any bit of `other` is set in `self`.
            pub const fn intersects(self, other: $name) -> bool {
                self.0 & other.0 != 0
            }

            /// Bits set here that have no name.
            pub const fn unknown_bits(self) -> $ty {
                self.0 & !Self::KNOWN.0
            }

            /// Whether no bit is set.
            pub const fn is_empty(self) -> bool {
                self.0 == 0
            }

            /// The bits of `self` not in `other`.
            pub const fn minus(self, other: $name) -> $name {
                $name(self.0 & !other.0)
            }
        }

        impl core::ops::BitOr for $name {
            type Output = $name;
            fn bitor(self, rhs: $name) -> $name {
                $name(self.0 | rhs.0)
            }
        }

        impl core::ops::BitOrAssign for $name {
            fn bitor_assign(&mut self, rhs: $name) {
                self.0 |= rhs.0;
            }
        }

        impl core::ops::BitAnd for $name {
            type Output = $name;
            fn bitand(self, rhs: $name) -> $name {
                $name(self.0 & rhs.0)
            }
        }

        impl core::ops::Not for $name {
            type Output = $name;
            fn not(self) -> $name {
                $name(!self.0)
            }
        }

        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                if self.0 == 0 {
                    return write!(f, "0");
                }
                let mut first = true;
                let mut sep = |f: &mut core::fmt::Formatter<'_>| -> core::fmt::Result {
                    if !first {
                        write!(f, " | ")?;
                    }
                    first = false;
                    Ok(())
                };
                for (n, v) in Self::NAMED {
                    if v.0 != 0 && self.contains(*v) {
                        sep(f)?;
                        write!(f, "{}", n)?;
                    }
                }
                let rest = self.unknown_bits();
                if rest != 0 {
                    sep(f)?;
                    write!(f, "{:#x}", rest)?;
                }
                Ok(())
            }
        }

        impl core::fmt::Display for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                core::fmt::Debug::fmt(self, f)
            }
        }

        impl From<$ty> for $name {
            fn from(v: $ty) -> Self {
                $name(v)
            }
        }
    };
}

/// A closed enumeration of a C enum: a fieldless `#[repr]` enum whose discriminants are the
/// C values, with a checked decoder. Each variant also names its C constant (without the
/// prefix), which [`name`](#method.name) returns.
macro_rules! closed_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident: $repr:ident {
            $( $(#[$cmeta:meta])* $v:ident = $val:expr => $cname:literal, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr($repr)]
        $vis enum $name {
            $( $(#[$cmeta])* $v = $val, )*
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$v),*];

            /// Decode a C value; `None` for a value this enum does not name.
            pub const fn from_raw(v: u32) -> Option<$name> {
                $( if v == $val { return Some($name::$v); } )*
                None
            }

            /// The C value.
            pub const fn raw(self) -> u32 {
                self as u32
            }

            /// The C constant's name without its prefix (`"RTS"` for `IBV_QPS_RTS`).
            pub const fn name(self) -> &'static str {
                match self {
                    $( $name::$v => $cname, )*
                }
            }

            /// Formats a raw value as [`name`](#method.name) does, or as `Name(0x…)` for a
            /// value outside the enum (for traces of bytes not yet checked).
            pub fn raw_name(v: u32) -> impl core::fmt::Display {
                struct Show(u32);
                impl core::fmt::Display for Show {
                    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                        match $name::from_raw(self.0) {
                            Some(x) => f.write_str(x.name()),
                            None => write!(f, "{}({:#x})", stringify!($name), self.0),
                        }
                    }
                }
                Show(v)
            }
        }

        impl TryFrom<u32> for $name {
            type Error = u32;
            fn try_from(v: u32) -> Result<$name, u32> {
                $name::from_raw(v).ok_or(v)
            }
        }

        impl From<$name> for u32 {
            fn from(v: $name) -> u32 {
                v.raw()
            }
        }
    };
}
