/**
 * @file cxlalloc.h
 * @brief C API of cxlalloc, a memory allocator for processes sharing one CXL memory device
 *        (or, on a machine without one, a directory in /dev/shm).
 *
 * Link with the static library (libcxlalloc.a, plus -lpthread -ldl -lm -lrt -lgcc_s) or the
 * shared library (libcxlalloc.so). C99; usable from C++.
 *
 * Usage:
 * @code
 *   cxl_config_t cfg;
 *   cxl_config_default(&cfg);
 *   cxl_heap_t* heap = cxl_heap_open_or_create("demo", &cfg);
 *   cxl_thread_t* t = cxl_thread_attach(heap);        // one per thread
 *   void* p = cxl_malloc(t, 64);
 *   uint64_t off = cxl_offset_of(heap, p);             // store this in shared memory
 *   cxl_free(t, cxl_pointer(heap, off));               // any thread of any process may free
 *   cxl_thread_detach(t);
 *   cxl_heap_close(heap);
 * @endcode
 *
 * Error reporting:
 *  - Every function except cxl_last_error(), cxl_last_error_message() and cxl_strerror() sets
 *    the calling thread's last error: CXL_OK on success, a CXL_E* code and a message on
 *    failure. Read them with cxl_last_error() and cxl_last_error_message().
 *  - Failures also set errno (successes leave it alone): the allocation functions (cxl_malloc,
 *    cxl_calloc, cxl_realloc, cxl_aligned_alloc) set ENOMEM for every failure except a bad
 *    argument (EINVAL); elsewhere CXL_ENOTFOUND sets ENOENT, CXL_EEXIST EEXIST,
 *    CXL_ESLOTS_EXHAUSTED EAGAIN, CXL_EACCES EACCES, CXL_ENOMEM and CXL_EUNSUPPORTED ENOMEM,
 *    CXL_EIO the operating system's error (EIO if none), CXL_ECORRUPT EIO, and every other
 *    code EINVAL.
 *  - A NULL handle is an error (CXL_EINVAL), never a crash. A dangling handle, or a handle used
 *    by two threads at once where that is not allowed, is undefined behaviour.
 *
 * Threads: a cxl_heap_t may be used by any number of threads at once. A cxl_thread_t may be
 * passed between threads but used by only one thread at a time.
 */
#ifndef CXLALLOC_H
#define CXLALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------ */
/* Error codes (identical to cxlalloc::ErrorCode; a Rust unit test keeps them in sync)          */
/* ------------------------------------------------------------------------------------------ */

/** Success. */
#define CXL_OK 0
/** Invalid argument: NULL handle or pointer argument, bad name or configuration, size 0,
 *  alignment not a power of two, root index out of range, offset 0. */
#define CXL_EINVAL 1
/** Out of memory: the heap's capacity, its backing store, or address space is exhausted; also
 *  a calloc whose count * size overflows. */
#define CXL_ENOMEM 2
/** No heap under that name or path. */
#define CXL_ENOTFOUND 3
/** A heap already exists under that name or path. */
#define CXL_EEXIST 4
/** The heap's files are corrupt, truncated, or not a cxlalloc heap. */
#define CXL_EBADHEAP 5
/** The heap's parameters differ from those expected (configuration or build constants). */
#define CXL_EMISMATCH 6
/** Every thread slot of the heap is leased. */
#define CXL_ESLOTS_EXHAUSTED 7
/** The pointer (or offset) does not belong to this heap's block data. */
#define CXL_EFOREIGN_POINTER 8
/** The pointer is inside a block, not at its start. */
#define CXL_EINTERIOR_POINTER 9
/** The block is already free. */
#define CXL_EDOUBLE_FREE 10
/** The pointer names no allocated block. */
#define CXL_ENOT_ALLOCATED 11
/** Heap metadata is inconsistent; run cxl_heap_check() or `cxlalloc check`. */
#define CXL_ECORRUPT 12
/** The request needs a capability not available yet: allocations above 512 KiB. */
#define CXL_EUNSUPPORTED 13
/** An operating-system call on the heap's files failed. */
#define CXL_EIO 14
/** The heap's files do not admit this user (their mode or owner), or have mixed owners or
 *  modes; the message names the file. Sets errno EACCES. */
#define CXL_EACCES 15

/** Number of application roots: valid root indexes are 0 .. CXL_ROOTS - 1. */
#define CXL_ROOTS 64

