/* A workout for libcxlalloc_preload.so, run under LD_PRELOAD by tests/preload.rs and
 * script/preload.sh. Plain C against the C library's allocation functions: it knows nothing of
 * cxlalloc. Each mode prints "ok MODE" and exits 0 when every check holds; a failed check prints
 * what failed and exits 1. Every block it writes is filled with a pattern derived from its
 * address and size, and checked before it is freed.
 *
 *   workout api                      every entry point, its edge cases and errno
 *   workout threads THREADS ROUNDS   waves of THREADS threads allocating, freeing locally and
 *                                    across threads (more threads than cores, slots reused)
 *   workout fork CHILDREN            children inherit blocks, check them, free and allocate
 *                                    (huge blocks too); the parent's blocks stay intact
 *   workout exhaust                  allocate until NULL/ENOMEM (run with a small capacity),
 *                                    free everything, allocate again
 *   workout huge                     blocks above 512 KiB by every entry point, bytes kept
 *                                    (also where the heap has no huge heap of its own)
 *   workout trim                     a freed huge block (one the cache does not keep) leaves
 *                                    no pages resident
 *   workout sharedfork               a forked child of a shared heap: it sees its parent's
 *                                    blocks (and its writes reach the parent), and its own huge
 *                                    requests are served
 *   workout forkbusy THREADS CHILDREN  forks CHILDREN children one after another while THREADS
 *                                    threads allocate and free (huge blocks too): each child
 *                                    frees the blocks those threads left, allocates its own,
 *                                    and must finish within 10 s (no lock left held by a
 *                                    thread that the fork did not copy)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(cond, ...)                                                                      \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      fprintf(stderr, "workout: %s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);       \
      fprintf(stderr, __VA_ARGS__);                                                           \
      fprintf(stderr, "\n");                                                                  \
      exit(1);                                                                                \
    }                                                                                         \
  } while (0)

static uint64_t rng(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static unsigned char pat(const void *p, size_t i, uint64_t salt) {
  return (unsigned char)(((uintptr_t)p >> 4) * 31 + i * 7 + salt);
}

/* Fills the first and last 64 bytes and one byte per 4 KiB: every page touched, cheap. */
static void fill(unsigned char *p, size_t n, uint64_t salt) {
  for (size_t i = 0; i < n; i = (i < 64 || i + 64 >= n) ? i + 1 : (i + 4096 < n - 64 ? i + 4096 : n - 64))
    p[i] = pat(p, i, salt);
}

static int intact(const unsigned char *p, size_t n, uint64_t salt) {
  for (size_t i = 0; i < n; i = (i < 64 || i + 64 >= n) ? i + 1 : (i + 4096 < n - 64 ? i + 4096 : n - 64))
    if (p[i] != pat(p, i, salt)) return 0;
  return 1;
}

/* Bytes i * 13 + salt in all of [0, n): for blocks that realloc may move (the other pattern
   depends on the address). */
static void fill_all(unsigned char *p, size_t n, unsigned salt) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 13 + salt);
}

static int intact_all(const unsigned char *p, size_t n, unsigned salt) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != (unsigned char)(i * 13 + salt)) return 0;
  return 1;
}

static size_t pick_size(uint64_t *s) {
  uint64_t r = rng(s);
  switch (r % 128) {
  case 0: return 600000 + r % 1500000;   /* huge (> 512 KiB) */
  case 1: case 2: case 3: case 4: case 5: case 6: case 7: case 8: return 1 + r % 8192;   /* large bracket */
  default: return 1 + r % 256;           /* small */
  }
}

static int aligned_to(const void *p, size_t a) { return ((uintptr_t)p & (a - 1)) == 0; }

