//! Versioned exports for a Rust `cdylib`, generated from one table.
//!
//! rdma-core's libraries export every symbol under a version node (`ibv_open_device@@IBVERBS_1.1`)
//! and every Debian binary that links them asks for `symbol@NODE`, resolved at load time because
//! they are linked `-z now` (docs/compat.md §0, §1). A Rust `cdylib` cannot get there with a
//! version script alone: rustc passes its own anonymous version script listing every
//! `#[no_mangle]` item, and rust-lld lets that exact match win, so the symbols come out
//! unversioned (docs/compat.md §6.2). `.symver` directives next to the Rust definitions do
//! not work either once the crate has more than one codegen unit: the assembler insists that
//! a default-version symbol be defined in the same object as the directive.
//!
//! So the exported names are not Rust symbols at all. For every export this crate generates
//! an assembly entry point in one `global_asm!` block: a global function symbol whose body is
//! a single direct `jmp` to the Rust implementation (referenced with a `sym` operand, so the
//! implementation keeps its mangled, unexported name), followed by
//! `.symver name, name@@NODE`. Data exports are defined the same way as zero-filled
//! objects. Rustc's anonymous script does not name these symbols, so only our version
//! script does, and the linker versions them exactly as listed. The cost is one direct
//! `jmp` on each call through an exported name; the fast-path ops that applications reach
//! through function pointers (`ibv_context.ops`) point at the Rust functions directly.
//!
//! The table format (`exports.txt` in each library crate):
//!
//! ```text
//! # comment
//! node IBVERBS_1.0
//! ibv_read_sysfs_file               # a function: `crate::ibv_read_sysfs_file` implements it
//! node IBVERBS_1.1 IBVERBS_1.0      # a node and the node it inherits from
//! ibv_open_device
//! node IBVERBS_PRIVATE_34
//! verbs_allow_disassociate_destroy data 1   # a zero-initialised, writable 1-byte object
//! ```
//!
//! A build script calls [`emit`]; the library then does
//! `include!(concat!(env!("OUT_DIR"), "/exports.rs"));` at its crate root (outside
//! `cfg(test)`), with every exported function reachable there under its C name.
#![forbid(unsafe_code)]

use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// What an exported name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A function implemented by the Rust item of the same name at the crate root.
    Func,
    /// A zero-initialised writable data object of this many bytes.
    Data(usize),
}

/// One exported symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    /// C name.
    pub name: String,
    /// Function or data.
    pub kind: Kind,
}

/// One version node and the symbols defined under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Node name, e.g. `IBVERBS_1.1`.
    pub name: String,
    /// The node this one inherits from (`IBVERBS_1.1 { ... } IBVERBS_1.0;`), if any.
    pub parent: Option<String>,
    /// Exported symbols, in table order.
    pub symbols: Vec<Export>,
}

/// Why an export table was rejected (line numbers are 1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableError {
    /// Line of the table the problem is on.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for TableError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "export table line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for TableError {}

fn is_ident(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn is_node_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
}

