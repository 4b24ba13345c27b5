/*
 * Conformance test of the C API (cxlalloc.h), using nothing but the header.
 *
 * Run by tests/c_api.rs against both the static and the shared library. Every check prints
 * what failed (with the library's last error) and exits non-zero. Not a benchmark.
 *
 * Decisions this test pins down:
 *  - cxl_malloc(t, 0) returns NULL with CXL_EINVAL / errno EINVAL.
 *  - cxl_calloc with an overflowing count * size returns NULL with CXL_ENOMEM / errno ENOMEM.
 *  - sizes and alignments above 512 KiB come from the huge heap; beyond its address space
 *    NULL with CXL_ENOMEM / errno ENOMEM.
 */
#define _XOPEN_SOURCE 700
#define _GNU_SOURCE /* unshare(2), for a second host in the host test */

#include "cxlalloc.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* The Rust side asserts the same layout (src/ffi.rs). */
_Static_assert(sizeof(cxl_config_t) == 72, "cxl_config_t size");
_Static_assert(offsetof(cxl_config_t, recovery) == 48, "cxl_config_t.recovery");
_Static_assert(offsetof(cxl_config_t, thread_slots) == 16, "cxl_config_t.thread_slots");
_Static_assert(offsetof(cxl_config_t, coherence) == 32, "cxl_config_t.coherence");
_Static_assert(offsetof(cxl_config_t, commit_on_grow) == 36, "cxl_config_t.commit_on_grow");
_Static_assert(offsetof(cxl_config_t, huge_capacity) == 40, "cxl_config_t.huge_capacity");
_Static_assert(offsetof(cxl_config_t, mode) == 52, "cxl_config_t.mode");
_Static_assert(offsetof(cxl_config_t, return_pages) == 56, "cxl_config_t.return_pages");
_Static_assert(offsetof(cxl_config_t, host) == 60, "cxl_config_t.host");
_Static_assert(offsetof(cxl_config_t, huge_cache_bytes) == 64, "cxl_config_t.huge_cache_bytes");
_Static_assert(sizeof(cxl_host_info_t) == 64, "cxl_host_info_t size");
_Static_assert(offsetof(cxl_host_info_t, domain) == 8, "cxl_host_info_t.domain");
_Static_assert(offsetof(cxl_host_info_t, name) == 24, "cxl_host_info_t.name");

static int checks;

/* Removed at exit, so that a failed check leaves nothing behind in /dev/shm or /tmp. */
static char heap_name[64];
static char at_dir[64];
static char at_path[96];
static char dev_path[96];

static void cleanup(void) {
    if (dev_path[0] != '\0') (void)unlink(dev_path);
    if (heap_name[0] != '\0') (void)cxl_heap_unlink(heap_name);
    if (at_path[0] != '\0') (void)cxl_heap_unlink_at(at_path);
    if (at_dir[0] != '\0') (void)rmdir(at_dir);
}

#define CHECK(cond)                                                                            \
    do {                                                                                       \
        checks++;                                                                              \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "%s:%d: check failed: %s\n  last error %d (%s): %s\n", __FILE__,   \
                    __LINE__, #cond, cxl_last_error(), cxl_strerror(cxl_last_error()),         \
                    cxl_last_error_message());                                                 \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

/* `call` failed with last error `code`, and errno `err`. */
#define CHECK_ERR(call, code, err)                                                             \
    do {                                                                                       \
        errno = 0;                                                                             \
        (void)(call);                                                                          \
        CHECK(cxl_last_error() == (code));                                                     \
        CHECK(errno == (err));                                                                 \
        CHECK(strlen(cxl_last_error_message()) > 0);                                           \
    } while (0)

static void fill(void* p, size_t n, unsigned seed) {
    unsigned char* b = (unsigned char*)p;
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(seed + i * 31u);
}

static int holds(const void* p, size_t n, unsigned seed) {
    const unsigned char* b = (const unsigned char*)p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != (unsigned char)(seed + i * 31u)) return 0;
    return 1;
}

static void test_config_defaults(void) {
    cxl_config_t cfg;
    memset(&cfg, 0xff, sizeof cfg);
    cxl_config_default(&cfg);
    CHECK(cxl_last_error() == CXL_OK);
    CHECK(cfg.small_capacity == (uint64_t)16 << 30);
    CHECK(cfg.large_capacity == (uint64_t)64 << 30);
    CHECK(cfg.thread_slots == 1024);
    CHECK(cfg.small_batch == 8);
    CHECK(cfg.large_batch == 1);
    CHECK(cfg.cache_local == 8);
    CHECK(cfg.coherence == CXL_COHERENCE_FULL);
    CHECK(cfg.commit_on_grow == 1);
    CHECK(cfg.return_pages == 1);
    CHECK(cfg.huge_cache_bytes == (uint64_t)2 << 30);
    CHECK_ERR(cxl_config_default(NULL), CXL_EINVAL, EINVAL);
}

/* Bytes of backing store the data file of the heap at `path` holds. */
static uint64_t data_bytes(const char* path) {
    char data[128];
    snprintf(data, sizeof data, "%s/data", path);
    struct stat st;
    CHECK(stat(data, &st) == 0);
    return (uint64_t)st.st_blocks * 512;
}

/* cfg.return_pages: a thread that frees its blocks and detaches sends its empty slabs (no
 * local cache) to the global list; with return_pages their pages leave the data file, without
 * it they stay. Returns {bytes when full, bytes once drained}. */
