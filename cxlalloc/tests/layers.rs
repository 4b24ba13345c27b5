//! The layer order written in `lib.rs` holds: every module refers only to modules below it (a
//! `crate::` path in code, comments excluded), and no two files of the crate refer to each other
//! in a cycle (a directory module's `mod.rs` and its own children excepted: the parent declares
//! and re-exports them).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers of `lib.rs`, lowest first, as one sequence: a module may use only those before it.
/// `huge::view` is the one submodule placed apart from its parent: the fault handler reaches it
/// through `mem`.
const ORDER: &[&str] = &[
    "sync",
    "word",
    "class",
    "error",
    "offset",
    "identity", // layer 1
    "protocol", // layer 2
    "persist",  // layer 3
    "layout",
    "map",
    "mcas",
    "coherence",
    "backing", // layer 4
    "host",
    "huge::view",
    "mem", // layer 5
    "crash",
    "slab",
    "huge", // layer 6
    "signal",
    "check",
    "stats",
    "recovery", // layer 7
    "heap",
    "survey",
    "ffi",
    "internal", // layer 8
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every library source file as (module path, code without comments).
fn files() -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read src dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut paths = Vec::new();
    walk(&src(), &mut paths);
    paths
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n != "lib.rs"))
        .map(|p| {
            let rel = p.strip_prefix(src()).expect("under src").with_extension("");
            let mut parts: Vec<String> = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
            if parts.last().is_some_and(|l| l == "mod") {
                parts.pop();
            }
            let code: String = std::fs::read_to_string(&p)
                .expect("read source")
                .lines()
                .map(|l| l.split("//").next().unwrap_or(""))
                .collect::<Vec<_>>()
                .join("\n");
            (parts.join("::"), code)
        })
        .collect()
}

/// The modules (file-level, longest match) that `code` names through `crate::` paths.
fn references(code: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        let path: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':').collect();
        let segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
        // `use crate::x::{a, b}` names x's children a and b too.
        let mut candidates = vec![segments.clone()];
        if rest[path.len()..].starts_with('{') {
            let inner: String = rest[path.len() + 1..].chars().take_while(|c| *c != '}').collect();
            for item in inner.split(',') {
                let head = item.trim().split("::").next().unwrap_or("").trim().to_string();
                let mut s: Vec<&str> = segments.clone();
                s.push(Box::leak(head.into_boxed_str()));
                candidates.push(s);
            }
        }
        for segs in candidates {
            if let Some(m) = (1..=segs.len()).rev().map(|n| segs[..n].join("::")).find(|m| modules.contains(m)) {
                out.insert(m);
            }
        }
    }
    out
}

/// Where a module sits in [`ORDER`]: its own entry, or its nearest listed ancestor's.
fn rank(module: &str) -> usize {
    let mut m = module.to_string();
    loop {
        if let Some(i) = ORDER.iter().position(|o| *o == m) {
            return i;
        }
        match m.rfind("::") {
            Some(at) => m.truncate(at),
            None => panic!("module {module} is not in the layer order: add it to ORDER and to lib.rs"),
        }
    }
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let files = files();
    let modules: BTreeSet<String> = files.iter().map(|(m, _)| m.clone()).collect();
    files.iter().map(|(m, code)| (m.clone(), references(code, &modules))).collect()
}

fn is_family(a: &str, b: &str) -> bool {
    a.starts_with(&format!("{b}::")) || b.starts_with(&format!("{a}::"))
}

#[test]
fn every_module_uses_only_lower_layers() {
    let mut upward = Vec::new();
    for (from, tos) in graph() {
        for to in tos {
            if !is_family(&from, &to) && rank(&to) > rank(&from) {
                upward.push(format!("{from} -> {to}"));
            }
        }
    }
    assert!(upward.is_empty(), "upward imports against lib.rs's layer order: {upward:#?}");
}

#[test]
fn no_two_modules_depend_on_each_other() {
    let graph = graph();
    // Depth-first search for a cycle, skipping parent/child edges.
    fn visit(
        at: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = stack.iter().position(|s| s == at) {
            return Some(stack[i..].to_vec());
        }
        if !done.insert(at.to_string()) {
            return None;
        }
        stack.push(at.to_string());
        for to in graph.get(at).into_iter().flatten() {
            if to != at && !is_family(at, to) {
                if let Some(cycle) = visit(to, graph, stack, done) {
                    return Some(cycle);
                }
            }
        }
        stack.pop();
        None
    }
    let mut done = BTreeSet::new();
    for m in graph.keys() {
        let cycle = visit(m, &graph, &mut Vec::new(), &mut done);
        assert!(cycle.is_none(), "dependency cycle: {cycle:?}");
    }
}
