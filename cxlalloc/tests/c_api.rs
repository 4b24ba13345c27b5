//! The C API, exercised from C: compiles `tests/c/api_test.c` against `include/cxlalloc.h`,
//! links it with the static and with the shared library this crate builds, and runs it.
//!
//! `cargo test` builds the library for this test as an rlib only — it does not emit the
//! `staticlib` / `cdylib` artifacts — and a copy left by an earlier `cargo build` may be stale.
//! So the test runs `cargo build -p cxlalloc --lib` itself (a no-op when up to date) into the
//! same target directory and profile as this test executable, then links what that produced.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Once;

const MANIFEST_DIR: &str = env!("CARGO_MANIFEST_DIR");

/// Libraries the Rust staticlib needs from the system (`rustc --print native-static-libs`).
const NATIVE_LIBS: &[&str] = &["-lpthread", "-ldl", "-lm", "-lrt", "-lgcc_s", "-lutil", "-lc"];

/// `target/<profile>`: the parent of the `deps/` directory holding this test executable.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps dir");
    deps.parent().expect("profile dir").to_path_buf()
}

/// Builds the static and shared libraries (once per test process) and returns the path of
/// `file` (`libcxlalloc.a` / `libcxlalloc.so`). Into a target directory of its own: the
/// library's outputs carry no hash in their names (it is also a cdylib), and a `-p cxlalloc`
/// build may resolve its dependencies' features differently from the workspace build running
/// this test, so building into the shared `target/` would replace the `libcxlalloc.rlib` that
/// other crates of that build (cxlkv, the bench's doctests) were compiled against.
fn library(file: &str) -> PathBuf {
    static BUILD: Once = Once::new();
    let profile = profile_dir();
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("c-api-lib");
    let name = profile.file_name().and_then(|n| n.to_str()).unwrap_or("debug").to_owned();
    BUILD.call_once(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-p", "cxlalloc", "--lib", "--target-dir"]).arg(&target).current_dir(MANIFEST_DIR);
        // `target/debug` is the dev (and test) profile; other directories are named after theirs.
        if name != "debug" {
            cmd.args(["--profile", &name]);
        }
        let out = cmd.output().expect("run cargo build");
        assert!(out.status.success(), "{}", show("cargo build -p cxlalloc --lib", &out));
    });
    let lib = target.join(&name).join(file);
    assert!(lib.exists(), "{} not found after cargo build", lib.display());
    lib
}

fn compiler() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".into())
}

/// A fresh path for a build product of this run.
fn scratch(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()))
}

fn show(what: &str, out: &Output) -> String {
    format!(
        "{what}: {}\n--- stdout ---\n{}--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Compiles api_test.c with `link` arguments and returns the executable's path.
fn compile_api_test(exe_name: &str, link: &[&str]) -> PathBuf {
    let manifest = Path::new(MANIFEST_DIR);
    let exe = scratch(exe_name);
    let out = Command::new(compiler())
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O1", "-g", "-I"])
        .arg(manifest.join("include"))
        .arg(manifest.join("tests/c/api_test.c"))
        .args(link)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("run the C compiler");
    assert!(out.status.success(), "{}", show("compiling api_test.c", &out));
    exe
}

fn run_api_test(exe: &Path, env: &[(&str, &Path)]) {
    let mut cmd = Command::new(exe);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run api_test");
    let report = show("api_test", &out);
    println!("{report}");
    assert!(out.status.success(), "{report}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("checks passed"), "{report}");
    let _ = std::fs::remove_file(exe);
}

#[test]
fn c_program_passes_against_static_library() {
    let lib = library("libcxlalloc.a");
    let lib = lib.to_str().expect("utf-8 path");
    let mut link = vec![lib];
    link.extend_from_slice(NATIVE_LIBS);
    let exe = compile_api_test("api_test_static", &link);
    run_api_test(&exe, &[]);
}

#[test]
fn c_program_passes_against_shared_library() {
    let lib = library("libcxlalloc.so");
    let dir = lib.parent().expect("library dir");
    let dir_str = dir.to_str().expect("utf-8 path");
    let link_dir = format!("-L{dir_str}");
    let exe = compile_api_test("api_test_shared", &[&link_dir, "-lcxlalloc", "-lpthread"]);
    // The executable must really load libcxlalloc.so, found through LD_LIBRARY_PATH.
    let ldd = Command::new("ldd").arg(&exe).env("LD_LIBRARY_PATH", dir).output();
    if let Ok(ldd) = ldd {
        let text = String::from_utf8_lossy(&ldd.stdout);
        assert!(text.contains("libcxlalloc.so"), "not dynamically linked:\n{text}");
    }
    run_api_test(&exe, &[("LD_LIBRARY_PATH", dir)]);
}

#[test]
fn header_compiles_as_strict_c99_and_as_cpp() {
    let header = Path::new(MANIFEST_DIR).join("include/cxlalloc.h");
    let out = Command::new(compiler())
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-fsyntax-only", "-x", "c"])
        .arg(&header)
        .output()
        .expect("run the C compiler");
    assert!(out.status.success(), "{}", show("cxlalloc.h as C99", &out));

    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    match Command::new(&cxx)
        .args(["-std=c++11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-fsyntax-only", "-x", "c++"])
        .arg(&header)
        .output()
    {
        Ok(out) => assert!(out.status.success(), "{}", show("cxlalloc.h as C++", &out)),
        Err(e) => println!("skipping the C++ check: cannot run {cxx}: {e}"),
    }
}