static void pages_after_drain(int return_pages, uint64_t* full, uint64_t* drained) {
    char dir[64];
    snprintf(dir, sizeof dir, "/dev/shm/cxlalloc-capi-pages-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    char path[96];
    snprintf(path, sizeof path, "%s/heap", dir);
    cxl_config_t cfg;
    cxl_config_default(&cfg);
    cfg.small_capacity = cfg.large_capacity = (uint64_t)64 << 20;
    cfg.huge_capacity = 0;
    cfg.cache_local = 0;
    cfg.return_pages = return_pages;
    cxl_heap_t* heap = cxl_heap_create_at(path, &cfg);
    CHECK(heap != NULL);
    cxl_thread_t* t = cxl_thread_attach(heap);
    CHECK(t != NULL);
    /* 64 slabs of 64-byte blocks (512 to a 32 KiB slab), every byte written. */
    enum { BLOCKS = 64 * 512 };
    void** blocks = malloc(BLOCKS * sizeof *blocks);
    CHECK(blocks != NULL);
    for (int i = 0; i < BLOCKS; i++) {
        blocks[i] = cxl_malloc(t, 64);
        CHECK(blocks[i] != NULL);
        memset(blocks[i], 0x5a, 64);
    }
    *full = data_bytes(path);
    for (int i = 0; i < BLOCKS; i++) CHECK(cxl_free(t, blocks[i]) == CXL_OK);
    free(blocks);
    cxl_thread_detach(t);
    *drained = data_bytes(path);
    cxl_heap_close(heap);
    CHECK(cxl_heap_unlink_at(path) == CXL_OK);
    CHECK(rmdir(dir) == 0);
}

static void test_return_pages(void) {
    uint64_t full, drained;
    pages_after_drain(1, &full, &drained);
    CHECK(full >= (uint64_t)64 * (32 << 10));
    CHECK(drained < full / 8);
    pages_after_drain(0, &full, &drained);
    CHECK(full >= (uint64_t)64 * (32 << 10));
    CHECK(drained >= full);
}

static void test_errors_without_heap(const char* name) {
    cxl_config_t cfg;
    cxl_config_default(&cfg);
    CHECK_ERR(cxl_heap_open(name), CXL_ENOTFOUND, ENOENT);
    CHECK(strstr(cxl_last_error_message(), "cxl_heap_open") != NULL);
    CHECK_ERR(cxl_heap_create(NULL, &cfg), CXL_EINVAL, EINVAL);
    CHECK_ERR(cxl_heap_create("a/b", &cfg), CXL_EINVAL, EINVAL);
    CHECK_ERR(cxl_heap_create(".hidden", &cfg), CXL_EINVAL, EINVAL);
    CHECK_ERR(cxl_heap_unlink(name), CXL_ENOTFOUND, ENOENT);
    CHECK(cxl_heap_unlink(NULL) == CXL_EINVAL);
    CHECK_ERR(cxl_thread_attach(NULL), CXL_EINVAL, EINVAL);
    CHECK_ERR(cxl_malloc(NULL, 8), CXL_EINVAL, EINVAL);
    CHECK(cxl_free(NULL, NULL) == CXL_EINVAL);
    CHECK_ERR(cxl_offset_of(NULL, &cfg), CXL_EINVAL, EINVAL);
    CHECK_ERR(cxl_heap_check(NULL, NULL), CXL_EINVAL, EINVAL);
    cxl_heap_close(NULL);
    CHECK(cxl_last_error() == CXL_OK);
    cxl_thread_detach(NULL);
    CHECK(cxl_last_error() == CXL_OK);
    CHECK(strcmp(cxl_last_error_message(), "success") == 0);
    CHECK(strlen(cxl_strerror(CXL_EDOUBLE_FREE)) > 0);
    CHECK(strlen(cxl_strerror(12345)) > 0);

    /* Invalid configurations. */
    cfg.thread_slots = 0;
    CHECK_ERR(cxl_heap_create(name, &cfg), CXL_EINVAL, EINVAL);
    cxl_config_default(&cfg);
    cfg.coherence = 77;
    CHECK_ERR(cxl_heap_create(name, &cfg), CXL_EINVAL, EINVAL);
    CHECK_ERR(cxl_heap_open(name), CXL_ENOTFOUND, ENOENT); /* nothing was left behind */
}

static void test_malloc_free_sizes(cxl_thread_t* t) {
    enum { MAX = 64 };
    void* ptrs[MAX];
    size_t sizes[MAX];
    int n = 0;
    for (size_t size = 8; size <= 512 * 1024; size *= 2) {
        size_t variants[3] = {size - 1, size, size + 1};
        for (int v = 0; v < 3 && n < MAX; v++) {
            size_t s = variants[v];
            if (s == 0 || s > 512 * 1024) continue;
            void* p = cxl_malloc(t, s);
            CHECK(p != NULL);
            CHECK(cxl_last_error() == CXL_OK);
            CHECK(((uintptr_t)p & 7) == 0);
            CHECK(cxl_usable_size(t, p) >= s);
            fill(p, s, (unsigned)n);
            ptrs[n] = p;
            sizes[n] = s;
            n++;
        }
    }
    for (int i = 0; i < n; i++) {
        CHECK(holds(ptrs[i], sizes[i], (unsigned)i));
        CHECK(cxl_free(t, ptrs[i]) == CXL_OK);
    }

    /* Many small blocks at once, freed in a different order. */
    enum { MANY = 20000 };
    void** many = (void**)malloc(MANY * sizeof(void*));
    CHECK(many != NULL);
    for (int i = 0; i < MANY; i++) {
        many[i] = cxl_malloc(t, 8 + (size_t)(i % 300));
        CHECK(many[i] != NULL);
        *(int*)many[i] = i;
    }
    for (int i = 0; i < MANY; i += 2) CHECK(*(int*)many[i] == i && cxl_free(t, many[i]) == CXL_OK);
    for (int i = 1; i < MANY; i += 2) CHECK(*(int*)many[i] == i && cxl_free(t, many[i]) == CXL_OK);
    free(many);

    /* Size 0, and sizes above 512 KiB: the huge heap, up to its address space. */
    CHECK_ERR(cxl_malloc(t, 0), CXL_EINVAL, EINVAL);
    void* huge = cxl_malloc(t, (size_t)64 << 20);
    CHECK(huge != NULL);
    memset(huge, 0x5a, (size_t)64 << 20);
    CHECK(cxl_usable_size(t, huge) == (size_t)64 << 20);
    CHECK(cxl_free(t, huge) == CXL_OK);
    CHECK(cxl_free(t, huge) != CXL_OK);
    CHECK_ERR(cxl_malloc(t, SIZE_MAX), CXL_ENOMEM, ENOMEM);
}

static void test_calloc(cxl_thread_t* t) {
    /* Dirty a block, free it, and calloc the same class: the block must come back zeroed. */
    for (size_t size = 16; size <= 256 * 1024; size *= 4) {
        void* dirty = cxl_malloc(t, size);
        CHECK(dirty != NULL);
        memset(dirty, 0xab, size);
        CHECK(cxl_free(t, dirty) == CXL_OK);
        unsigned char* z = (unsigned char*)cxl_calloc(t, size / 8, 8);
        CHECK(z != NULL);
        for (size_t i = 0; i < size; i++) CHECK(z[i] == 0);
        CHECK(cxl_free(t, z) == CXL_OK);
    }
    /* count * size overflows: NULL with CXL_ENOMEM / ENOMEM. */
    CHECK_ERR(cxl_calloc(t, SIZE_MAX / 2 + 1, 4), CXL_ENOMEM, ENOMEM);
    CHECK(cxl_calloc(t, SIZE_MAX, SIZE_MAX) == NULL);
    CHECK_ERR(cxl_calloc(t, 0, 8), CXL_EINVAL, EINVAL);
}

static void test_realloc(cxl_thread_t* t) {
    /* Growth preserves contents. */
    size_t size = 16;
    unsigned char* p = (unsigned char*)cxl_malloc(t, size);
    CHECK(p != NULL);
    fill(p, size, 7);
    size_t steps[] = {100, 1000, 4096, 10000, 100000, 300000, 512 * 1024};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        unsigned char* q = (unsigned char*)cxl_realloc(t, p, steps[i]);
        CHECK(q != NULL);
        CHECK(holds(q, size, 7));
        CHECK(cxl_usable_size(t, q) >= steps[i]);
        fill(q, steps[i], 7);
        p = q;
        size = steps[i];
    }
    /* Shrinking keeps the prefix. */
    unsigned char* s = (unsigned char*)cxl_realloc(t, p, 24);
    CHECK(s != NULL);
    CHECK(holds(s, 24, 7));
    p = s;
    /* Within the same size class the block stays put. */
    CHECK(cxl_realloc(t, p, 23) == p);

    /* Failure (more than the huge address space): p is untouched and still allocated. */
    CHECK_ERR(cxl_realloc(t, p, (size_t)1 << 50), CXL_ENOMEM, ENOMEM);
    CHECK(cxl_realloc(t, p, (size_t)1 << 50) == NULL);
    CHECK(holds(p, 24, 7));
    /* Growing into the huge heap and back keeps the prefix. */
    unsigned char* big = (unsigned char*)cxl_realloc(t, p, 600 * 1024);
    CHECK(big != NULL && holds(big, 24, 7));
    p = (unsigned char*)cxl_realloc(t, big, 24);
    CHECK(p != NULL && holds(p, 24, 7));
    CHECK(cxl_usable_size(t, p) >= 24);

    /* Hand-over flushes: within the block's slab; a foreign pointer or a range past the slab
     * is refused. */
    CHECK(cxl_write_back(t, p, 24) == CXL_OK && cxl_invalidate(t, p + 8, 16) == CXL_OK);
    CHECK_ERR(cxl_invalidate(t, p, (size_t)1 << 40), CXL_EINVAL, EINVAL);
    CHECK_ERR(cxl_write_back(t, NULL, 8), CXL_EINVAL, EINVAL);

    /* A foreign pointer is refused before anything is read through it. */
    int on_stack = 42;
    CHECK_ERR(cxl_write_back(t, &on_stack, 4), CXL_EFOREIGN_POINTER, EINVAL);
    CHECK_ERR(cxl_realloc(t, &on_stack, 64), CXL_EFOREIGN_POINTER, EINVAL);
    CHECK(on_stack == 42);
    /* An interior pointer too. */
    CHECK_ERR(cxl_realloc(t, p + 8, 64), CXL_EINTERIOR_POINTER, EINVAL);

    /* realloc(p, 0) frees p and returns NULL. */
    errno = 0;
    CHECK(cxl_realloc(t, p, 0) == NULL);
    CHECK(cxl_last_error() == CXL_OK);
    CHECK(errno == 0);
    CHECK(cxl_usable_size(t, p) == 0 && cxl_last_error() != CXL_OK);

    /* realloc(NULL, n) allocates. */
    void* fresh = cxl_realloc(t, NULL, 200);
    CHECK(fresh != NULL);
    CHECK(cxl_usable_size(t, fresh) >= 200);
    CHECK(cxl_free(t, fresh) == CXL_OK);
}

