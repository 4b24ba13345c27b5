//! Links `libcxlalloc_preload.so` so that it exports malloc's interface and nothing else
//! (docs/design.md §17). rustc exports every `#[no_mangle]` function of every crate a cdylib
//! links, so the `cxl_*` C API of `cxlalloc` would be exported too: a preloaded program could
//! call it, or collide with a `cxl_*` of its own. `--exclude-libs ALL` keeps every symbol that
//! comes from a linked archive (each upstream crate's rlib, `cxlalloc` included) out of the
//! dynamic symbol table; this crate's own functions (`malloc` and friends) stay exported.
//! `tests/preload.rs` checks the exported list.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--exclude-libs,ALL");
    println!("cargo:rustc-link-lib=static:-bundle=gcc_eh");
}