/** Coherence model: every access is hardware-coherent (plain atomics, no flushes). */
#define CXL_COHERENCE_FULL 0
/** Coherence model: only the HWcc regions (shared, claims, remote) are hardware-coherent;
 *  descriptors and records are written back and invalidated with cache-line flushes. Needs
 *  huge_capacity 0. */
#define CXL_COHERENCE_LIMITED 1
/** Coherence model: nothing is hardware-coherent; every CAS on an HWcc word goes through the
 *  device's mCAS unit, served here by the software device (`cxlalloc-mcasd --heap NAME`, or
 *  `--heap-dir PATH`) on the heap directory's `mcas-window`. Needs huge_capacity 0 and a
 *  file-backed heap (not cxl_heap_anonymous); cxl_thread_attach() fails with CXL_EIO while no
 *  device serves the window. */
#define CXL_COHERENCE_NONE 2

/* ------------------------------------------------------------------------------------------ */
/* Types                                                                                        */
/* ------------------------------------------------------------------------------------------ */

/** An open heap (opaque). Obtained from cxl_heap_create() and friends; released with
 *  cxl_heap_close(). Thread-safe. */
typedef struct cxl_heap cxl_heap_t;

/** A thread's lease on one of a heap's thread slots (opaque). Obtained from
 *  cxl_thread_attach(); released with cxl_thread_detach(). Used by one thread at a time. */
typedef struct cxl_thread cxl_thread_t;

/** Parameters of a new heap. Initialize with cxl_config_default(), then change fields. */
typedef struct cxl_config {
    /** Bound on small-bracket data (blocks up to 1 KiB), in bytes; rounded down to whole
     *  slabs. Default 16 GiB. */
    uint64_t small_capacity;
    /** Bound on large-bracket data (blocks up to 512 KiB), in bytes; rounded down to whole
     *  slabs. Default 64 GiB. */
    uint64_t large_capacity;
    /** Thread slots (1 ..= 4095): the most threads attached at once, over all processes.
     *  Default 1024. */
    uint32_t thread_slots;
    /** Slabs a thread takes when it extends the small heap. Default 8. */
    uint32_t small_batch;
    /** Slabs a thread takes when it extends the large heap. Default 1. */
    uint32_t large_batch;
    /** Empty slabs a thread keeps cached before returning extras to the heap. Default 8. */
    uint32_t cache_local;
    /** Coherence model of the device: CXL_COHERENCE_FULL, CXL_COHERENCE_LIMITED or
     *  CXL_COHERENCE_NONE (the latter two need huge_capacity 0). Default CXL_COHERENCE_FULL. */
    uint32_t coherence;
    /** Non-zero: reserve backing store as the heap grows, so a full /dev/shm is an
     *  out-of-memory error instead of SIGBUS. Default 1. */
    int commit_on_grow;
    /** Address space for allocations above 512 KiB, in bytes: a multiple of 1 GiB, 0 for
     *  none. Only address space; each huge allocation commits its own memory. Default 1 TiB. */
    uint64_t huge_capacity;
    /** Non-zero: crash recovery (threads log their metadata transitions, so a live process can
     *  adopt and repair the slot of a dead one). Zero only to measure its cost. Default 1. */
    int recovery;
    /** Permission bits of every file the heap creates, whatever the umask: 0 (the default) for
     *  0600, the creating user only; 0660 to share with the creator's group, 0666 with every
     *  local user. Only read and write bits; the owner's are required (else CXL_EINVAL). The
     *  heap directory gets the matching search bits. */
    uint32_t mode;
    /** Non-zero: an empty slab a thread gives back to the heap's global list first gives its
     *  pages back to the system (a hole punched in /dev/shm; device and anonymous heaps keep
     *  theirs). Zero keeps them, for a heap whose live set never shrinks. Default 1. */
    int return_pages;
    /** This host's number in a pod, 0 ..= 7, by which a process leases the requesters of a
     *  no-HWcc heap's mCAS window (required for a window carved in a device that several
     *  kernels share). Negative (the default, -1): none, CXLALLOC_HOST's if set. Giving both
     *  and having them differ, or a number above 7, is CXL_EINVAL; a number another kernel
     *  holds in the window is CXL_EINVAL too, the message naming both kernels. */
    int32_t host;
    /** Bytes of freed huge blocks' backing objects each thread slot keeps to reuse (no new
     *  object, no zeroing, the pages still there). Trimmed when the system runs short of
     *  memory and when the thread detaches; 0 keeps none. Default 2 GiB. */
    uint64_t huge_cache_bytes;
} cxl_config_t;