static void test_aligned_alloc(cxl_thread_t* t) {
    size_t sizes[] = {1, 8, 24, 100, 1000, 5000};
    for (size_t align = 16; align <= 65536; align *= 2) {
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            void* p = cxl_aligned_alloc(t, align, sizes[i]);
            CHECK(p != NULL);
            CHECK(((uintptr_t)p & (align - 1)) == 0);
            CHECK(cxl_usable_size(t, p) >= sizes[i]);
            memset(p, 0x5a, sizes[i]);
            CHECK(cxl_free(t, p) == CXL_OK);
        }
    }
    /* Argument order is C11's (alignment, size): swapped, 24 would be a bad alignment. */
    void* p = cxl_aligned_alloc(t, 64, 24);
    CHECK(p != NULL && ((uintptr_t)p & 63) == 0);
    CHECK(cxl_free(t, p) == CXL_OK);
    CHECK_ERR(cxl_aligned_alloc(t, 24, 64), CXL_EINVAL, EINVAL);
    CHECK_ERR(cxl_aligned_alloc(t, 0, 64), CXL_EINVAL, EINVAL);
    CHECK_ERR(cxl_aligned_alloc(t, 3, 64), CXL_EINVAL, EINVAL);
    CHECK_ERR(cxl_aligned_alloc(t, 64, 0), CXL_EINVAL, EINVAL);
    /* Large alignments (up to 1 GiB) and sizes come from the huge heap. */
    p = cxl_aligned_alloc(t, (size_t)1 << 30, 600 * 1024);
    CHECK(p != NULL && ((uintptr_t)p & (((size_t)1 << 30) - 1)) == 0);
    CHECK(cxl_free(t, p) == CXL_OK);
    CHECK_ERR(cxl_aligned_alloc(t, (size_t)1 << 31, 64), CXL_EINVAL, EINVAL);
    CHECK(strstr(cxl_last_error_message(), "1 GiB") != NULL);
    CHECK(strstr(cxl_last_error_message(), "power of two") == NULL);

    /* Small alignments, and the largest: one whole 512 KiB slab. */
    size_t more[] = {1, 2, 4, 8, 131072, 262144, 524288};
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) {
        p = cxl_aligned_alloc(t, more[i], 100);
        CHECK(p != NULL && ((uintptr_t)p & (more[i] - 1)) == 0);
        CHECK(cxl_free(t, p) == CXL_OK);
    }
    p = cxl_aligned_alloc(t, (size_t)1 << 20, 100);
    CHECK(p != NULL && ((uintptr_t)p & (((size_t)1 << 20) - 1)) == 0);
    CHECK(cxl_free(t, p) == CXL_OK);
}

