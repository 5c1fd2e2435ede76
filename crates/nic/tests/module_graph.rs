//! The device's layering, checked on its sources (docs/architecture.md §4): the datapath
//! owns no thread, socket or clock, and the modules that make up a device do not import
//! each other in a circle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The modules of a device: the resource tables (`state`), the command handlers (`cmds`),
/// the control-plane thread (`ctrl`), the device object (`device`), the sans-IO datapath
/// (`datapath`), its driver (`engine`) and the process's devices (`registry`).
const LAYERS: &[&str] = &[
    "state", "cmds", "ctrl", "device", "datapath", "engine", "registry",
];

/// `src/NAME.rs` and its child modules' files (`src/NAME/*.rs`), with comments removed.
fn code(name: &str) -> String {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let path = src.join(format!("{name}.rs"));
    let mut text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    if let Ok(dir) = std::fs::read_dir(src.join(name)) {
        let mut children: Vec<_> = dir.filter_map(|e| e.ok().map(|e| e.path())).collect();
        children.sort();
        for c in children
            .iter()
            .filter(|c| c.extension().is_some_and(|e| e == "rs"))
        {
            text += &std::fs::read_to_string(c).unwrap_or_else(|e| panic!("{c:?}: {e}"));
        }
    }
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The modules of `LAYERS` that `name`'s code names as `crate::MODULE`.
fn uses(name: &str) -> BTreeSet<&'static str> {
    let c = code(name);
    LAYERS
        .iter()
        .copied()
        .filter(|m| *m != name && c.contains(&format!("crate::{m}")))
        .collect()
}

/// A cycle in `graph`, if there is one (depth-first search).
fn cycle(graph: &BTreeMap<&'static str, BTreeSet<&'static str>>) -> Option<Vec<&'static str>> {
    fn visit(
        g: &BTreeMap<&'static str, BTreeSet<&'static str>>,
        n: &'static str,
        path: &mut Vec<&'static str>,
        done: &mut BTreeSet<&'static str>,
    ) -> Option<Vec<&'static str>> {
        if let Some(i) = path.iter().position(|p| *p == n) {
            let mut c = path[i..].to_vec();
            c.push(n);
            return Some(c);
        }
        if done.contains(n) {
            return None;
        }
        path.push(n);
        for m in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(g, m, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n);
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(graph, n, &mut Vec::new(), &mut done))
}

#[test]
fn the_device_modules_import_each_other_without_a_circle() {
    let graph: BTreeMap<_, _> = LAYERS.iter().map(|m| (*m, uses(m))).collect();
    assert_eq!(cycle(&graph), None, "import graph: {graph:?}");
    // The checker itself finds a circle where there is one.
    let mut bad = graph.clone();
    bad.entry("state").or_default().insert("engine");
    assert!(cycle(&bad).is_some());
}

#[test]
fn the_datapath_owns_no_thread_socket_or_clock() {
    let c = code("datapath");
    for banned in [
        "std::thread",
        "thread::spawn",
        "Instant",
        "SystemTime",
        "UdpSocket",
        "crate::sys",
        "libc::",
        "unsafe",
    ] {
        assert!(!c.contains(banned), "datapath.rs uses {banned}");
    }
}