/// Parses an export table. Rejects symbols before the first node, duplicate symbols or nodes,
/// a parent that is not defined earlier, and names the assembler or linker would choke on.
pub fn parse(text: &str) -> Result<Vec<Node>, TableError> {
    let mut nodes: Vec<Node> = Vec::new();
    let mut seen_symbols: HashSet<String> = HashSet::new();
    for (idx, raw) in text.lines().enumerate() {
        let line = idx + 1;
        let err = |message: String| TableError { line, message };
        let content = raw.split('#').next().unwrap_or("").trim();
        if content.is_empty() {
            continue;
        }
        let words: Vec<&str> = content.split_whitespace().collect();
        match words.as_slice() {
            ["node", name, rest @ ..] => {
                if !is_node_name(name) {
                    return Err(err(format!("bad node name `{name}`")));
                }
                if nodes.iter().any(|n| n.name == *name) {
                    return Err(err(format!("node `{name}` defined twice")));
                }
                let parent = match rest {
                    [] => None,
                    [p] => {
                        if !nodes.iter().any(|n| n.name == *p) {
                            return Err(err(format!("parent `{p}` of `{name}` not defined above")));
                        }
                        Some((*p).to_string())
                    }
                    _ => return Err(err("`node NAME [PARENT]` takes at most two names".into())),
                };
                nodes.push(Node {
                    name: (*name).to_string(),
                    parent,
                    symbols: Vec::new(),
                });
            }
            [symbol, rest @ ..] => {
                let kind = match rest {
                    [] => Kind::Func,
                    ["data", size] => match size.parse::<usize>() {
                        Ok(n) if (1..=4096).contains(&n) => Kind::Data(n),
                        _ => return Err(err(format!("bad data size `{size}`"))),
                    },
                    _ => return Err(err(format!("cannot parse `{content}`"))),
                };
                if !is_ident(symbol) {
                    return Err(err(format!("bad symbol name `{symbol}`")));
                }
                if !seen_symbols.insert((*symbol).to_string()) {
                    return Err(err(format!("symbol `{symbol}` listed twice")));
                }
                let export = Export {
                    name: (*symbol).to_string(),
                    kind,
                };
                match nodes.last_mut() {
                    Some(node) => node.symbols.push(export),
                    None => return Err(err(format!("symbol `{symbol}` before any `node` line"))),
                }
            }
            [] => {}
        }
    }
    Ok(nodes)
}

/// The linker version script: every node, its symbols as `global`, everything else `local`
/// (in the first node, as GNU ld requires exactly one `local: *`).
pub fn version_script(nodes: &[Node]) -> String {
    let mut out = String::new();
    for (i, node) in nodes.iter().enumerate() {
        let _ = writeln!(out, "{} {{", node.name);
        if !node.symbols.is_empty() {
            let _ = writeln!(out, "  global:");
            for s in &node.symbols {
                let _ = writeln!(out, "    {};", s.name);
            }
        }
        if i == 0 {
            let _ = writeln!(out, "  local: *;");
        }
        match &node.parent {
            Some(p) => {
                let _ = writeln!(out, "}} {p};");
            }
            None => {
                let _ = writeln!(out, "}};");
            }
        }
    }
    out
}

/// Rust source for the library: one `global_asm!` defining every export (a `jmp` entry point
/// per function, a zero-filled object per datum) and binding it to its node with
/// `.symver name, name@@NODE`.
pub fn exports_source(nodes: &[Node]) -> String {
    let mut asm = String::new();
    let mut operands = String::new();
    let mut line = |text: &str| {
        let _ = writeln!(asm, "    \"{text}\",");
    };
    line(".pushsection .text.compat_exports,\\\"ax\\\",@progbits");
    let mut funcs = 0usize;
    for node in nodes {
        for e in node.symbols.iter().filter(|e| e.kind == Kind::Func) {
            let n = &e.name;
            line(&format!(".globl {n}"));
            line(&format!(".type {n},@function"));
            line(".p2align 4");
            line(&format!("{n}:"));
            line(&format!("jmp {{f{funcs}}}"));
            line(&format!(".size {n}, .-{n}"));
            line(&format!(".symver {n}, {n}@@{}", node.name));
            let _ = writeln!(operands, "    f{funcs} = sym {n},");
            funcs += 1;
        }
    }
    line(".popsection");
    for node in nodes {
        for e in &node.symbols {
            if let Kind::Data(size) = e.kind {
                let n = &e.name;
                line(&format!(".pushsection .bss.{n},\\\"aw\\\",@nobits"));
                line(&format!(".globl {n}"));
                line(&format!(".type {n},@object"));
                line(&format!(".size {n}, {size}"));
                line(".p2align 3");
                line(&format!("{n}:"));
                line(&format!(".zero {size}"));
                line(&format!(".symver {n}, {n}@@{}", node.name));
                line(".popsection");
            }
        }
    }
    format!(
        "// Generated by compat-symver from the crate's exports.txt; do not edit.\n\
         core::arch::global_asm!(\n{asm}{operands});\n"
    )
}

/// All exported symbol names with their node, in table order.
pub fn exports(nodes: &[Node]) -> Vec<(&str, &str)> {
    nodes
        .iter()
        .flat_map(|n| {
            n.symbols
                .iter()
                .map(move |s| (s.name.as_str(), n.name.as_str()))
        })
        .collect()
}