static void test_bad_frees(cxl_thread_t* t) {
    /* free(NULL) is a no-op. */
    CHECK(cxl_free(t, NULL) == CXL_OK);
    CHECK(cxl_last_error() == CXL_OK);

    /* Double free, with a neighbour keeping the slab in use. */
    void* keep = cxl_malloc(t, 48);
    void* a = cxl_malloc(t, 48);
    CHECK(keep != NULL && a != NULL);
    CHECK(cxl_free(t, a) == CXL_OK);
    errno = 0;
    CHECK(cxl_free(t, a) == CXL_EDOUBLE_FREE);
    CHECK(cxl_last_error() == CXL_EDOUBLE_FREE);
    CHECK(errno == EINVAL);

    /* A huge block too, although its owner (this thread) reclaimed it at the first free. */
    void* h = cxl_malloc(t, (size_t)2 << 20);
    CHECK(h != NULL);
    CHECK(cxl_free(t, h) == CXL_OK);
    CHECK(cxl_free(t, h) == CXL_EDOUBLE_FREE);

    /* Interior pointer: refused, the block stays allocated. */
    char* b = (char*)cxl_malloc(t, 64);
    CHECK(b != NULL);
    CHECK(cxl_free(t, b + 8) == CXL_EINTERIOR_POINTER);
    CHECK(cxl_usable_size(t, b + 1) == 0 && cxl_last_error() == CXL_EINTERIOR_POINTER);
    CHECK(cxl_usable_size(t, b) >= 64);
    CHECK(cxl_free(t, b) == CXL_OK);

    /* Foreign pointers: a stack address and a libc block. */
    int on_stack = 0;
    CHECK(cxl_free(t, &on_stack) == CXL_EFOREIGN_POINTER);
    CHECK(strstr(cxl_last_error_message(), "cxl_free") != NULL);
    void* libc_block = malloc(64);
    CHECK(libc_block != NULL);
    CHECK(cxl_free(t, libc_block) == CXL_EFOREIGN_POINTER);
    CHECK(cxl_usable_size(t, libc_block) == 0 && cxl_last_error() == CXL_EFOREIGN_POINTER);
    free(libc_block);
    CHECK(cxl_usable_size(t, NULL) == 0 && cxl_last_error() == CXL_OK);

    CHECK(cxl_free(t, keep) == CXL_OK);
}

static void test_detectable(cxl_heap_t* heap, cxl_thread_t* t) {
    /* The application's words live in the heap: here, a table block. */
    uint64_t* table = (uint64_t*)cxl_calloc(t, 4, sizeof(uint64_t));
    CHECK(table != NULL);
    void* p = cxl_malloc_into(t, 200, &table[1]);
    CHECK(p != NULL);
    CHECK(table[1] == cxl_offset_of(heap, p));
    CHECK(cxl_free_from(t, &table[1]) == CXL_OK);
    CHECK(table[1] == 0);
    CHECK(cxl_free_from(t, &table[1]) == CXL_ENOT_ALLOCATED);

    /* A destination outside the heap is refused before anything is allocated or written. */
    uint64_t on_stack = 7;
    CHECK_ERR(cxl_malloc_into(t, 200, &on_stack), CXL_EINVAL, EINVAL);
    CHECK(on_stack == 7);
    CHECK(cxl_free_from(t, &on_stack) == CXL_EFOREIGN_POINTER && on_stack == 7);
    CHECK_ERR(cxl_malloc_into(t, 200, (uint64_t*)((char*)&table[2] + 1)), CXL_EINVAL, EINVAL);
    CHECK(cxl_free_from(t, (uint64_t*)((char*)&table[2] + 1)) == CXL_EFOREIGN_POINTER);

    /* Words the heap's span holds but this process cannot touch are refused the same way, not
     * a SIGSEGV: beyond the heap's length (128 MiB into the 256 MiB small span), in the huge span
     * where no block lies, and in a freed huge block. */
    uint64_t* beyond = (uint64_t*)((char*)table + ((size_t)128 << 20));
    uint64_t* huge = (uint64_t*)cxl_malloc(t, (size_t)4 << 20);
    CHECK(huge != NULL);
    uint64_t* no_block = (uint64_t*)((char*)huge + ((size_t)64 << 20));
    uint64_t* freed = (uint64_t*)cxl_malloc(t, (size_t)4 << 20);
    CHECK(freed != NULL);
    CHECK(cxl_free(t, freed) == CXL_OK);
    uint64_t* unusable[] = {beyond, no_block, freed + 1};
    for (size_t i = 0; i < sizeof unusable / sizeof unusable[0]; i++) {
        CHECK_ERR(cxl_malloc_into(t, 200, unusable[i]), CXL_EINVAL, EINVAL);
        CHECK_ERR(cxl_malloc_into(t, (size_t)2 << 20, unusable[i]), CXL_EINVAL, EINVAL);
        CHECK(cxl_free_from(t, unusable[i]) == CXL_EFOREIGN_POINTER);
    }
    /* A word inside a live huge block is a valid destination. */
    huge[3] = 0;
    void* q = cxl_malloc_into(t, 200, &huge[3]);
    CHECK(q != NULL && huge[3] == cxl_offset_of(heap, q));
    CHECK(cxl_free_from(t, &huge[3]) == CXL_OK && huge[3] == 0);
    CHECK(cxl_free(t, huge) == CXL_OK);

    /* Nothing to adopt: slot out of range, and a slot held by a live thread. */
    CHECK_ERR(cxl_thread_adopt(heap, 1u << 20), CXL_EINVAL, EINVAL);
    CHECK(cxl_heap_recover(heap) == 0 && cxl_last_error() == CXL_OK);
    CHECK(cxl_free(t, table) == CXL_OK);
}

static void test_offsets(cxl_heap_t* heap, cxl_thread_t* t, const char* name) {
    char* p = (char*)cxl_malloc(t, 128);
    CHECK(p != NULL);
    strcpy(p, "shared by offset");
    uint64_t off = cxl_offset_of(heap, p);
    CHECK(off != 0);
    CHECK(cxl_pointer(heap, off) == p);
    CHECK(cxl_offset_of(heap, p + 5) == off + 5);

    /* A second mapping of the same heap (as another process would have) sees the same bytes
     * at the same offset. */
    cxl_heap_t* again = cxl_heap_open(name);
    CHECK(again != NULL);
    char* q = (char*)cxl_pointer(again, off);
    CHECK(q != NULL);
    CHECK(strcmp(q, "shared by offset") == 0);
    CHECK(cxl_offset_of(again, q) == off);
    cxl_heap_close(again);

    int on_stack = 0;
    CHECK_ERR(cxl_offset_of(heap, &on_stack), CXL_EFOREIGN_POINTER, EINVAL);
    CHECK_ERR(cxl_offset_of(heap, NULL), CXL_EINVAL, EINVAL);
    CHECK_ERR(cxl_pointer(heap, 0), CXL_EINVAL, EINVAL);
    CHECK_ERR(cxl_pointer(heap, UINT64_MAX), CXL_EFOREIGN_POINTER, EINVAL);
    CHECK_ERR(cxl_pointer(heap, 8), CXL_EFOREIGN_POINTER, EINVAL); /* the header */
    CHECK_ERR(cxl_pointer(NULL, off), CXL_EINVAL, EINVAL);
    CHECK(cxl_free(t, cxl_pointer(heap, off)) == CXL_OK);
}

