//! Versioned exports and SONAME for libefa.so.1 (see compat-symver).
fn main() {
    compat_symver::emit("exports.txt", "libefa.so.1");
}
