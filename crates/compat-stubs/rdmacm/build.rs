//! Versioned exports and SONAME for librdmacm.so.1 (see compat-symver).
fn main() {
    compat_symver::emit("exports.txt", "librdmacm.so.1");
}