static void test_roots(cxl_heap_t* heap, cxl_thread_t* t) {
    void* p = cxl_malloc(t, 32);
    CHECK(p != NULL);
    uint64_t off = cxl_offset_of(heap, p);
    CHECK(cxl_root_load(heap, 3) == 0 && cxl_last_error() == CXL_OK);
    uint64_t expected = 0;
    CHECK(cxl_root_cas(heap, 3, &expected, off));
    CHECK(cxl_last_error() == CXL_OK);
    CHECK(cxl_root_load(heap, 3) == off);
    expected = 0;
    CHECK(!cxl_root_cas(heap, 3, &expected, 1234));
    CHECK(cxl_last_error() == CXL_OK);
    CHECK(expected == off);
    CHECK(cxl_root_cas(heap, 3, &expected, 0));
    CHECK(cxl_root_load(heap, 3) == 0);
    expected = 0;
    CHECK(cxl_root_cas(heap, CXL_ROOTS - 1, &expected, 5)); /* the last index is valid */
    CHECK(cxl_root_load(heap, CXL_ROOTS - 1) == 5);
    CHECK(!cxl_root_cas(heap, CXL_ROOTS - 1, &expected, 0) && expected == 5);
    CHECK(cxl_root_cas(heap, CXL_ROOTS - 1, &expected, 0));

    expected = 99;
    CHECK_ERR(cxl_root_cas(heap, CXL_ROOTS, &expected, 1), CXL_EINVAL, EINVAL);
    CHECK(expected == 99);
    CHECK(!cxl_root_cas(heap, CXL_ROOTS, &expected, 1));
    CHECK_ERR(cxl_root_cas(heap, 0, NULL, 1), CXL_EINVAL, EINVAL);
    CHECK_ERR(cxl_root_cas(NULL, 0, &expected, 1), CXL_EINVAL, EINVAL);
    CHECK_ERR(cxl_root_load(heap, CXL_ROOTS), CXL_EINVAL, EINVAL);
    CHECK(cxl_root_load(heap, 100000) == 0);
    CHECK(cxl_free(t, p) == CXL_OK);
}

/* ---- A second thread: remote frees in both directions. ---- */

enum { REMOTE = 5000 };

struct remote_job {
    cxl_heap_t* heap;
    void** from_main; /* allocated by main, freed here */
    void** to_main;   /* allocated here, freed by main */
    const char* failure;
};

static void* remote_worker(void* arg) {
    struct remote_job* job = (struct remote_job*)arg;
    cxl_thread_t* t = cxl_thread_attach(job->heap);
    if (t == NULL) {
        job->failure = "attach failed in worker";
        return NULL;
    }
    for (int i = 0; i < REMOTE; i++) {
        if (*(int*)job->from_main[i] != i) {
            job->failure = "worker saw wrong contents";
            return NULL;
        }
        if (cxl_free(t, job->from_main[i]) != CXL_OK) {
            job->failure = "remote free failed in worker";
            return NULL;
        }
    }
    for (int i = 0; i < REMOTE; i++) {
        job->to_main[i] = cxl_malloc(t, 16 + (size_t)(i % 2000));
        if (job->to_main[i] == NULL) {
            job->failure = "malloc failed in worker";
            return NULL;
        }
        *(int*)job->to_main[i] = -i;
    }
    /* The last error is per thread: an error here does not show in main's. */
    (void)cxl_malloc(t, 0);
    if (cxl_last_error() != CXL_EINVAL) {
        job->failure = "worker's last error not set";
        return NULL;
    }
    cxl_thread_detach(t);
    return NULL;
}

static void test_remote_free(cxl_heap_t* heap, cxl_thread_t* t) {
    static void* from_main[REMOTE];
    static void* to_main[REMOTE];
    for (int i = 0; i < REMOTE; i++) {
        from_main[i] = cxl_malloc(t, 8 + (size_t)(i % 3000));
        CHECK(from_main[i] != NULL);
        *(int*)from_main[i] = i;
    }
    struct remote_job job = {heap, from_main, to_main, NULL};
    pthread_t worker;
    CHECK(pthread_create(&worker, NULL, remote_worker, &job) == 0);
    CHECK(pthread_join(worker, NULL) == 0);
    if (job.failure != NULL) {
        fprintf(stderr, "remote worker: %s\n", job.failure);
        exit(1);
    }
    CHECK(cxl_last_error() == CXL_OK);
    for (int i = 0; i < REMOTE; i++) {
        CHECK(*(int*)to_main[i] == -i);
        CHECK(cxl_free(t, to_main[i]) == CXL_OK);
    }
    /* Blocks the worker freed can be allocated again here. */
    for (int i = 0; i < REMOTE; i++) {
        from_main[i] = cxl_malloc(t, 8 + (size_t)(i % 3000));
        CHECK(from_main[i] != NULL);
    }
    for (int i = 0; i < REMOTE; i++) CHECK(cxl_free(t, from_main[i]) == CXL_OK);
}

/* The child of test_huge_maintenance: it maps the parent's huge block by reading it, waits
 * until the parent has freed it, then drops its stale mapping. Exits with the number of the
 * step that went wrong (never through exit(), whose cleanup would unlink the parent's heap). */
static void huge_reader(const cxl_heap_t* inherited, const char* name, uint64_t off, int ready, int freed) {
    cxl_heap_t* own = cxl_heap_open(name);
    if (own == NULL) _exit(2);
    const unsigned char* p = (const unsigned char*)cxl_pointer(own, off);
    if (p == NULL || p[0] != 0x3c || p[((size_t)2 << 20) - 1] != 0x3c) _exit(3);
    char c = 1;
    if (write(ready, &c, 1) != 1 || read(freed, &c, 1) != 1) _exit(4);
    /* A handle inherited across fork is refused, with a code and a message. */
    size_t n = 99;
    if (cxl_heap_drop_stale_huge(inherited, &n) != CXL_EINVAL || n != 99) _exit(5);
    if (cxl_last_error() != CXL_EINVAL || strstr(cxl_last_error_message(), "fork") == NULL) _exit(6);
    /* Our own handle drops the one mapping of the freed block. */
    if (cxl_heap_drop_stale_huge(own, &n) != CXL_OK || n != 1 || cxl_last_error() != CXL_OK) _exit(7);
    if (cxl_heap_drop_stale_huge(own, &n) != CXL_OK || n != 0) _exit(8);
    cxl_heap_close(own);
    _exit(0);
}

