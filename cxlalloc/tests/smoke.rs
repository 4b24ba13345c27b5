use cxlalloc::{Config, Heap};

#[test]
fn anonymous_heap_allocates_and_frees_every_size() {
    let heap = Heap::anonymous(&Config::with_capacity(256 << 20)).unwrap();
    let t = heap.attach().unwrap();
    let mut ptrs = Vec::new();
    for size in (1..=4096).chain([100_000, 524_288]) {
        let p = t.alloc(size).unwrap();
        unsafe { p.as_ptr().write_bytes(0xab, size) };
        ptrs.push(p);
    }
    for p in ptrs {
        t.free(p).unwrap();
    }
    let r = heap.check();
    assert!(r.is_clean(), "{r}");
}

#[test]
fn shm_heap_round_trip() {
    let name = format!("smoke-{}", std::process::id());
    let _ = Heap::unlink(&name);
    let heap = Heap::create(&name, &Config::with_capacity(256 << 20)).unwrap();
    let t = heap.attach().unwrap();
    let mut v = Vec::new();
    for i in 0..100_000 {
        v.push(t.alloc(8 + i % 200).unwrap());
    }
    for p in v {
        t.free(p).unwrap();
    }
    let r = heap.check();
    assert!(r.is_clean(), "{r}");
    println!("{r}");
    drop(t);
    Heap::unlink(&name).unwrap();
}