/* ------------------------------------------------------------------------------------------ */
/* Errors                                                                                       */
/* ------------------------------------------------------------------------------------------ */

/** The calling thread's last error: CXL_OK if its last cxlalloc call succeeded. */
int cxl_last_error(void);

/** A message describing the calling thread's last error (naming the function and the cause),
 *  or "success". Never NULL. Valid until the next cxlalloc call on this thread. */
const char* cxl_last_error_message(void);

/** A static description of error code `code` (any int). Never NULL. */
const char* cxl_strerror(int code);

/* ------------------------------------------------------------------------------------------ */
/* Configuration and heaps                                                                      */
/* ------------------------------------------------------------------------------------------ */

/** Fills `*cfg` with the default configuration. A NULL `cfg` sets CXL_EINVAL. */
void cxl_config_default(cxl_config_t* cfg);

/** Creates the heap called `name` in /dev/shm/cxlalloc.NAME. A name is 1 to 246 characters
 *  of [A-Za-z0-9._-], the first not '.' or '-' (never a path: see cxl_heap_create_at()).
 *  `cfg` NULL means the defaults. Returns NULL on failure (CXL_EEXIST if it exists,
 *  CXL_EINVAL for a bad name or configuration, ...). */
cxl_heap_t* cxl_heap_create(const char* name, const cxl_config_t* cfg);

/** Opens the existing heap called `name`, whatever its configuration. Returns NULL on failure
 *  (CXL_ENOTFOUND, CXL_EBADHEAP, CXL_EMISMATCH, ...). */
cxl_heap_t* cxl_heap_open(const char* name);

/** Opens the heap called `name`, creating it with `cfg` (NULL: defaults) if it does not exist.
 *  An existing heap must have been created with the same configuration (else NULL with
 *  CXL_EMISMATCH). */
cxl_heap_t* cxl_heap_open_or_create(const char* name, const cxl_config_t* cfg);

/** Removes the heap called `name`; processes that have it open keep using it whole (huge
 *  blocks included), and its storage goes when the last of them closes it. Returns CXL_OK or
 *  the error code (CXL_ENOTFOUND, ...). */
int cxl_heap_unlink(const char* name);

/** Creates a heap in the directory `path`, which must not exist; its final component may be
 *  any file name of up to 255 bytes. `cfg` NULL means the defaults. Returns NULL on failure. */
cxl_heap_t* cxl_heap_create_at(const char* path, const cxl_config_t* cfg);

/** Opens the heap in the directory `path`. Returns NULL on failure: CXL_EACCES when the
 *  heap's files do not admit this user or have mixed owners or modes (the message names the
 *  file), CXL_EBADHEAP when a region file belongs to another heap. */
cxl_heap_t* cxl_heap_open_at(const char* path);

/** As cxl_heap_open_or_create(), for the heap in the directory `path`. */
cxl_heap_t* cxl_heap_open_or_create_at(const char* path, const cxl_config_t* cfg);

/** Removes the heap directory `path`. Returns CXL_OK or the error code. */
int cxl_heap_unlink_at(const char* path);

/** Formats the device `path` for a heap with `cfg` (NULL: defaults) and opens it: a DAX
 *  device (/dev/daxX.Y), a PCI BAR's resource file (/sys/bus/pci/devices/.../resource2, e.g. a
 *  QEMU ivshmem device in a guest), or a plain file at least cxl_device_bytes(cfg) long. Every
 *  region and the huge range are carved at fixed offsets; every host then opens the same bytes
 *  with cxl_heap_open_device(). Whatever the device held is lost. Returns NULL on failure
 *  (CXL_EINVAL for a device too small or not a device, ...). */
cxl_heap_t* cxl_heap_format_device(const char* path, const cxl_config_t* cfg);

/** Opens the heap on the device `path`. Returns NULL on failure: CXL_ENOTFOUND for a device
 *  never formatted, CXL_EBADHEAP for a damaged or foreign header or label or a device shorter
 *  than its carving, CXL_EMISMATCH for a carving this build does not make. */
cxl_heap_t* cxl_heap_open_device(const char* path);

