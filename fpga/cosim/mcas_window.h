/*
 * The shared-memory window through which software drives an mCAS device: the co-simulation server
 * (mcas_cosim.cpp, the RTL under Verilator), its test client (test_client.c) and, later, the
 * allocator's mCAS client all map the same file and follow this layout (fpga/README.md, "Window").
 *
 *   offset 0                      header, 4096 bytes (struct mcas_header, rest zero)
 *   offset 4096                   spwr area: `slots` request slots of 128 bytes
 *   offset 4096 + slots*128       sprd area: `slots` answer slots of 128 bytes
 *   offset round_up(4096 + 2*slots*128, 4096)
 *                                 target area: `target_bytes` bytes of 8-byte words; a request's
 *                                 target is a byte offset into it
 *
 * Slot i belongs to requester i: one request outstanding per slot at a time. The request's
 * doorbell is its sequence number (written last, with release ordering) and the answer's is the
 * completion sequence (written last by the server, with release ordering); both are 8-byte words
 * read with acquire ordering.
 *
 * Written in the common subset of C11 and C++17 so both programs include it; every function is
 * static inline, and reports failure by returning -1 with a message in `err`.
 */
#ifndef MCAS_WINDOW_H
#define MCAS_WINDOW_H

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef __cplusplus
#define MCAS_STATIC_ASSERT static_assert
#else
#define MCAS_STATIC_ASSERT _Static_assert
#endif

#define MCAS_MAGIC "CXLMCAS1"
#define MCAS_VERSION 1u
#define MCAS_HEADER_BYTES 4096u
#define MCAS_SLOT_BYTES 128u
#define MCAS_PAGE_BYTES 4096u
#define MCAS_MAX_SLOTS 65536u
/* The RTL's word address is 32 bits wide in the co-simulation build: 2**32 words of 8 bytes. */
#define MCAS_MAX_TARGET_BYTES (UINT64_C(8) << 32)
/* A new window's geometry when its creator does not choose one. */
#define MCAS_DEFAULT_SLOTS 64u
#define MCAS_DEFAULT_TARGET_BYTES 4096u
/* How long an opener waits for a concurrent creator to publish the header. */
#define MCAS_HEADER_WAIT_MS 5000

/* Answer error codes: the RTL's (fpga/rtl/mcas_pkg.sv), and what the server adds. */
enum mcas_error {
  MCAS_ERR_NONE = 0,
  MCAS_ERR_BAD_ID = 1,      /* requester id is not the slot's index */
  MCAS_ERR_NO_OPERANDS = 2, /* cannot happen through the window: the server pairs spwr and sprd */
  MCAS_ERR_BAD_TARGET = 3,  /* target not 8-byte aligned or not inside the target area */
};

/* offset 0. magic is written last by the creator (with release ordering), so an opener that
 * reads it (with acquire ordering) sees the other fields. */
struct mcas_header {
  char magic[8];         /* "CXLMCAS1", no terminator */
  uint32_t version;      /* MCAS_VERSION */
  uint32_t slots;        /* requesters, 1..MCAS_MAX_SLOTS */
  uint64_t target_bytes; /* size of the target area, a multiple of 8 */
  uint64_t server_pid;   /* serving process or 0; claimed and released by compare-and-swap */
  /* Offset 32, outside this struct: the software device's parked word (1 while it sleeps on it as
   * a futex). A client of the software device that rings a doorbell and finds it 1 swaps it to 0
   * and wakes the device (FUTEX_WAKE); mcas-cosim never parks and leaves it 0.
   * Offset 40: the heap whose HWcc regions the window holds (0: none). Offset 1024: eight
   * 64-byte host-number claims of cxlalloc's clients (word 0: the claiming kernel's
   * fingerprint, 0 = free; docs/design.md section 9.2): mcas-cosim ignores them, the software
   * device parks only briefly while a kernel other than its own holds one. */
};

/* spwr area, one per requester; written by the client only. */
struct mcas_spwr_slot {
  uint64_t expected;
  uint64_t swap;
  uint64_t target;    /* byte offset into the target area */
  uint64_t requester; /* must equal the slot index */
  uint64_t seq;       /* doorbell: previous seq + 1 (never 0), stored last, release */
  uint64_t reserved[11];
};

/* sprd area, one per requester; written by the server only. */
struct mcas_sprd_slot {
  uint64_t prev;     /* the target word before the operation (0 on an error) */
  uint64_t success;  /* 1: swapped; 0: not (compare mismatch, conflict, or error) */
  uint64_t done_seq; /* the answered request's seq, stored last, release */
  uint64_t error;    /* enum mcas_error */
  uint64_t reserved[12];
};

