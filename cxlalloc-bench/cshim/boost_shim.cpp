// C interface to Boost.Interprocess `managed_mapped_file`, for the `boost` baseline of
// cxlalloc-bench (src/allocator/boost.rs declares the same functions). The segment is a file in
// the run directory, so it lives on the same run root as cxlalloc's heap; on a tmpfs such as /dev/shm a mapped file is what a POSIX shared-memory
// object is (`managed_shared_memory` opens /dev/shm/NAME), with the same segment manager.
//
// Rules of this file:
// - Every function is `extern "C"` and `noexcept`: no C++ exception ever reaches Rust. Each body
//   catches everything and turns it into a null pointer or a -1 return, with the exception's text
//   copied into the caller's `err` buffer where there is one. (Should something slip through
//   anyway, `noexcept` makes it std::terminate, never unwinding into Rust frames.)
// - A `cxb_segment` is one process's mapping of a segment; it is created and destroyed only
//   here. The segment's allocator serializes every call with its one interprocess mutex, so any
//   number of threads may call the allocation functions on the same `cxb_segment`.
// - Built by build.rs with the `cc` crate, header-only against Debian's libboost-dev.

#include <boost/interprocess/creation_tags.hpp>
#include <boost/interprocess/file_mapping.hpp>
#include <boost/interprocess/managed_mapped_file.hpp>

#include <sys/mman.h>

#include <cstddef>
#include <cstring>
#include <exception>
#include <new>

namespace bip = boost::interprocess;

namespace {

// Copies `msg` into `err` (capacity `err_len`, always NUL-terminated); no-op without a buffer.
void set_error(char* err, std::size_t err_len, const char* msg) noexcept {
  if (err == nullptr || err_len == 0) {
    return;
  }
  std::strncpy(err, msg, err_len - 1);
  err[err_len - 1] = '\0';
}

}  // namespace

// One process's mapping of a managed segment file (opaque to Rust).
struct cxb_segment {
  bip::managed_mapped_file shm;

  cxb_segment(bip::create_only_t tag, const char* path, std::size_t bytes) : shm(tag, path, bytes) {
    advise_huge_pages();
  }
  cxb_segment(bip::open_only_t tag, const char* path) : shm(tag, path) { advise_huge_pages(); }

  // Asks for transparent huge pages on the whole mapping, as mimalloc does for its arenas and
  // cxlalloc for its huge blocks: on a tmpfs mounted `huge=advise` (the harness's huge-page run
  // root) only advised mappings get 2 MiB pages, so without it the baseline would run on 4 KiB
  // pages where cxlalloc's blocks do not. (The segment manager's header, written while the
  // segment is created, is faulted before the advice.) Errors are ignored: it is an
  // optimization, and a kernel without THP refuses it.
  void advise_huge_pages() noexcept { (void)madvise(shm.get_address(), shm.get_size(), MADV_HUGEPAGE); }
};

extern "C" {

// Creates the segment file `name` (a path) of `bytes` bytes and maps it; fails if it exists.
// Returns null on error, with the reason in `err`.
cxb_segment* cxb_create(const char* name, std::size_t bytes, char* err, std::size_t err_len) noexcept {
  try {
    return new cxb_segment(bip::create_only, name, bytes);
  } catch (const std::exception& e) {
    set_error(err, err_len, e.what());
  } catch (...) {
    set_error(err, err_len, "unknown C++ exception creating the segment");
  }
  return nullptr;
}

// Maps the existing segment file `name`. Returns null on error, with the reason in `err`.
cxb_segment* cxb_open(const char* name, char* err, std::size_t err_len) noexcept {
  try {
    return new cxb_segment(bip::open_only, name);
  } catch (const std::exception& e) {
    set_error(err, err_len, e.what());
  } catch (...) {
    set_error(err, err_len, "unknown C++ exception opening the segment");
  }
  return nullptr;
}

// Unmaps `seg` in this process (the segment itself stays until cxb_remove).
void cxb_close(cxb_segment* seg) noexcept {
  try {
    delete seg;
  } catch (...) {
    // The destructor only unmaps and closes; nothing useful to report.
  }
}

// Allocates `bytes` from the segment; null when it is full (or on any error).
void* cxb_allocate(cxb_segment* seg, std::size_t bytes) noexcept {
  try {
    return seg->shm.allocate(bytes, std::nothrow);
  } catch (...) {
    return nullptr;
  }
}

// Returns `ptr` (from cxb_allocate on this segment, in any process) to the segment.
// 0 on success, -1 if Boost threw (e.g. the mutex could not be taken).
int cxb_deallocate(cxb_segment* seg, void* ptr) noexcept {
  try {
    seg->shm.deallocate(ptr);
    return 0;
  } catch (...) {
    return -1;
  }
}

// The address the segment is mapped at in this process.
void* cxb_base(const cxb_segment* seg) noexcept {
  return seg->shm.get_address();
}

// The segment's size in bytes.
std::size_t cxb_size(const cxb_segment* seg) noexcept {
  return seg->shm.get_size();
}

// Stores the segment's free bytes in `*out`. 0 on success, -1 on error.
int cxb_free_memory(const cxb_segment* seg, std::size_t* out) noexcept {
  try {
    *out = seg->shm.get_free_memory();
    return 0;
  } catch (...) {
    return -1;
  }
}

// Runs Boost's own checks: `*sane` = check_sanity() (the free-block tree is well formed),
// `*all_freed` = all_memory_deallocated(). 0 on success, -1 on error.
int cxb_check(cxb_segment* seg, int* sane, int* all_freed) noexcept {
  try {
    *sane = seg->shm.check_sanity() ? 1 : 0;
    *all_freed = seg->shm.all_memory_deallocated() ? 1 : 0;
    return 0;
  } catch (...) {
    return -1;
  }
}

// Removes the segment file `name` (its mappings stay valid until unmapped). 1 if removed, 0 if not.
int cxb_remove(const char* name) noexcept {
  try {
    return bip::file_mapping::remove(name) ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

}  // extern "C"