/** Bytes a device needs for a heap with `cfg` (NULL: defaults); 0 (error set) for an invalid
 *  configuration. */
uint64_t cxl_device_bytes(const cxl_config_t* cfg);

/** A private heap in anonymous memory, usable by this process only (tests, tools). `cfg` NULL
 *  means the defaults. Returns NULL on failure. */
cxl_heap_t* cxl_heap_anonymous(const cxl_config_t* cfg);

/** Releases a heap handle. Thread handles attached to the heap stay valid, and so does the
 *  memory they allocate, until the last of them is detached. NULL is a no-op. */
void cxl_heap_close(cxl_heap_t* heap);

/* ------------------------------------------------------------------------------------------ */
/* Threads                                                                                      */
/* ------------------------------------------------------------------------------------------ */

/** Leases a thread slot of `heap` for the calling thread. Returns NULL on failure
 *  (CXL_ESLOTS_EXHAUSTED when every slot is leased; CXL_EIO for a CXL_COHERENCE_NONE heap
 *  whose mCAS window no device serves). */
cxl_thread_t* cxl_thread_attach(cxl_heap_t* heap);

/** Releases a thread slot (its cached empty slabs go back to the heap). Blocks allocated
 *  through it stay allocated. NULL is a no-op. */
void cxl_thread_detach(cxl_thread_t* thread);

/* ------------------------------------------------------------------------------------------ */
/* Allocation                                                                                   */
/* ------------------------------------------------------------------------------------------ */

/** Allocates `size` bytes, uninitialized. Blocks above 512 KiB come from the huge heap: each
 *  has its own backing object, mapped in other processes on first touch. Returns NULL on
 *  failure: size 0 (CXL_EINVAL, errno EINVAL), heap or huge address space full (CXL_ENOMEM,
 *  errno ENOMEM), size above 512 KiB in a heap created with huge_capacity 0 (CXL_EUNSUPPORTED,
 *  errno ENOMEM). */
void* cxl_malloc(cxl_thread_t* thread, size_t size);

/** Allocates `count * size` zeroed bytes. Returns NULL on failure, as cxl_malloc(); a product
 *  that overflows size_t is CXL_ENOMEM with errno ENOMEM (as glibc calloc). */
void* cxl_calloc(cxl_thread_t* thread, size_t count, size_t size);

/** Resizes the block `ptr` to `size` bytes, keeping the first min(old, new) bytes; may return
 *  `ptr` itself when its size class already fits. `ptr` NULL: same as cxl_malloc(thread, size).
 *  `size` 0: frees `ptr` and returns NULL (last error CXL_OK if the free succeeded). `ptr` is
 *  validated before anything is copied; on any failure NULL is returned and `ptr` is untouched
 *  and still allocated (a refused `ptr` gives CXL_EFOREIGN_POINTER etc. with errno EINVAL; an
 *  allocation failure gives the codes of cxl_malloc()). */
void* cxl_realloc(cxl_thread_t* thread, void* ptr, size_t size);

/** C11 aligned_alloc: allocates `size` bytes aligned to `alignment`, which must be a power of
 *  two (else NULL with CXL_EINVAL, errno EINVAL). `size` need not be a multiple of
 *  `alignment`. Alignments up to 512 KiB are served without padding (every block of the size
 *  class chosen is aligned); larger ones, up to 1 GiB, come from the huge heap; beyond that
 *  NULL with CXL_EINVAL, errno EINVAL, and a message naming the 1 GiB limit. */
void* cxl_aligned_alloc(cxl_thread_t* thread, size_t alignment, size_t size);

/** Frees a block allocated by any thread of any process from this heap. `ptr` NULL is a no-op
 *  returning CXL_OK. Returns CXL_OK, or the error code when the free is refused, in which case
 *  the heap is untouched: CXL_EFOREIGN_POINTER (not from this heap), CXL_EINTERIOR_POINTER (not
 *  the start of a block), CXL_EDOUBLE_FREE, CXL_ENOT_ALLOCATED, CXL_ECORRUPT. A huge block
 *  (above 512 KiB) freed twice is CXL_EDOUBLE_FREE while its owner has not reclaimed it, and
 *  after that when this process made the first free (one of its last 64 huge frees of this
 *  heap); otherwise nothing records it any more and it is CXL_ENOT_ALLOCATED. */
int cxl_free(cxl_thread_t* thread, void* ptr);