static int api(void) {
  /* malloc: 16-byte alignment above 8 bytes, usable size covers the request. */
  for (size_t n = 0; n < 5000; n += 7) {
    unsigned char *live[8];
    /* Eight live at once: consecutive blocks of one class, not the same block reused. */
    for (int k = 0; k < 8; k++) {
      unsigned char *p = live[k] = malloc(n);
      CHECK(p != NULL, "malloc(%zu)", n);
      if (n > 8) CHECK(aligned_to(p, 16), "malloc(%zu) = %p not 16-aligned", n, (void *)p);
      CHECK(malloc_usable_size(p) >= n, "usable %zu < %zu", malloc_usable_size(p), n);
      memset(p, 0xab, malloc_usable_size(p));
    }
    for (int k = 0; k < 8; k++) free(live[k]);
  }
  void *z1 = malloc(0), *z2 = malloc(0);
  CHECK(z1 && z2 && z1 != z2, "malloc(0) gives distinct pointers");
  free(z1);
  free(z2);
  free(NULL);
  CHECK(malloc_usable_size(NULL) == 0, "usable(NULL)");

  /* calloc zeroes, small and huge; overflow is ENOMEM. */
  for (size_t n = 1; n < 4 << 20; n = n * 3 + 1) {
    unsigned char *p = malloc(n);
    memset(p, 0xff, n);
    free(p);
    p = calloc(1, n);
    CHECK(p != NULL, "calloc(%zu)", n);
    for (size_t i = 0; i < n; i++) CHECK(p[i] == 0, "calloc(%zu)[%zu] = %d", n, i, p[i]);
    free(p);
  }
  errno = 0;
  volatile size_t huge_count = SIZE_MAX / 2;
  CHECK(calloc(huge_count, 3) == NULL && errno == ENOMEM, "calloc overflow: errno %d", errno);

  /* realloc keeps the bytes across classes, brackets and the huge heap, both ways. */
  size_t sizes[] = {1, 24, 100, 1000, 5000, 70000, 600000, 3 << 20, 900, 17};
  unsigned char *p = NULL;
  size_t have = 0;
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
    size_t n = sizes[k];
    unsigned char *q = realloc(p, n);
    CHECK(q != NULL, "realloc to %zu", n);
    size_t keep = have < n ? have : n;
    for (size_t i = 0; i < keep; i++) CHECK(q[i] == (unsigned char)(i * 13), "realloc %zu->%zu byte %zu", have, n, i);
    for (size_t i = 0; i < n; i++) q[i] = (unsigned char)(i * 13);
    p = q;
    have = n;
  }
  CHECK(realloc(p, 0) == NULL, "realloc(p, 0) frees and returns NULL");
  errno = 0;
  CHECK(reallocarray(NULL, huge_count, 4) == NULL && errno == ENOMEM, "reallocarray overflow");
  p = reallocarray(NULL, 10, 10);
  CHECK(p != NULL && malloc_usable_size(p) >= 100, "reallocarray(10, 10)");
  free(p);

  /* Aligned allocation, every power of two up to 4 MiB. */
  for (size_t a = 8; a <= 4 << 20; a *= 2) {
    void *q = NULL;
    CHECK(posix_memalign(&q, a, 100) == 0 && aligned_to(q, a), "posix_memalign(%zu)", a);
    fill(q, 100, a);
    CHECK(intact(q, 100, a), "posix_memalign block");
    free(q);
    q = aligned_alloc(a, a * 2);
    CHECK(q && aligned_to(q, a), "aligned_alloc(%zu)", a);
    free(q);
    q = memalign(a, 3);
    CHECK(q && aligned_to(q, a), "memalign(%zu)", a);
    free(q);
  }
  void *q = (void *)1;
  CHECK(posix_memalign(&q, 24, 8) == EINVAL && q == (void *)1, "posix_memalign(24) is EINVAL, *out untouched");
  CHECK(posix_memalign(&q, 4, 8) == EINVAL, "posix_memalign(4) is EINVAL");
  if (getenv("LD_PRELOAD")) {
    /* As glibc 2.38 and later (2.36 accepts it). */
    errno = 0;
    CHECK(aligned_alloc(48, 96) == NULL && errno == EINVAL, "aligned_alloc(48) is EINVAL");
  }
  q = memalign(48, 10);
  CHECK(q && aligned_to(q, 64), "memalign(48) rounds up to 64");
  free(q);
  long page = sysconf(_SC_PAGESIZE);
  q = valloc(10);
  CHECK(q && aligned_to(q, (size_t)page), "valloc");
  free(q);
  q = pvalloc(page + 1);
  CHECK(q && aligned_to(q, (size_t)page) && malloc_usable_size(q) >= (size_t)(2 * page), "pvalloc");
  free(q);

  if (getenv("LD_PRELOAD")) {
    /* Pointers no allocator handed out are left alone, not crashed on (glibc aborts). */
    static char not_heap[64];
    /* Through volatile pointers: the compiler would rightly warn about these frees. */
    char *volatile stat = not_heap + 16;
    free(stat);
    void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *volatile inside = (char *)m + 64;
    free(inside);
    CHECK(malloc_usable_size(stat) == 0, "usable of a static array");
    munmap(m, 4096);
  }

  /* Absurd sizes: NULL with ENOMEM. */
  volatile size_t absurd = SIZE_MAX - 4096;
  errno = 0;
  CHECK(malloc(absurd) == NULL && errno == ENOMEM, "malloc(SIZE_MAX - 4096)");
  errno = 0;
  CHECK(malloc((size_t)1 << 50) == NULL && errno == ENOMEM, "malloc(1 PiB): errno %d", errno);
  return 0;
}

