/*
 * mcas-test-client: end-to-end test of an mCAS server (mcas-cosim) through the shared window.
 *
 *   mcas-test-client --window PATH [--procs P] [--increments N] [--words W] [--timeout-ms T]
 *   mcas-test-client --window PATH --print-words W
 *
 * First, from this process, requests the server must reject: a misaligned target, a target one
 * past the target area, and a requester id that is not its slot. Then P forked processes (slots 0
 * to P-1) each add one to a random word among the first W of the target area, N times, with the
 * client loop an allocator would use: read the word directly, CAS it to value + 1, and on failure
 * retry with the previous value the answer returned. Afterwards:
 *   - every word has grown by exactly the number of successful CASes on it (no lost update);
 *   - the previous values of those successes are exactly initial, initial + 1, ... once each (no
 *     two CASes succeeded against the same value: the server behaved as one linearizable word);
 *   - P * N CASes succeeded in all.
 * Prints one line per failed check, a summary, "checks: X passed, Y failed", and exits 1 if any
 * check failed (2 on a usage error). It waits up to the time-out for the window to appear, and as
 * long for each answer. --print-words prints the first W words and exits; the co-sim
 * test uses it to show that a restarted server kept the window's contents.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <inttypes.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "mcas_window.h"

struct answer {
  uint64_t prev;
  uint64_t success;
  uint64_t error;
};

/* Per-process results, in a shared anonymous mapping the children fill in. */
struct results {
  uint64_t successes;
  uint64_t failures;
  uint64_t spurious; /* failures whose previous value equals the expected one: conflict rule */
  uint64_t log[];    /* (word, previous value) of each success */
};

static int checks_passed, checks_failed;

static void check(int ok, const char *what) {
  if (ok) {
    checks_passed++;
  } else {
    checks_failed++;
    printf("FAIL: %s\n", what);
  }
}

static long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* Waits until the sprd slot's completion sequence reaches `seq`; 0 on time-out. */
static int await_done(struct mcas_sprd_slot *r, uint64_t seq, long timeout_ms) {
  long deadline = now_ms() + timeout_ms;
  for (unsigned spins = 0;; spins++) {
    /* Acquire: pairs with the server's release store; the answer fields are then complete. */
    if (mcas_load_acquire(&r->done_seq) == seq) return 1;
    if (spins % 256 == 255) {
      if (now_ms() > deadline) return 0;
      sched_yield(); /* the server may need this core */
    }
  }
}

/* One mCAS through `slot`. Returns 0, or -1 when the server did not answer in time. */
static int mcas(struct mcas_window *w, uint32_t slot, uint64_t requester, uint64_t expected,
                uint64_t swap, uint64_t target, long timeout_ms, struct answer *out) {
  struct mcas_spwr_slot *s = &w->spwr[slot];
  struct mcas_sprd_slot *r = &w->sprd[slot];
  /* The slot is ours, so its seq needs no atomic read; a request left by an earlier client is
   * answered (again) by the server first, and must be before the slot is reused. */
  uint64_t previous = s->seq;
  if (!await_done(r, previous, timeout_ms)) return -1;
  uint64_t seq = previous + 1 == 0 ? 1 : previous + 1;
  s->expected = expected;
  s->swap = swap;
  s->target = target;
  s->requester = requester;
  /* Release: the server sees the fields above once it sees the new seq (its acquire load). */
  mcas_store_release(&s->seq, seq);
  if (!await_done(r, seq, timeout_ms)) return -1;
  out->prev = r->prev;
  out->success = r->success;
  out->error = r->error;
  return 0;
}

static uint64_t next_random(uint64_t *state) {
  /* xorshift64: reproducible per process, no shared state between the children. */
  uint64_t x = *state;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *state = x;
}