MCAS_STATIC_ASSERT(sizeof(struct mcas_header) == 32, "header layout");
MCAS_STATIC_ASSERT(offsetof(struct mcas_header, slots) == 12, "header layout");
MCAS_STATIC_ASSERT(offsetof(struct mcas_header, server_pid) == 24, "header layout");
MCAS_STATIC_ASSERT(sizeof(struct mcas_spwr_slot) == MCAS_SLOT_BYTES, "spwr slot layout");
MCAS_STATIC_ASSERT(offsetof(struct mcas_spwr_slot, seq) == 32, "spwr slot layout");
MCAS_STATIC_ASSERT(sizeof(struct mcas_sprd_slot) == MCAS_SLOT_BYTES, "sprd slot layout");
MCAS_STATIC_ASSERT(offsetof(struct mcas_sprd_slot, done_seq) == 16, "sprd slot layout");
MCAS_STATIC_ASSERT(offsetof(struct mcas_sprd_slot, error) == 24, "sprd slot layout");

struct mcas_window {
  struct mcas_header *header;
  struct mcas_spwr_slot *spwr;
  struct mcas_sprd_slot *sprd;
  uint64_t *target;
  uint32_t slots;
  uint64_t target_bytes;
  size_t bytes;
};

static inline uint64_t mcas_load_acquire(const uint64_t *p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static inline void mcas_store_release(uint64_t *p, uint64_t v) {
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
}

static inline uint64_t mcas_target_offset(uint32_t slots) {
  uint64_t end = MCAS_HEADER_BYTES + 2 * (uint64_t)slots * MCAS_SLOT_BYTES;
  return (end + MCAS_PAGE_BYTES - 1) / MCAS_PAGE_BYTES * MCAS_PAGE_BYTES;
}

static inline uint64_t mcas_window_bytes(uint32_t slots, uint64_t target_bytes) {
  return mcas_target_offset(slots) + target_bytes;
}

static inline int mcas_check_geometry(uint32_t slots, uint64_t target_bytes, char *err,
                                      size_t errlen) {
  if (slots == 0 || slots > MCAS_MAX_SLOTS) {
    snprintf(err, errlen, "slots must be between 1 and %u, not %u", MCAS_MAX_SLOTS, slots);
    return -1;
  }
  if (target_bytes == 0 || target_bytes % 8 != 0 || target_bytes > MCAS_MAX_TARGET_BYTES) {
    snprintf(err, errlen,
             "target bytes must be a positive multiple of 8 up to %llu, not %llu",
             (unsigned long long)MCAS_MAX_TARGET_BYTES, (unsigned long long)target_bytes);
    return -1;
  }
  return 0;
}

/* The magic as one 8-byte word, so it can be published and read atomically. */
static inline uint64_t mcas_magic_word(void) {
  uint64_t word;
  memcpy(&word, MCAS_MAGIC, sizeof word);
  return word;
}

static inline void mcas_sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static inline int mcas_map(int fd, uint64_t bytes, struct mcas_window *w, const char *path,
                           char *err, size_t errlen) {
  void *base = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    snprintf(err, errlen, "%s: mmap of %llu bytes: %s", path, (unsigned long long)bytes,
             strerror(errno));
    return -1;
  }
  char *bytes_base = (char *)base;
  w->header = (struct mcas_header *)base;
  w->spwr = (struct mcas_spwr_slot *)(bytes_base + MCAS_HEADER_BYTES);
  w->sprd = (struct mcas_sprd_slot *)(bytes_base + MCAS_HEADER_BYTES +
                                      (uint64_t)w->slots * MCAS_SLOT_BYTES);
  w->target = (uint64_t *)(bytes_base + mcas_target_offset(w->slots));
  w->bytes = (size_t)bytes;
  return 0;
}

/*
 * Opens an existing window and checks its header and size. A window whose magic is still zero is
 * being created by someone else: wait up to MCAS_HEADER_WAIT_MS for it. `slots` and `target_bytes`
 * of 0 accept what the header says; other values must match it.
 */
