//! Versioned exports and SONAME for libmlx5.so.1 (see compat-symver).
fn main() {
    compat_symver::emit("exports.txt", "libmlx5.so.1");
}