static int increment_loop(struct mcas_window *w, uint32_t slot, uint32_t words,
                          uint32_t increments, long timeout_ms, struct results *res) {
  uint64_t rng = 0x9e3779b97f4a7c15ull * (slot + 1);
  for (uint32_t i = 0; i < increments; i++) {
    uint64_t word = next_random(&rng) % words;
    /* Relaxed: the word is only a guess for the CAS, which checks it. */
    uint64_t expected = __atomic_load_n(&w->target[word], __ATOMIC_RELAXED);
    for (;;) {
      struct answer a;
      if (mcas(w, slot, slot, expected, expected + 1, word * 8, timeout_ms, &a) != 0) {
        fprintf(stderr, "mcas-test-client: slot %u: no answer within %ld ms\n", slot, timeout_ms);
        return 1;
      }
      if (a.error != MCAS_ERR_NONE) {
        fprintf(stderr, "mcas-test-client: slot %u: error %" PRIu64 " on a valid CAS\n", slot,
                a.error);
        return 1;
      }
      if (a.success) {
        if (a.prev != expected) {
          fprintf(stderr, "mcas-test-client: slot %u: success with previous value %" PRIu64
                  ", expected %" PRIu64 "\n", slot, a.prev, expected);
          return 1;
        }
        res->log[2 * res->successes] = word;
        res->log[2 * res->successes + 1] = a.prev;
        res->successes++;
        break;
      }
      res->failures++;
      res->spurious += a.prev == expected;
      expected = a.prev;
    }
  }
  return 0;
}

static int compare_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

static void check_rejections(struct mcas_window *w, long timeout_ms) {
  struct answer a;
  char what[160];
  struct {
    const char *name;
    uint64_t requester, target, error;
  } cases[] = {
      {"misaligned target", 0, 4, MCAS_ERR_BAD_TARGET},
      {"target one past the target area", 0, w->target_bytes, MCAS_ERR_BAD_TARGET},
      {"requester id that is not the slot", 1, 0, MCAS_ERR_BAD_ID},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int answered = mcas(w, 0, cases[i].requester, 0, 0, cases[i].target, timeout_ms, &a) == 0;
    snprintf(what, sizeof what, "%s: answered with error %" PRIu64 " (want %" PRIu64 ")",
             cases[i].name, answered ? a.error : UINT64_MAX, cases[i].error);
    check(answered && a.error == cases[i].error && a.success == 0 && a.prev == 0, what);
  }
}

static void usage(const char *message) {
  fprintf(stderr,
          "mcas-test-client: %s\n"
          "usage: mcas-test-client --window PATH [--procs P] [--increments N] [--words W] "
          "[--timeout-ms T]\n"
          "       mcas-test-client --window PATH --print-words W\n",
          message);
  exit(2);
}

static uint32_t parse_u32(const char *text, const char *what, uint32_t min, uint32_t max) {
  char *end;
  errno = 0;
  unsigned long value = strtoul(text, &end, 10);
  if (errno || end == text || *end || text[0] == '-' || value < min || value > max) {
    char message[128];
    snprintf(message, sizeof message, "%s must be between %u and %u", what, min, max);
    usage(message);
  }
  return (uint32_t)value;
}