/* ---- threads ---------------------------------------------------------------------------- */

#define SHARED 64
static void *volatile shared_blocks[SHARED];
static size_t shared_sizes[SHARED];
static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static long rounds;

/* Swaps a block with the shared table: the previous occupant, allocated by another thread, is
 * checked and freed here (a remote free). */
static void swap_shared(unsigned char *p, size_t n, uint64_t *s) {
  size_t i = rng(s) % SHARED;
  pthread_mutex_lock(&shared_lock);
  unsigned char *old = shared_blocks[i];
  size_t oldn = shared_sizes[i];
  shared_blocks[i] = p;
  shared_sizes[i] = n;
  pthread_mutex_unlock(&shared_lock);
  if (old) {
    CHECK(intact(old, oldn, oldn), "a block from another thread (%zu bytes) was overwritten", oldn);
    free(old);
  }
}

static void *worker(void *arg) {
  uint64_t s = (uintptr_t)arg * 0x9e3779b97f4a7c15ull + 1;
  enum { KEEP = 32 };
  unsigned char *kept[KEEP] = {0};
  size_t kn[KEEP] = {0};
  for (long r = 0; r < rounds; r++) {
    size_t k = rng(&s) % KEEP;
    if (kept[k]) {
      CHECK(intact(kept[k], kn[k], kn[k]), "a kept block (%zu bytes) was overwritten", kn[k]);
      if (rng(&s) % 4 == 0) {
        swap_shared(kept[k], kn[k], &s);
      } else {
        free(kept[k]);
      }
    }
    kn[k] = pick_size(&s);
    kept[k] = (rng(&s) % 8 == 0) ? calloc(1, kn[k]) : malloc(kn[k]);
    CHECK(kept[k] != NULL, "allocating %zu bytes in a thread", kn[k]);
    fill(kept[k], kn[k], kn[k]);
  }
  for (int k = 0; k < KEEP; k++) {
    if (kept[k]) {
      CHECK(intact(kept[k], kn[k], kn[k]), "a kept block was overwritten");
      free(kept[k]);
    }
  }
  return NULL;
}

static int threads(int n, long r) {
  rounds = r;
  pthread_t *t = malloc(sizeof *t * (size_t)n);
  for (int wave = 0; wave < 3; wave++) {
    for (int i = 0; i < n; i++) CHECK(pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(wave * n + i + 1)) == 0, "pthread_create");
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
  }
  for (int i = 0; i < SHARED; i++) {
    if (shared_blocks[i]) {
      CHECK(intact(shared_blocks[i], shared_sizes[i], shared_sizes[i]), "a shared block was overwritten");
      free(shared_blocks[i]);
    }
  }
  free(t);
  return 0;
}

/* ---- fork ------------------------------------------------------------------------------- */

static int forks(int children) {
  enum { N = 200 };
  unsigned char *b[N];
  size_t n[N];
  uint64_t s = 7;
  for (int i = 0; i < N; i++) {
    n[i] = pick_size(&s);
    b[i] = malloc(n[i]);
    CHECK(b[i] != NULL, "parent malloc");
    fill(b[i], n[i], 1);
  }
  for (int c = 0; c < children; c++) {
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
      /* The child sees its parent's blocks, and its writes and frees stay its own. */
      for (int i = 0; i < N; i++) {
        CHECK(intact(b[i], n[i], 1), "child %d: inherited block %d", c, i);
        fill(b[i], n[i], 2);
        if (i % 2) free(b[i]);
      }
      uint64_t cs = (uint64_t)c + 99;
      for (int i = 0; i < 300; i++) {
        size_t m = pick_size(&cs);
        unsigned char *p = malloc(m);
        CHECK(p != NULL, "child malloc(%zu)", m);
        fill(p, m, 3);
        unsigned char *big = malloc(2 << 20);
        CHECK(big != NULL, "child huge malloc");
        fill(big, 2 << 20, 4);
        CHECK(intact(p, m, 3) && intact(big, 2 << 20, 4), "child's own blocks");
        free(big);
        free(p);
      }
      for (int i = 0; i < N; i += 2) CHECK(intact(b[i], n[i], 2), "child %d: block %d after its own work", c, i);
      exit(0);
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d status %#x", c, st);
  }
  for (int i = 0; i < N; i++) {
    CHECK(intact(b[i], n[i], 1), "parent block %d changed by a child", i);
    free(b[i]);
  }
  return 0;
}

