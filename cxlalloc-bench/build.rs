//! Build script: the baselines that need system libraries (docs/design.md §12.3).
//!
//! - Boost.Interprocess (Debian `libboost-dev`, header-only): when
//!   `boost/interprocess/managed_mapped_file.hpp` is found, compiles `cshim/boost_shim.cpp`
//!   and sets `cfg(have_boost)`.
//! - PMDK libpmemobj (Debian `libpmemobj-dev`): when `libpmemobj.h` is found and the C compiler
//!   finds `libpmemobj.so`, links it and sets `cfg(have_pmdk)`.
//!
//! Without them the crate still builds; the `boost` and `pmdk` allocators then report that they
//! were built without their library. `CXLALLOC_BENCH_NO_BOOST=1` / `CXLALLOC_BENCH_NO_PMDK=1`
//! force that (to check the fallback builds). A failed shim compile is a warning, not an error.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the headers are looked for (the C compiler's default system include directories).
const INCLUDE_DIRS: [&str; 2] = ["/usr/include", "/usr/local/include"];

const BOOST_HEADER: &str = "boost/interprocess/managed_mapped_file.hpp";
const PMDK_HEADER: &str = "libpmemobj.h";
const BOOST_SHIM: &str = "cshim/boost_shim.cpp";

fn main() {
    println!("cargo:rustc-check-cfg=cfg(have_boost)");
    println!("cargo:rustc-check-cfg=cfg(have_pmdk)");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={BOOST_SHIM}");
    println!("cargo:rerun-if-env-changed=CXLALLOC_BENCH_NO_BOOST");
    println!("cargo:rerun-if-env-changed=CXLALLOC_BENCH_NO_PMDK");
    // Installing a Debian package rewrites dpkg's status file: watching it (one file, unlike a
    // header that may not exist yet) re-runs this script after `apt-get install libboost-dev`.
    if Path::new("/var/lib/dpkg/status").exists() {
        println!("cargo:rerun-if-changed=/var/lib/dpkg/status");
    }

    if env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        println!("cargo:warning=baselines boost and pmdk are built only for Linux");
        return;
    }
    boost();
    pmdk();
}

/// `name` under one of [`INCLUDE_DIRS`], watched for changes when found.
fn find_header(name: &str) -> Option<PathBuf> {
    let found = INCLUDE_DIRS.iter().map(|d| Path::new(d).join(name)).find(|p| p.is_file())?;
    println!("cargo:rerun-if-changed={}", found.display());
    Some(found)
}

fn disabled(var: &str) -> bool {
    env::var_os(var).is_some_and(|v| !v.is_empty() && v != "0")
}

fn boost() {
    if disabled("CXLALLOC_BENCH_NO_BOOST") {
        println!("cargo:warning=boost baseline disabled by CXLALLOC_BENCH_NO_BOOST");
        return;
    }
    if find_header(BOOST_HEADER).is_none() {
        println!("cargo:warning=boost baseline not built: {BOOST_HEADER} not found (apt-get install libboost-dev)");
        return;
    }
    let result = cc::Build::new()
        .cpp(true)
        .std("c++14")
        .file(BOOST_SHIM)
        // Boost.Interprocess is header-only; it uses POSIX shm_open (librt) and process-shared
        // pthread mutexes (both in libc since glibc 2.34; the libraries are stubs there).
        .try_compile("cxlalloc_boost_shim");
    match result {
        Ok(()) => {
            println!("cargo:rustc-link-lib=rt");
            println!("cargo:rustc-link-lib=pthread");
            println!("cargo:rustc-cfg=have_boost");
        }
        Err(e) => println!("cargo:warning=boost baseline not built: {BOOST_SHIM} failed to compile: {e}"),
    }
}

fn pmdk() {
    if disabled("CXLALLOC_BENCH_NO_PMDK") {
        println!("cargo:warning=pmdk baseline disabled by CXLALLOC_BENCH_NO_PMDK");
        return;
    }
    if find_header(PMDK_HEADER).is_none() {
        println!("cargo:warning=pmdk baseline not built: {PMDK_HEADER} not found (apt-get install libpmemobj-dev)");
        return;
    }
    if !linker_finds("libpmemobj.so") {
        println!("cargo:warning=pmdk baseline not built: the C compiler does not find libpmemobj.so (apt-get install libpmemobj-dev)");
        return;
    }
    println!("cargo:rustc-link-lib=pmemobj");
    println!("cargo:rustc-cfg=have_pmdk");
}

/// Whether the C compiler resolves library file `file` (`cc -print-file-name` prints the bare
/// name back when it does not).
fn linker_finds(file: &str) -> bool {
    let Ok(compiler) = cc::Build::new().cargo_metadata(false).try_get_compiler() else {
        return false;
    };
    let Ok(out) = Command::new(compiler.path()).arg(format!("-print-file-name={file}")).output() else {
        return false;
    };
    let printed = String::from_utf8_lossy(&out.stdout);
    let printed = printed.trim();
    out.status.success() && printed != file && Path::new(printed).is_file()
}