int main(int argc, char **argv) {
  const char *path = NULL;
  uint32_t procs = 4, increments = 200, words = 3, print_words = 0;
  long timeout_ms = 10000;
  static const struct option longopts[] = {
      {"window", required_argument, NULL, 'w'},   {"procs", required_argument, NULL, 'p'},
      {"increments", required_argument, NULL, 'n'}, {"words", required_argument, NULL, 'k'},
      {"timeout-ms", required_argument, NULL, 't'}, {"print-words", required_argument, NULL, 'P'},
      {NULL, 0, NULL, 0},
  };
  int c;
  while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
    switch (c) {
      case 'w': path = optarg; break;
      case 'p': procs = parse_u32(optarg, "--procs", 1, 4096); break;
      case 'n': increments = parse_u32(optarg, "--increments", 1, 1000000); break;
      case 'k': words = parse_u32(optarg, "--words", 1, 1u << 20); break;
      case 't': timeout_ms = parse_u32(optarg, "--timeout-ms", 1, 3600000); break;
      case 'P': print_words = parse_u32(optarg, "--print-words", 1, 1u << 20); break;
      default: usage("unknown option");
    }
  }
  if (optind != argc) usage("unexpected argument");
  if (path == NULL) usage("--window is required");

  /* The server may still be starting: wait for the window to appear. */
  for (long waited = 0; access(path, F_OK) != 0 && waited < timeout_ms; waited += 10) {
    mcas_sleep_ms(10);
  }
  struct mcas_window w = {0};
  char err[512];
  if (mcas_window_open(path, 0, 0, &w, err, sizeof err) != 0) {
    fprintf(stderr, "mcas-test-client: %s\n", err);
    return 1;
  }
  if (print_words != 0) {
    if ((uint64_t)print_words * 8 > w.target_bytes) usage("--print-words beyond the target area");
    for (uint32_t i = 0; i < print_words; i++) {
      printf("%s%" PRIu64, i ? " " : "", mcas_load_acquire(&w.target[i]));
    }
    printf("\n");
    return 0;
  }
  if (procs > w.slots) usage("--procs exceeds the window's slots");
  if ((uint64_t)words * 8 > w.target_bytes) usage("--words exceeds the target area");

  check_rejections(&w, timeout_ms);

  uint64_t *initial = calloc(words, sizeof *initial);
  uint64_t *per_word = calloc(words, sizeof *per_word);
  uint64_t *prevs = calloc((size_t)procs * increments, sizeof *prevs);
  size_t res_bytes = sizeof(struct results) + 2 * sizeof(uint64_t) * increments;
  struct results *res = mmap(NULL, res_bytes * procs, PROT_READ | PROT_WRITE,
                             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (!initial || !per_word || !prevs || res == MAP_FAILED) {
    fprintf(stderr, "mcas-test-client: out of memory\n");
    return 1;
  }
  for (uint32_t i = 0; i < words; i++) initial[i] = mcas_load_acquire(&w.target[i]);

  long start = now_ms();
  for (uint32_t p = 0; p < procs; p++) {
    pid_t pid = fork();
    if (pid < 0) {
      fprintf(stderr, "mcas-test-client: fork: %s\n", strerror(errno));
      return 1;
    }
    if (pid == 0) {
      struct results *mine = (struct results *)((char *)res + res_bytes * p);
      _exit(increment_loop(&w, p, words, increments, timeout_ms, mine));
    }
  }
  int children_ok = 1;
  for (uint32_t p = 0; p < procs; p++) {
    int status;
    if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) children_ok = 0;
  }
  long elapsed = now_ms() - start;
  check(children_ok, "every process finished its increments without an error");

  uint64_t successes = 0, failures = 0, spurious = 0;
  for (uint32_t p = 0; p < procs; p++) {
    struct results *r = (struct results *)((char *)res + res_bytes * p);
    successes += r->successes;
    failures += r->failures;
    spurious += r->spurious;
    for (uint64_t i = 0; i < r->successes; i++) per_word[r->log[2 * i]]++;
  }
  char what[200];
  snprintf(what, sizeof what, "%" PRIu64 " CASes succeeded, want %" PRIu64, successes,
           (uint64_t)procs * increments);
  check(successes == (uint64_t)procs * increments, what);

  for (uint32_t word = 0; word < words; word++) {
    uint64_t final = mcas_load_acquire(&w.target[word]);
    snprintf(what, sizeof what,
             "word %u: %" PRIu64 " after %" PRIu64 " successful increments from %" PRIu64, word,
             final, per_word[word], initial[word]);
    check(final == initial[word] + per_word[word], what);

    size_t n = 0;
    for (uint32_t p = 0; p < procs; p++) {
      struct results *r = (struct results *)((char *)res + res_bytes * p);
      for (uint64_t i = 0; i < r->successes; i++) {
        if (r->log[2 * i] == word) prevs[n++] = r->log[2 * i + 1] - initial[word];
      }
    }
    qsort(prevs, n, sizeof *prevs, compare_u64);
    size_t first_gap = n;
    for (size_t i = 0; i < n; i++) {
      if (prevs[i] != i) {
        first_gap = i;
        break;
      }
    }
    snprintf(what, sizeof what,
             "word %u: the successes' previous values are initial + 0..%zu, each once", word,
             n ? n - 1 : 0);
    check(first_gap == n, what);
  }

  printf("mcas-test-client: %u processes x %u increments on %u words in %ld ms: %" PRIu64
         " CASes succeeded, %" PRIu64 " failed (%" PRIu64
         " with the expected value: lost to the conflict rule)\n",
         procs, increments, words, elapsed, successes, failures, spurious);
  printf("checks: %d passed, %d failed\n", checks_passed, checks_failed);
  mcas_window_close(&w);
  return checks_failed ? 1 : 0;
}