static inline int mcas_window_open(const char *path, uint32_t slots, uint64_t target_bytes,
                                   struct mcas_window *w, char *err, size_t errlen) {
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    return -1;
  }
  struct mcas_header header;
  struct stat st;
  for (int waited = 0;; waited += 10) {
    if (fstat(fd, &st) != 0) {
      snprintf(err, errlen, "%s: fstat: %s", path, strerror(errno));
      close(fd);
      return -1;
    }
    if ((uint64_t)st.st_size >= sizeof header) {
      uint64_t magic = 0;
      if (pread(fd, &magic, sizeof magic, 0) == (ssize_t)sizeof magic && magic != 0) {
        break;
      }
    }
    if (waited >= MCAS_HEADER_WAIT_MS) {
      snprintf(err, errlen, "%s: no header after %d ms (not an mCAS window, or its creator died)",
               path, MCAS_HEADER_WAIT_MS);
      close(fd);
      return -1;
    }
    mcas_sleep_ms(10);
  }
  if (pread(fd, &header, sizeof header, 0) != (ssize_t)sizeof header) {
    snprintf(err, errlen, "%s: cannot read the header", path);
    close(fd);
    return -1;
  }
  if (memcmp(header.magic, MCAS_MAGIC, sizeof header.magic) != 0) {
    snprintf(err, errlen, "%s: not an mCAS window (bad magic); refusing to touch it", path);
    close(fd);
    return -1;
  }
  if (header.version != MCAS_VERSION) {
    snprintf(err, errlen, "%s: window version %u, this program speaks %u", path, header.version,
             MCAS_VERSION);
    close(fd);
    return -1;
  }
  if (mcas_check_geometry(header.slots, header.target_bytes, err, errlen) != 0) {
    close(fd);
    return -1;
  }
  if ((slots != 0 && slots != header.slots) ||
      (target_bytes != 0 && target_bytes != header.target_bytes)) {
    snprintf(err, errlen,
             "%s: the window has %u slots and %llu target bytes, not %u and %llu; refusing to "
             "reshape a window others may use",
             path, header.slots, (unsigned long long)header.target_bytes,
             slots ? slots : header.slots,
             (unsigned long long)(target_bytes ? target_bytes : header.target_bytes));
    close(fd);
    return -1;
  }
  uint64_t bytes = mcas_window_bytes(header.slots, header.target_bytes);
  if ((uint64_t)st.st_size != bytes) {
    snprintf(err, errlen, "%s: %llu bytes, the header implies %llu (truncated or foreign file)",
             path, (unsigned long long)st.st_size, (unsigned long long)bytes);
    close(fd);
    return -1;
  }
  w->slots = header.slots;
  w->target_bytes = header.target_bytes;
  int rc = mcas_map(fd, bytes, w, path, err, errlen);
  close(fd); /* the mapping keeps the file */
  return rc;
}

/*
 * Creates the window if no file is at `path` (O_EXCL: exactly one creator wins), else opens it as
 * mcas_window_open does. A new file is sized with ftruncate, which reads as zeros, and its header
 * is filled in with the magic published last; an existing window is never zeroed or resized.
 * `slots` / `target_bytes` of 0 mean the defaults when creating and "any" when opening.
 * `*created` tells which happened.
 */
static inline int mcas_window_create_or_open(const char *path, uint32_t slots,
                                             uint64_t target_bytes, struct mcas_window *w,
                                             int *created, char *err, size_t errlen) {
  *created = 0;
  int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST) {
    return mcas_window_open(path, slots, target_bytes, w, err, errlen);
  }
  if (fd < 0) {
    snprintf(err, errlen, "%s: create: %s", path, strerror(errno));
    return -1;
  }
  if (slots == 0) slots = MCAS_DEFAULT_SLOTS;
  if (target_bytes == 0) target_bytes = MCAS_DEFAULT_TARGET_BYTES;
  if (mcas_check_geometry(slots, target_bytes, err, errlen) != 0) {
    close(fd);
    unlink(path);
    return -1;
  }
  uint64_t bytes = mcas_window_bytes(slots, target_bytes);
  if (ftruncate(fd, (off_t)bytes) != 0) {
    snprintf(err, errlen, "%s: ftruncate to %llu bytes: %s", path, (unsigned long long)bytes,
             strerror(errno));
    close(fd);
    unlink(path);
    return -1;
  }
  w->slots = slots;
  w->target_bytes = target_bytes;
  int rc = mcas_map(fd, bytes, w, path, err, errlen);
  close(fd);
  if (rc != 0) {
    unlink(path);
    return -1;
  }
  w->header->version = MCAS_VERSION;
  w->header->slots = slots;
  w->header->target_bytes = target_bytes;
  /* Release: publishes the fields above before the magic; openers read the magic first and the
   * fields after it (mcas_window_open), so they never see a magic with unset fields. */
  mcas_store_release((uint64_t *)(void *)w->header->magic, mcas_magic_word());
  *created = 1;
  return 0;
}

static inline void mcas_window_close(struct mcas_window *w) {
  if (w->header != NULL) {
    munmap((void *)w->header, w->bytes);
    w->header = NULL;
  }
}

/* Whether a process with this id exists (EPERM: it exists but belongs to someone else). */
static inline int mcas_pid_alive(uint64_t pid) {
  return pid != 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
}

#endif /* MCAS_WINDOW_H */