/* ---- fork while other threads allocate -------------------------------------------------- */

enum { BUSY_MAX = 64, BUSY_KEPT = 40 };
static unsigned char *busy_kept[BUSY_MAX][BUSY_KEPT];
static size_t busy_kept_n[BUSY_MAX][BUSY_KEPT];
static volatile int busy_stop;
static volatile int busy_ready;

/* Keeps BUSY_KEPT blocks (filled, then left alone), then allocates and frees until told to
   stop: small, large and huge blocks, through malloc, calloc and realloc. */
static void *busy(void *arg) {
  int t = (int)(intptr_t)arg;
  uint64_t s = (uint64_t)t * 7919 + 1;
  for (int i = 0; i < BUSY_KEPT; i++) {
    busy_kept_n[t][i] = i % 10 == 0 ? (size_t)(1 << 20) + 4096 : pick_size(&s);
    busy_kept[t][i] = malloc(busy_kept_n[t][i]);
    CHECK(busy_kept[t][i] != NULL, "busy thread %d: malloc", t);
    fill(busy_kept[t][i], busy_kept_n[t][i], 5);
  }
  __atomic_add_fetch(&busy_ready, 1, __ATOMIC_SEQ_CST);
  while (!busy_stop) {
    size_t n = rng(&s) % 16 == 0 ? (2 << 20) + rng(&s) % 8192 : pick_size(&s);
    unsigned char *p = rng(&s) % 2 ? malloc(n) : calloc(1, n);
    CHECK(p != NULL, "busy thread %d: allocation of %zu", t, n);
    size_t head = n < 4096 ? n : 4096;
    fill_all(p, head, 6);
    unsigned char *q = realloc(p, n / 2 + 1);
    size_t kept = head < n / 2 + 1 ? head : n / 2 + 1;
    CHECK(q != NULL && intact_all(q, kept, 6), "busy thread %d: realloc of %zu kept the bytes", t, n);
    free(q);
  }
  return NULL;
}

static int fork_busy(int threads, int children) {
  CHECK(threads > 0 && threads <= BUSY_MAX, "1..%d threads", BUSY_MAX);
  /* Bounded: a child or parent stuck on a lock the fork copied held dies here instead. */
  alarm(60);
  pthread_t th[BUSY_MAX];
  for (int t = 0; t < threads; t++) CHECK(pthread_create(&th[t], NULL, busy, (void *)(intptr_t)t) == 0, "thread");
  while (__atomic_load_n(&busy_ready, __ATOMIC_SEQ_CST) < threads) usleep(100);
  for (int c = 0; c < children; c++) {
    usleep(500 + (c * 331) % 2000);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
      alarm(10);
      /* The blocks the threads kept (threads that do not exist here): checked and freed. */
      for (int t = 0; t < threads; t++)
        for (int i = 0; i < BUSY_KEPT; i++) {
          CHECK(intact(busy_kept[t][i], busy_kept_n[t][i], 5), "child %d: block %d of thread %d", c, i, t);
          free(busy_kept[t][i]);
        }
      uint64_t cs = (uint64_t)c + 4242;
      for (int i = 0; i < 200; i++) {
        size_t m = i % 20 == 0 ? (3 << 20) + 1 : pick_size(&cs);
        unsigned char *p = malloc(m);
        CHECK(p != NULL, "child %d: malloc(%zu)", c, m);
        fill(p, m, 7);
        CHECK(intact(p, m, 7), "child %d: own block", c);
        free(p);
      }
      exit(0);
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d ended with status %#x (SIGALRM = %d: stuck)", c, st,
          SIGALRM);
  }
  busy_stop = 1;
  for (int t = 0; t < threads; t++) pthread_join(th[t], NULL);
  for (int t = 0; t < threads; t++)
    for (int i = 0; i < BUSY_KEPT; i++) {
      CHECK(intact(busy_kept[t][i], busy_kept_n[t][i], 5), "parent: block %d of thread %d changed by a child", i, t);
      free(busy_kept[t][i]);
    }
  return 0;
}

/* ---- huge blocks ------------------------------------------------------------------------ */