/** Detectable allocation: like cxl_malloc(), and stores the block's heap offset into `*dest`,
 *  an empty (0) word of this heap (inside a block, or a root's address) that the application's
 *  structure owns. If the process dies at any point, cxl_thread_adopt()/cxl_heap_recover()
 *  complete the store or leave the block free: no block is lost. `dest` is checked before it
 *  is read or written: it must be an 8-aligned word of this heap that this process can use (a
 *  root, a word of a slab below the heap's current length, or a word inside a live huge block),
 *  else NULL with CXL_EINVAL and nothing is allocated or written; `*dest` not 0: NULL with
 *  CXL_EINVAL. The block holding `dest` must stay allocated until the call returns. */
void* cxl_malloc_into(cxl_thread_t* thread, size_t size, uint64_t* dest);

/** Detectable free: clears `*dest` (the heap offset of an allocated block), then frees the
 *  block; recovery finishes both if the process dies. Errors as cxl_free(); `*dest` holding 0:
 *  CXL_ENOT_ALLOCATED; `dest` not a word this process can use (as for cxl_malloc_into()):
 *  CXL_EFOREIGN_POINTER. `dest` and the block are validated before `*dest` is touched. */
int cxl_free_from(cxl_thread_t* thread, uint64_t* dest);

/** The usable size of the allocated block `ptr` (its size class, at least the size asked
 *  for). Returns 0 for `ptr` NULL (not an error) and on error (codes as cxl_free()). */
size_t cxl_usable_size(cxl_thread_t* thread, const void* ptr);

/** Limited and no-HWcc heaps: the sending side of handing `len` bytes at `ptr` to another host
 *  (writes them back to memory, keeping them cached, then fences); call it before telling the
 *  other host about the block. A no-op in the full model. The range must stay within the slab
 *  (or the huge block starting at `ptr`) that holds `ptr`. Returns CXL_OK; CXL_EINVAL for a
 *  NULL thread or `ptr`, or a range past the pointer's slab or block; the codes of cxl_free()
 *  for a pointer outside the heap's blocks. Nothing is flushed on error. */
int cxl_write_back(cxl_thread_t* thread, const void* ptr, size_t len);

/** The receiving side of cxl_write_back(): evicts this host's cached copies of `len` bytes at
 *  `ptr` (then fences) before reading or freeing what another host wrote there. Same rules and
 *  codes as cxl_write_back(). */
int cxl_invalidate(cxl_thread_t* thread, const void* ptr, size_t len);

/* ------------------------------------------------------------------------------------------ */
/* Crash recovery                                                                               */
/* ------------------------------------------------------------------------------------------ */

/** Takes over thread slot `slot`, whose holder process died, and repairs it: finishes or undoes
 *  the operation it was in, rebuilds its lists, completes its detectable allocation or free and
 *  clears the dead process's hazards, while other threads go on. The caller then holds the
 *  slot (cxl_thread_detach() releases it). cxl_thread_attach() adopts a dead slot by itself when
 *  no slot is free. Errors: CXL_EINVAL (no such slot, not leased, holder alive),
 *  CXL_ESLOTS_EXHAUSTED (another thread adopted it first), CXL_EUNSUPPORTED (heap created
 *  with recovery off). */
cxl_thread_t* cxl_thread_adopt(cxl_heap_t* heap, unsigned slot);

/** Adopts, repairs and releases every slot whose holder died; returns how many. */
size_t cxl_heap_recover(cxl_heap_t* heap);

/** Drops this process's mappings of huge blocks (above 512 KiB) that are no longer live (freed
 *  by any process), so that their memory is given back now rather than at this process's next
 *  huge allocation or free: for a process that only reads huge blocks. Stores how many mappings
 *  it dropped in `*dropped_out` (if non-NULL). Returns CXL_OK, or CXL_EINVAL for a NULL heap or
 *  a handle a forked child inherited (the child must open the heap itself). */
int cxl_heap_drop_stale_huge(const cxl_heap_t* heap, size_t* dropped_out);

/** Reclaims freed huge blocks that no process maps any more but nobody has reclaimed (their
 *  owners idle or gone), as `cxlalloc recover` does. Stores how many backing objects of held
 *  slots it removed in `*released_out` (if non-NULL). Returns CXL_OK, or CXL_EINVAL for a NULL
 *  heap or a handle a forked child inherited. */
