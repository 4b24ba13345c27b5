//! Source-tree rule (docs/design.md §13): every atomic, fence and cell comes from `crate::sync`, so the
//! loom models see every protocol.

use std::path::Path;

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn only_the_sync_facade_names_std_atomics_or_cells() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let banned = ["std::sync::atomic", "core::sync::atomic", "UnsafeCell"];
    let mut offenders = Vec::new();
    for file in files.iter().filter(|f| !f.ends_with("sync.rs")) {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            if banned.iter().any(|b| line.contains(b)) {
                offenders.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(offenders.is_empty(), "use crate::sync instead:\n{}", offenders.join("\n"));
}