static int huge(void) {
  static const size_t sizes[] = {512 * 1024 + 1, 600000, 2 << 20, 9 << 20, 64 << 20};
  enum { K = sizeof sizes / sizeof *sizes };
  unsigned char *b[K];
  for (int round = 0; round < 6; round++) {
    for (int i = 0; i < K; i++) {
      errno = 0;
      b[i] = malloc(sizes[i]);
      CHECK(b[i] != NULL, "round %d: malloc(%zu): errno %d", round, sizes[i], errno);
      CHECK(aligned_to(b[i], 16) && malloc_usable_size(b[i]) >= sizes[i], "malloc(%zu)", sizes[i]);
      fill(b[i], sizes[i], (uint64_t)round + 5);
    }
    for (int i = 0; i < K; i++) {
      CHECK(intact(b[i], sizes[i], (uint64_t)round + 5), "round %d: block of %zu", round, sizes[i]);
      free(b[i]);
    }
  }
  /* calloc zeroes, also a block that reuses freed memory. */
  for (int round = 0; round < 3; round++) {
    unsigned char *z = calloc(3 << 20, 1);
    CHECK(z != NULL, "calloc(3 MiB)");
    for (size_t i = 0; i < (3 << 20); i += 511) CHECK(z[i] == 0, "calloc byte %zu = %d", i, z[i]);
    memset(z, 0x77, 3 << 20);
    free(z);
  }
  /* realloc across the slab limit, both ways, bytes kept. */
  unsigned char *r = malloc(1000);
  CHECK(r != NULL, "malloc(1000)");
  fill_all(r, 1000, 9);
  r = realloc(r, 5 << 20);
  CHECK(r != NULL && intact_all(r, 1000, 9), "realloc small -> huge keeps the bytes");
  fill_all(r, 5 << 20, 10);
  r = realloc(r, 11 << 20);
  CHECK(r != NULL && intact_all(r, 5 << 20, 10), "realloc huge -> bigger keeps the bytes");
  r = realloc(r, 3000);
  CHECK(r != NULL && intact_all(r, 3000, 10), "realloc huge -> small keeps the bytes");
  free(r);
  /* Aligned huge blocks. */
  void *a = NULL;
  CHECK(posix_memalign(&a, 1 << 16, 3 << 20) == 0 && aligned_to(a, 1 << 16), "posix_memalign 64 KiB, 3 MiB");
  fill(a, 3 << 20, 11);
  CHECK(intact(a, 3 << 20, 11), "aligned huge block");
  free(a);
  return 0;
}

/* Resident KiB of this process (VmRSS). */
static long rss_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  CHECK(f != NULL, "open /proc/self/status");
  char line[256];
  long kib = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %ld kB", &kib) == 1) break;
  fclose(f);
  CHECK(kib >= 0, "no VmRSS line");
  return kib;
}

/* A freed 272 MiB block gives its pages back: resident memory falls to near where it was. */
static int trim(void) {
  long before = rss_kib();
  size_t n = (size_t)272 << 20;
  unsigned char *p = malloc(n);
  CHECK(p != NULL, "malloc(272 MiB)");
  fill(p, n, 6); /* every page (a memset before free could be optimised away) */
  CHECK(intact(p, n, 6), "the block's bytes");
  long full = rss_kib();
  CHECK(full - before >= 200 * 1024, "the block is resident: %ld -> %ld KiB", before, full);
  free(p);
  long after = rss_kib();
  CHECK(after - before < 16 * 1024, "resident after free: %ld KiB, before the block %ld KiB", after, before);
  return 0;
}

/* ---- fork of a shared heap ---------------------------------------------------------------- */