static void test_huge_maintenance(cxl_heap_t* heap, cxl_thread_t* t, const char* name) {
    size_t n = 99;
    CHECK_ERR(cxl_heap_drop_stale_huge(NULL, &n), CXL_EINVAL, EINVAL);
    CHECK(strstr(cxl_last_error_message(), "cxl_heap_drop_stale_huge") != NULL);
    CHECK_ERR(cxl_heap_sweep_huge(NULL, &n), CXL_EINVAL, EINVAL);
    CHECK(strstr(cxl_last_error_message(), "cxl_heap_sweep_huge") != NULL);
    CHECK(n == 99);
    /* Nothing stale: nothing dropped, nothing swept; the counts are optional. */
    CHECK(cxl_heap_drop_stale_huge(heap, &n) == CXL_OK && n == 0);
    CHECK(cxl_heap_sweep_huge(heap, NULL) == CXL_OK);
    CHECK(cxl_last_error() == CXL_OK);

    /* A block another process maps: freed here, its mapping there is stale until dropped. */
    void* b = cxl_malloc(t, (size_t)2 << 20);
    CHECK(b != NULL);
    memset(b, 0x3c, (size_t)2 << 20);
    uint64_t off = cxl_offset_of(heap, b);
    int ready[2], freed[2];
    CHECK(pipe(ready) == 0 && pipe(freed) == 0);
    fflush(NULL);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) huge_reader(heap, name, off, ready[1], freed[0]);
    char c;
    CHECK(read(ready[0], &c, 1) == 1);
    CHECK(cxl_free(t, b) == CXL_OK);
    CHECK(write(freed[1], &c, 1) == 1);
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "huge reader: status %d\n", status);
        exit(1);
    }
    for (int i = 0; i < 2; i++) {
        close(ready[i]);
        close(freed[i]);
    }
    CHECK(cxl_heap_sweep_huge(heap, &n) == CXL_OK);
    size_t problems = 99;
    CHECK(cxl_heap_check(heap, &problems) == CXL_OK && problems == 0);
}

/* A second host: a process in a pid namespace of its own opens the heap, takes a slot and
 * allocates, and dies holding it. This host lists it, is refused its own host and an entry
 * named by a stale domain, and recovers it by its index and domain. */
static void test_hosts(cxl_heap_t* heap, const char* name) {
    cxl_host_info_t hosts[8];
    size_t n = cxl_heap_hosts(heap, hosts, 8);
    CHECK(n == 1 && hosts[0].own && !hosts[0].declared_dead && cxl_last_error() == CXL_OK);
    CHECK(strlen(hosts[0].name) < sizeof hosts[0].name);
    CHECK_ERR(cxl_heap_hosts(heap, NULL, 1), CXL_EINVAL, EINVAL);
    CHECK(cxl_heap_recover_host(heap, hosts[0].id, hosts[0].domain, NULL) == CXL_EINVAL);
    CHECK(cxl_heap_recover_host(heap, 63, hosts[0].domain, NULL) == CXL_EINVAL);

    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        if (unshare(CLONE_NEWPID) != 0) _exit(77);
        pid_t holder = fork();
        if (holder == 0) {
            /* A fresh program: the library computes a process's domain once, and a forked
             * child would inherit this one's. */
            execl("/proc/self/exe", "api_test", "--holder", name, (char*)NULL);
            _exit(1);
        }
        int s = 0;
        _exit(holder > 0 && waitpid(holder, &s, 0) == holder && WIFEXITED(s) ? WEXITSTATUS(s) : 1);
    }
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status));
    if (WEXITSTATUS(status) == 77) {
        printf("api_test: SKIPPED the second host: unshare(CLONE_NEWPID) refused\n");
        return;
    }
    CHECK(WEXITSTATUS(status) == 0);

    CHECK(cxl_heap_hosts(heap, NULL, 0) == 2);
    CHECK(cxl_heap_hosts(heap, hosts, 1) == 2);
    n = cxl_heap_hosts(heap, hosts, 8);
    CHECK(n == 2);
    const cxl_host_info_t* other = hosts[0].own ? &hosts[1] : &hosts[0];
    CHECK(!other->own && !other->declared_dead && other->domain != 0);
    /* Dead, but only the operator can say so: nothing is recovered by this host's judgement. */
    CHECK(cxl_heap_recover(heap) == 0);
    size_t recovered = 99;
    CHECK(cxl_heap_recover_host(heap, other->id, other->domain ^ 1, &recovered) == CXL_EINVAL);
    CHECK(errno == EINVAL && strstr(cxl_last_error_message(), "reused") != NULL && recovered == 99);
    CHECK(cxl_heap_recover_host(heap, other->id, other->domain, &recovered) == CXL_OK);
    CHECK(recovered == 1 && cxl_last_error() == CXL_OK);
    CHECK(cxl_heap_hosts(heap, hosts, 8) == 1 && hosts[0].own);
}

static void test_slots_exhausted(void) {
    cxl_config_t cfg;
    cxl_config_default(&cfg);
    cfg.small_capacity = cfg.large_capacity = (uint64_t)16 << 20;
    cfg.thread_slots = 1;
    cxl_heap_t* heap = cxl_heap_anonymous(&cfg);
    CHECK(heap != NULL);
    cxl_thread_t* one = cxl_thread_attach(heap);
    CHECK(one != NULL);
    CHECK_ERR(cxl_thread_attach(heap), CXL_ESLOTS_EXHAUSTED, EAGAIN);
    /* Closing the heap handle first is allowed: the thread handle keeps the mapping. */
    void* p = cxl_malloc(one, 100);
    CHECK(p != NULL);
    cxl_heap_close(heap);
    memset(p, 1, 100);
    CHECK(cxl_free(one, p) == CXL_OK);
    cxl_thread_detach(one);
}