/// Build-script entry point: reads `table` (relative to the crate), writes `<soname>.map` and
/// `symver.rs` into `OUT_DIR`, and tells cargo to link the cdylib with that SONAME and version
/// script, refusing undefined symbols (so a table entry without a definition fails the build).
///
/// Panics (failing the build, which is what a build script should do) if the table is bad or
/// `OUT_DIR` is missing.
pub fn emit(table: &str, soname: &str) {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let table_path = manifest.join(table);
    println!("cargo:rerun-if-changed={}", table_path.display());
    let text = std::fs::read_to_string(&table_path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", table_path.display()));
    let nodes = parse(&text).unwrap_or_else(|e| panic!("{}: {e}", table_path.display()));
    let map = out.join(format!("{soname}.map"));
    write(&map, &version_script(&nodes));
    write(&out.join("exports.rs"), &exports_source(&nodes));
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        map.display()
    );
    println!("cargo:rustc-cdylib-link-arg=-Wl,--no-undefined");
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
# demo
node LIB_1.0
a_sym
node LIB_1.1 LIB_1.0   # inherits
b_sym
c_sym
node LIB_PRIVATE_1
";

    #[test]
    fn parses_nodes_parents_and_symbols() {
        let nodes = parse(TABLE).unwrap();
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes[1].parent.as_deref(), Some("LIB_1.0"));
        let names: Vec<&str> = nodes[1].symbols.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["b_sym", "c_sym"]);
        assert_eq!(nodes[1].symbols[0].kind, Kind::Func);
        assert!(nodes[2].symbols.is_empty());
        assert_eq!(
            exports(&nodes),
            [
                ("a_sym", "LIB_1.0"),
                ("b_sym", "LIB_1.1"),
                ("c_sym", "LIB_1.1")
            ]
        );
    }

    #[test]
    fn version_script_has_chain_and_single_local() {
        let script = version_script(&parse(TABLE).unwrap());
        assert!(script.starts_with("LIB_1.0 {\n  global:\n    a_sym;\n  local: *;\n};\n"));
        assert!(script.contains("    c_sym;\n} LIB_1.0;\n"));
        assert!(script.ends_with("LIB_PRIVATE_1 {\n};\n"));
        assert_eq!(script.matches("local: *;").count(), 1);
    }

    #[test]
    fn exports_source_defines_and_versions_each_symbol() {
        let mut table = TABLE.to_string();
        table.push_str("flag data 1\n");
        let src = exports_source(&parse(&table).unwrap());
        for (name, node) in [
            ("a_sym", "LIB_1.0"),
            ("b_sym", "LIB_1.1"),
            ("c_sym", "LIB_1.1"),
        ] {
            assert!(src.contains(&format!("\"{name}:\",")), "{src}");
            assert!(src.contains(&format!("\".globl {name}\",")));
            assert!(src.contains(&format!("\".symver {name}, {name}@@{node}\",")));
        }
        assert!(src.contains("\"jmp {f0}\","));
        assert!(src.contains("    f2 = sym c_sym,\n"));
        assert!(!src.contains("f3 ="));
        assert!(src.contains("\".type flag,@object\","));
        assert!(src.contains("\".zero 1\","));
        assert!(src.contains("\".symver flag, flag@@LIB_PRIVATE_1\","));
        assert!(!src.contains("sym flag"));
        assert_eq!(src.matches(".symver").count(), 4);
    }

    #[test]
    fn rejects_bad_tables() {
        let bad = [
            ("orphan\n", 1),
            ("node A\nx\nx\n", 3),
            ("node A\nnode A\n", 2),
            ("node B A\n", 1),
            ("node A\n9x\n", 2),
            ("node A\nfoo bar\n", 2),
            ("node A\nx data 0\n", 2),
            ("node A\nx data\n", 2),
            ("node A;\n", 1),
            ("node A\nnode B A C\n", 2),
        ];
        for (text, line) in bad {
            let e = parse(text).expect_err(text);
            assert_eq!(e.line, line, "{text:?}: {e}");
        }
    }
}
