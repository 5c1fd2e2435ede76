//! Versioned exports and SONAME for libibverbs.so.1 (see compat-symver).
fn main() {
    compat_symver::emit("exports.txt", "libibverbs.so.1");
}