static void test_heap_exhausted(void) {
    /* 2 MiB per bracket: four 512 KiB large slabs, sixty-four 32 KiB small slabs. */
    cxl_config_t cfg;
    cxl_config_default(&cfg);
    cfg.small_capacity = cfg.large_capacity = (uint64_t)2 << 20;
    cxl_heap_t* heap = cxl_heap_anonymous(&cfg);
    CHECK(heap != NULL);
    cxl_thread_t* t = cxl_thread_attach(heap);
    CHECK(t != NULL);
    enum { LIMIT = 10000 };
    static void* blocks[LIMIT];
    int n = 0;
    for (size_t size = 300000; size >= 1000; size /= 300) {
        while (n < LIMIT && (blocks[n] = cxl_malloc(t, size)) != NULL) n++;
        CHECK(n < LIMIT);
        CHECK(cxl_last_error() == CXL_ENOMEM);
        CHECK(errno == ENOMEM);
    }
    CHECK(n > 4);
    for (int i = 0; i < n; i++) CHECK(cxl_free(t, blocks[i]) == CXL_OK);
    /* Everything freed: both brackets serve again. */
    void* big = cxl_malloc(t, 300000);
    void* small = cxl_malloc(t, 1000);
    CHECK(big != NULL && small != NULL);
    CHECK(cxl_free(t, big) == CXL_OK && cxl_free(t, small) == CXL_OK);
    size_t problems = 99;
    CHECK(cxl_heap_check(heap, &problems) == CXL_OK && problems == 0);
    cxl_thread_detach(t);
    cxl_heap_close(heap);
}

/* The permission bits of `path`. */
static unsigned mode_of(const char* path) {
    struct stat st;
    CHECK(stat(path, &st) == 0);
    return (unsigned)(st.st_mode & 07777);
}

/* cxl_config_t.mode: 0 is the default 0600 (directory 0700), whatever the umask; 0660 shares
 * with the group (directory 0770); execute bits, or no owner read/write, are CXL_EINVAL. */
static void test_modes(const char* path, const cxl_config_t* base) {
    char header[128];
    snprintf(header, sizeof header, "%s/header", path);
    mode_t old = umask(0);
    cxl_config_t cfg = *base;
    cfg.mode = 0;
    cxl_heap_t* heap = cxl_heap_create_at(path, &cfg);
    CHECK(heap != NULL);
    CHECK(mode_of(path) == 0700 && mode_of(header) == 0600);
    cxl_heap_close(heap);
    CHECK(cxl_heap_unlink_at(path) == CXL_OK);
    cfg.mode = 0660;
    heap = cxl_heap_create_at(path, &cfg);
    CHECK(heap != NULL);
    CHECK(mode_of(path) == 0770 && mode_of(header) == 0660);
    cxl_heap_close(heap);
    CHECK(cxl_heap_unlink_at(path) == CXL_OK);
    umask(old);
    cfg.mode = 0700;
    CHECK_ERR(cxl_heap_create_at(path, &cfg), CXL_EINVAL, EINVAL);
    cfg.mode = 0060;
    CHECK_ERR(cxl_heap_create_at(path, &cfg), CXL_EINVAL, EINVAL);
    CHECK_ERR(cxl_heap_create("bad\nname", &cfg), CXL_EINVAL, EINVAL);
}