int cxl_heap_sweep_huge(const cxl_heap_t* heap, size_t* released_out);
/** One host of a heap (an entry of its host table): a kernel's pid namespace that opened it. */
typedef struct cxl_host_info {
    /** The entry's index. */
    uint16_t id;
    /** Whether it is the calling process's own host. */
    bool own;
    /** Whether an operator declared it dead (its recovery may still be under way). */
    bool declared_dead;
    /** Its domain's fingerprint: with `id`, the name cxl_heap_recover_host() takes, which a
     *  later claim of the entry by another host cannot take over. */
    uint64_t domain;
    /** Seconds since its last heartbeat by this host's clock; -1 if the beat lies ahead of
     *  it. Advice only: an idle host is silent too. */
    int64_t silent_for;
    /** Its name (`uname -n` when it registered), NUL-terminated. */
    char name[40];
} cxl_host_info_t;

/** Writes up to `capacity` hosts of the heap to `out` and returns how many hosts there are
 *  (call again with more room when that exceeds `capacity`). 0 on error (CXL_EINVAL for a NULL
 *  heap, or a NULL `out` with a non-zero capacity). */
size_t cxl_heap_hosts(const cxl_heap_t* heap, cxl_host_info_t* out, size_t capacity);

/** Declares host `id` of `domain` (both from cxl_heap_hosts()) dead and recovers all it held:
 *  its slots are adopted, repaired and released, the hazard sets of its processes given back,
 *  its entry freed once nothing names it. Run it only once the host is down (fenced): a live
 *  process of a host declared dead would share its slots with their adopters. Stores the
 *  number of slots recovered in `*recovered_out` if not NULL. Returns CXL_OK; CXL_EINVAL for a
 *  NULL heap, a free entry, the caller's own host, or an entry that now names another domain
 *  (it was freed and claimed by another host: list the hosts again); CXL_EUNSUPPORTED for a
 *  heap created without recovery. Running it again finishes a recovery cut short. */
int cxl_heap_recover_host(const cxl_heap_t* heap, uint16_t id, uint64_t domain, size_t* recovered_out);

/* ------------------------------------------------------------------------------------------ */
/* Offsets and roots                                                                            */
/* ------------------------------------------------------------------------------------------ */

/** The offset of `ptr` from the heap's base: a value that names the same bytes in every
 *  process mapping the heap. `ptr` must point into the heap's block data. Returns 0 on error
 *  (CXL_EINVAL for NULL, CXL_EFOREIGN_POINTER outside the heap); 0 is never a valid offset. */
uint64_t cxl_offset_of(const cxl_heap_t* heap, const void* ptr);

/** The address of `offset` in this process's mapping of the heap, checked to lie in the
 *  heap's block data. Returns NULL on error (CXL_EINVAL for offset 0, CXL_EFOREIGN_POINTER
 *  out of range). */
void* cxl_pointer(const cxl_heap_t* heap, uint64_t offset);

/** Loads application root `index` (< CXL_ROOTS): a 64-bit word every process sees, typically
 *  holding an offset. Acquire ordering. Returns 0 on error (CXL_EINVAL); a root may also hold
 *  0, so check cxl_last_error() when that matters. */
uint64_t cxl_root_load(const cxl_heap_t* heap, unsigned index);

/** C11 atomic_compare_exchange_strong on application root `index` (acquire-release). Returns
 *  true if the root held `*expected` and now holds `desired`; otherwise false, with the
 *  root's current value written to `*expected`. Invalid arguments (NULL heap or `expected`,
 *  `index` >= CXL_ROOTS) also return false, with CXL_EINVAL and `*expected` unchanged; a
 *  retry loop should therefore use a valid index. */
bool cxl_root_cas(const cxl_heap_t* heap, unsigned index, uint64_t* expected, uint64_t desired);

/* ------------------------------------------------------------------------------------------ */
/* Checker                                                                                      */
/* ------------------------------------------------------------------------------------------ */

/** Checks every list, descriptor and counter of the heap. Run it on a quiescent heap (no
 *  thread allocating or freeing). Stores the number of problems found in `*problems_out` if
 *  it is not NULL. Returns CXL_OK, or CXL_EINVAL for a NULL heap. For the full report, run
 *  `cxlalloc check`. */
int cxl_heap_check(const cxl_heap_t* heap, size_t* problems_out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CXLALLOC_H */