static int shared_fork(void) {
  unsigned char *small = malloc(200), *big = malloc(3 << 20);
  CHECK(small && big, "parent malloc");
  fill(small, 200, 1);
  fill(big, 3 << 20, 1);
  pid_t pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    /* The parent's blocks are the same memory: the child reads them, and what it writes the
       parent sees. It must not free the small one (that would free the parent's block); a free
       of the huge one is refused (the huge heap serves only the process that opened it). */
    CHECK(intact(small, 200, 1) && intact(big, 3 << 20, 1), "child sees its parent's blocks");
    fill(small, 200, 2);
    fill(big, 3 << 20, 2);
    free(big);
    CHECK(intact(big, 3 << 20, 2), "the parent's huge block after the child's refused free");
    /* Its own blocks, huge ones included, come from somewhere and stay intact. */
    for (int i = 0; i < 20; i++) {
      errno = 0;
      unsigned char *h = malloc(4 << 20);
      CHECK(h != NULL, "child huge malloc: errno %d", errno);
      unsigned char *c = calloc(1 << 20, 2);
      CHECK(c != NULL && c[12345] == 0 && c[(2 << 20) - 1] == 0, "child huge calloc");
      unsigned char *p = malloc(100 + (size_t)i);
      CHECK(p != NULL, "child malloc");
      fill(h, 4 << 20, 3);
      fill_all(p, 100 + (size_t)i, 3);
      p = realloc(p, 1 << 20);
      CHECK(p != NULL && intact_all(p, 100 + (size_t)i, 3), "child realloc small -> huge");
      CHECK(intact(h, 4 << 20, 3), "child huge block");
      free(p);
      free(c);
      free(h);
    }
    exit(0);
  }
  int st = 0;
  CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x", st);
  CHECK(intact(small, 200, 2) && intact(big, 3 << 20, 2), "the parent sees its child's writes");
  free(small);
  free(big);
  return 0;
}

/* ---- calloc of a huge block the heap reuses ------------------------------------------- */

/* Larger than this library's own cache keeps (256 MiB), so the free goes to the heap, whose
   cache (a named heap) keeps the object and hands it to the calloc: it must come zeroed. */
static int calloc_reuse(void) {
  const size_t n = 300 << 20;
  for (int round = 0; round < 3; round++) {
    unsigned char *p = malloc(n);
    CHECK(p != NULL, "round %d: malloc(300 MiB)", round);
    memset(p, 0x77, n);
    /* Read back, so the compiler cannot drop the memset as a dead store before free. */
    CHECK(((volatile unsigned char *)p)[n - 1] == 0x77, "round %d: memset", round);
    free(p);
    unsigned char *z = calloc(n, 1);
    CHECK(z != NULL, "round %d: calloc(300 MiB)", round);
    for (size_t i = 0; i < n; i += 4093) CHECK(z[i] == 0, "round %d: calloc byte %zu = %d", round, i, z[i]);
    CHECK(z[n - 1] == 0, "round %d: calloc's last byte = %d", round, z[n - 1]);
    free(z);
  }
  return 0;
}

/* ---- exhaustion ------------------------------------------------------------------------- */

static int exhaust(void) {
  size_t cap = 1 << 16, count = 0;
  void **all = malloc(cap * sizeof *all);
  CHECK(all != NULL, "table");
  for (;;) {
    errno = 0;
    void *p = malloc(4000);
    if (!p) {
      CHECK(errno == ENOMEM, "malloc returned NULL with errno %d, not ENOMEM", errno);
      break;
    }
    memset(p, 0x5a, 4000);
    if (count == cap) {
      void **more = realloc(all, 2 * cap * sizeof *all);
      CHECK(more != NULL, "table growth");
      all = more;
      cap *= 2;
    }
    all[count++] = p;
    CHECK(count < ((size_t)1 << 24), "no exhaustion after %zu blocks: run with a small CXLALLOC_CAPACITY", count);
  }
  CHECK(count > 100, "exhausted after only %zu blocks", count);
  for (size_t i = 0; i < count; i++) free(all[i]);
  void *p = malloc(4000);
  CHECK(p != NULL, "allocating again after freeing everything");
  free(p);
  free(all);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: workout api|threads N ROUNDS|fork N|exhaust|huge|trim|sharedfork|forkbusy N C\n");
    return 2;
  }
  int r;
  if (!strcmp(argv[1], "api")) r = api();
  else if (!strcmp(argv[1], "threads") && argc == 4) r = threads(atoi(argv[2]), atol(argv[3]));
  else if (!strcmp(argv[1], "fork") && argc == 3) r = forks(atoi(argv[2]));
  else if (!strcmp(argv[1], "exhaust")) r = exhaust();
  else if (!strcmp(argv[1], "huge")) r = huge();
  else if (!strcmp(argv[1], "callocreuse")) r = calloc_reuse();
  else if (!strcmp(argv[1], "trim")) r = trim();
  else if (!strcmp(argv[1], "sharedfork")) r = shared_fork();
  else if (!strcmp(argv[1], "forkbusy") && argc == 4) r = fork_busy(atoi(argv[2]), atoi(argv[3]));
  else {
    fprintf(stderr, "workout: unknown mode %s\n", argv[1]);
    return 2;
  }
  if (r == 0) printf("ok %s\n", argv[1]);
  return r;
}