static void test_heap_at(void) {
    char* dir = at_dir;
    char* path = at_path;
    snprintf(dir, sizeof at_dir, "/tmp/cxlalloc-capi-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof at_path, "%s/heap", dir);

    cxl_config_t cfg;
    cxl_config_default(&cfg);
    cfg.small_capacity = cfg.large_capacity = (uint64_t)64 << 20;
    CHECK_ERR(cxl_heap_open_at(path), CXL_ENOTFOUND, ENOENT);
    cxl_heap_t* heap = cxl_heap_create_at(path, &cfg);
    CHECK(heap != NULL);
    CHECK_ERR(cxl_heap_create_at(path, &cfg), CXL_EEXIST, EEXIST);
    cxl_thread_t* t = cxl_thread_attach(heap);
    CHECK(t != NULL);
    void* p = cxl_malloc(t, 4000);
    CHECK(p != NULL);
    fill(p, 4000, 3);
    uint64_t off = cxl_offset_of(heap, p);

    cxl_heap_t* same = cxl_heap_open_or_create_at(path, &cfg);
    CHECK(same != NULL);
    CHECK(holds(cxl_pointer(same, off), 4000, 3));
    cxl_heap_close(same);
    cxl_heap_t* plain = cxl_heap_open_at(path);
    CHECK(plain != NULL);
    cxl_heap_close(plain);
    cxl_config_t other = cfg;
    other.thread_slots = 7;
    CHECK_ERR(cxl_heap_open_or_create_at(path, &other), CXL_EMISMATCH, EINVAL);

    CHECK(cxl_free(t, p) == CXL_OK);
    size_t problems = 99;
    CHECK(cxl_heap_check(heap, &problems) == CXL_OK && problems == 0);
    cxl_thread_detach(t);
    cxl_heap_close(heap);
    CHECK(cxl_heap_unlink_at(path) == CXL_OK);
    CHECK_ERR(cxl_heap_open_at(path), CXL_ENOTFOUND, ENOENT);
    CHECK(cxl_heap_unlink_at(path) == CXL_ENOTFOUND);
    test_modes(path, &cfg);
    CHECK(cxl_heap_unlink_at(NULL) == CXL_EINVAL);
    CHECK(rmdir(dir) == 0);
    at_path[0] = at_dir[0] = '\0';
}

static void test_coherence_models(const char* name) {
    cxl_config_t cfg;
    cxl_config_default(&cfg);
    cfg.small_capacity = cfg.large_capacity = (uint64_t)16 << 20;
    /* The huge heap needs full coherence: the default huge_capacity is refused. */
    cfg.coherence = CXL_COHERENCE_LIMITED;
    CHECK_ERR(cxl_heap_anonymous(&cfg), CXL_EINVAL, EINVAL);
    CHECK(strstr(cxl_last_error_message(), "huge") != NULL);
    cfg.huge_capacity = 0;

    /* Limited HWcc: an ordinary heap to its user. */
    cxl_heap_t* heap = cxl_heap_anonymous(&cfg);
    CHECK(heap != NULL);
    cxl_thread_t* t = cxl_thread_attach(heap);
    CHECK(t != NULL);
    void* p = cxl_malloc(t, 100);
    CHECK(p != NULL);
    fill(p, 100, 5);
    CHECK(holds(p, 100, 5));
    CHECK(cxl_free(t, p) == CXL_OK);
    size_t problems = 99;
    CHECK(cxl_heap_check(heap, &problems) == CXL_OK && problems == 0);
    cxl_thread_detach(t);
    cxl_heap_close(heap);

    /* No HWcc: the HWcc words live in the heap directory's mCAS window, so an anonymous heap
     * cannot have them, and no thread attaches while no device serves the window. */
    cfg.coherence = CXL_COHERENCE_NONE;
    CHECK_ERR(cxl_heap_anonymous(&cfg), CXL_EIO, EIO);
    heap = cxl_heap_create(name, &cfg);
    CHECK(heap != NULL);
    CHECK_ERR(cxl_thread_attach(heap), CXL_EIO, EIO);
    CHECK(strstr(cxl_last_error_message(), "mcas-window") != NULL);
    CHECK(cxl_heap_check(heap, &problems) == CXL_OK && problems == 0);
    cxl_heap_close(heap);
    CHECK(cxl_heap_unlink(name) == CXL_OK);
}

/* A heap on a device: a plain file in /dev/shm of the size cxl_device_bytes() gives. */
static void test_device(void) {
    snprintf(dev_path, sizeof dev_path, "/dev/shm/capi-dev-%ld", (long)getpid());
    cxl_config_t cfg;
    cxl_config_default(&cfg);
    cfg.small_capacity = (uint64_t)64 << 20;
    cfg.large_capacity = (uint64_t)64 << 20;
    cfg.thread_slots = 16;
    cfg.huge_capacity = (uint64_t)1 << 30;
    uint64_t bytes = cxl_device_bytes(&cfg);
    CHECK(bytes > cfg.huge_capacity && cxl_last_error() == CXL_OK);
    FILE* f = fopen(dev_path, "w");
    CHECK(f != NULL);
    CHECK(fclose(f) == 0);
    /* Too small for the heap, then never formatted. */
    CHECK(truncate(dev_path, (off_t)(bytes / 2)) == 0);
    CHECK_ERR(cxl_heap_format_device(dev_path, &cfg), CXL_EINVAL, EINVAL);
    CHECK(truncate(dev_path, (off_t)bytes) == 0);
    CHECK_ERR(cxl_heap_open_device(dev_path), CXL_ENOTFOUND, ENOENT);
    CHECK_ERR(cxl_heap_open_device(NULL), CXL_EINVAL, EINVAL);
    cfg.thread_slots = 0;
    CHECK(cxl_device_bytes(&cfg) == 0 && cxl_last_error() == CXL_EINVAL);
    cfg.thread_slots = 16;

    cxl_heap_t* heap = cxl_heap_format_device(dev_path, &cfg);
    CHECK(heap != NULL);
    cxl_thread_t* t = cxl_thread_attach(heap);
    CHECK(t != NULL);
    void* small = cxl_malloc(t, 100);
    void* huge = cxl_malloc(t, (size_t)3 << 20);
    CHECK(small != NULL && huge != NULL);
    fill(small, 100, 7);
    fill(huge, (size_t)3 << 20, 9);
    /* A second handle maps the same bytes of the device. */
    cxl_heap_t* again = cxl_heap_open_device(dev_path);
    CHECK(again != NULL);
    uint64_t off = cxl_offset_of(heap, huge);
    CHECK(off != 0);
    void* seen = cxl_pointer(again, off);
    CHECK(seen != NULL && seen != huge);
    CHECK(holds(seen, (size_t)3 << 20, 9));
    cxl_heap_close(again);
    CHECK(cxl_free(t, huge) == CXL_OK);
    CHECK(cxl_free(t, small) == CXL_OK);
    size_t problems = 99;
    CHECK(cxl_heap_check(heap, &problems) == CXL_OK && problems == 0);
    cxl_thread_detach(t);
    cxl_heap_close(heap);
    CHECK(unlink(dev_path) == 0);
    dev_path[0] = '\0';
}

/* `--holder NAME`: the second host's process of test_hosts(): takes a slot of heap NAME,
 * allocates, and dies holding the slot. */
static int holder(const char* name) {
    cxl_heap_t* h = cxl_heap_open(name);
    cxl_thread_t* th = h ? cxl_thread_attach(h) : NULL;
    _exit(th && cxl_malloc(th, 100) ? 0 : 1);
}

int main(int argc, char** argv) {
    if (argc == 3 && strcmp(argv[1], "--holder") == 0) return holder(argv[2]);
    char* name = heap_name;
    snprintf(name, sizeof heap_name, "capi-test-%ld", (long)getpid());
    (void)cxl_heap_unlink(name); /* a leftover from a killed run with a recycled pid */
    CHECK(atexit(cleanup) == 0);

    test_config_defaults();
    test_return_pages();
    test_errors_without_heap(name);

    cxl_config_t cfg;
    cxl_config_default(&cfg);
    cfg.small_capacity = (uint64_t)256 << 20;
    cfg.large_capacity = (uint64_t)256 << 20;
    cxl_heap_t* heap = cxl_heap_create(name, &cfg);
    CHECK(heap != NULL);
    CHECK(cxl_last_error() == CXL_OK);
    CHECK_ERR(cxl_heap_create(name, &cfg), CXL_EEXIST, EEXIST);
    cxl_heap_t* same = cxl_heap_open_or_create(name, &cfg);
    CHECK(same != NULL);
    cxl_heap_close(same);
    cxl_config_t other = cfg;
    other.small_capacity = (uint64_t)128 << 20;
    CHECK_ERR(cxl_heap_open_or_create(name, &other), CXL_EMISMATCH, EINVAL);

    cxl_thread_t* t = cxl_thread_attach(heap);
    CHECK(t != NULL);

    test_malloc_free_sizes(t);
    test_calloc(t);
    test_realloc(t);
    test_aligned_alloc(t);
    test_bad_frees(t);
    test_offsets(heap, t, name);
    test_roots(heap, t);
    test_remote_free(heap, t);
    test_detectable(heap, t);
    test_huge_maintenance(heap, t, name);

    size_t problems = 99;
    CHECK(cxl_heap_check(heap, &problems) == CXL_OK);
    CHECK(problems == 0);
    CHECK(cxl_heap_check(heap, NULL) == CXL_OK);
    test_hosts(heap, name);

    cxl_thread_detach(t);
    cxl_heap_close(heap);
    CHECK(cxl_heap_unlink(name) == CXL_OK);
    CHECK_ERR(cxl_heap_open(name), CXL_ENOTFOUND, ENOENT);

    test_slots_exhausted();
    test_heap_exhausted();
    test_heap_at();
    test_coherence_models(name);
    test_device();

    printf("api_test: %d checks passed\n", checks);
    return 0;
}
