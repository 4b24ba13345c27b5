// mcas-cosim: serves the mCAS RTL (fpga/rtl/mcas_unit.sv, Verilated) to software through the
// shared-memory window of mcas_window.h, so an mCAS client can drive the simulated hardware exactly
// as it drives the software mCAS device.
//
//   mcas-cosim --window PATH [--slots N] [--target-bytes B] [--latency CYCLES] [--quiet]
//
// The window is created when PATH does not exist (MCAS_DEFAULT_SLOTS slots and
// MCAS_DEFAULT_TARGET_BYTES target bytes unless given) and otherwise opened and checked against
// the options given: a window is never zeroed or reshaped, and a window that a live server already
// serves is refused. Slot i is requester i of the RTL.
//
// Each clock cycle the harness
//   - polls the doorbells of the slots with nothing in flight and queues a spwr for every new
//     request (a request whose requester id is not its slot is answered with MCAS_ERR_BAD_ID here,
//     so it cannot disturb another slot's register);
//   - offers the unit one request: queued spwrs first, so that requests arriving together are
//     parked together and the conflict rule sees real contention; a spwr, once accepted, queues
//     its sprd;
//   - serves the unit's memory port from the window's target area with a fixed latency (writes
//     land when acknowledged), so software can read the words directly;
//   - writes each answer into the requester's sprd slot, completion sequence last.
// It sleeps briefly when nothing is in flight, and on SIGTERM or SIGINT stops taking doorbells,
// answers what is in flight, releases the window and exits 0.

#include <getopt.h>
#include <sched.h>

#include <cerrno>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "Vmcas_unit.h"
#include "mcas_window.h"
#include "verilated.h"

#ifndef MCAS_REQUESTERS
#error "build with -DMCAS_REQUESTERS=<the RTL's NUM_REQUESTERS>"
#endif

namespace {

volatile std::sig_atomic_t stop_requested = 0;

void on_signal(int) { stop_requested = 1; }

// Spins over the doorbells before sleeping when idle: long enough to catch a client's next request
// without a sleep in between, short enough not to burn a core that the clients need.
constexpr int IDLE_SPINS = 2000;
constexpr long IDLE_SLEEP_NS = 50000;

struct Options {
  std::string window;
  uint32_t slots = 0;
  uint64_t target_bytes = 0;
  uint32_t latency = 4;
  bool quiet = false;
};

[[noreturn]] void usage(const char *message) {
  std::fprintf(stderr,
               "mcas-cosim: %s\n"
               "usage: mcas-cosim --window PATH [--slots N] [--target-bytes B] "
               "[--latency CYCLES] [--quiet]\n",
               message);
  std::exit(2);
}

uint64_t parse_number(const char *text, const char *what) {
  char *end = nullptr;
  errno = 0;
  unsigned long long value = std::strtoull(text, &end, 0);
  if (errno != 0 || end == text || *end != '\0' || text[0] == '-') {
    usage((std::string("bad ") + what + ": " + text).c_str());
  }
  return value;
}

Options parse_options(int argc, char **argv) {
  static const option longopts[] = {
      {"window", required_argument, nullptr, 'w'},
      {"slots", required_argument, nullptr, 's'},
      {"target-bytes", required_argument, nullptr, 't'},
      {"latency", required_argument, nullptr, 'l'},
      {"quiet", no_argument, nullptr, 'q'},
      {nullptr, 0, nullptr, 0},
  };
  Options o;
  int c;
  while ((c = getopt_long(argc, argv, "", longopts, nullptr)) != -1) {
    switch (c) {
      case 'w': o.window = optarg; break;
      case 's': {
        uint64_t slots = parse_number(optarg, "--slots");
        if (slots == 0 || slots > MCAS_REQUESTERS) {
          usage(("--slots must be between 1 and " + std::to_string(MCAS_REQUESTERS) +
                 ", the requesters this RTL build has")
                    .c_str());
        }
        o.slots = static_cast<uint32_t>(slots);
        break;
      }
      case 't': o.target_bytes = parse_number(optarg, "--target-bytes"); break;
      case 'l': {
        uint64_t latency = parse_number(optarg, "--latency");
        if (latency == 0 || latency > 1000000) usage("--latency must be between 1 and 1000000");
        o.latency = static_cast<uint32_t>(latency);
        break;
      }
      case 'q': o.quiet = true; break;
      default: usage("unknown option");
    }
  }
  if (optind != argc) usage("unexpected argument");
  if (o.window.empty()) usage("--window is required");
  return o;
}

// Claims the window for this process: refused while another live process holds it; a holder that
// died without releasing it is replaced.
bool claim(mcas_window &w, const std::string &path) {
  uint64_t me = static_cast<uint64_t>(getpid());
  uint64_t *holder = &w.header->server_pid;
  uint64_t current = mcas_load_acquire(holder);
  for (;;) {
    if (current != 0 && current != me && mcas_pid_alive(current)) {
      std::fprintf(stderr, "mcas-cosim: %s is already served by process %" PRIu64 "\n",
                   path.c_str(), current);
      return false;
    }
    // AcqRel: on success orders our later slot accesses after the previous holder's release.
    if (__atomic_compare_exchange_n(holder, &current, me, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE)) {
      return true;
    }
  }
}

void release(mcas_window &w) {
  uint64_t me = static_cast<uint64_t>(getpid());
  // Release: our last answers are visible before the slot is free for another server.
  __atomic_compare_exchange_n(&w.header->server_pid, &me, 0, false, __ATOMIC_RELEASE,
                              __ATOMIC_RELAXED);
}

struct Stats {
  uint64_t cycles = 0;
  uint64_t answered = 0;
  uint64_t succeeded = 0;
  uint64_t compared = 0;  // answers decided by a memory read
  uint64_t rejected = 0;  // answers with an error code
};

class Harness {
 public:
  Harness(mcas_window &w, uint32_t latency)
      : w_(w),
        latency_(latency),
        seen_(w.slots),
        inflight_(w.slots),
        model_(std::make_unique<Vmcas_unit>(&context_)) {
    for (uint32_t slot = 0; slot < w.slots; slot++) {
      // A request left unanswered by a previous server (seq ahead of done_seq) is served again.
      seen_[slot] = mcas_load_acquire(&w.sprd[slot].done_seq);
    }
    model_->cfg_words = w.target_bytes / 8;
    model_->rst = 1;
    for (int i = 0; i < 3; i++) cycle();
    model_->rst = 0;
  }

  ~Harness() { model_->final(); }

  // Runs until a stop is requested, then drains what is in flight.
  void serve() {
    int idle_spins = 0;
    while (!stop_requested) {
      poll_doorbells();
      if (busy()) {
        cycle();
        idle_spins = 0;
      } else if (++idle_spins < IDLE_SPINS) {
        sched_yield();
      } else {
        timespec ts{0, IDLE_SLEEP_NS};
        nanosleep(&ts, nullptr);
      }
    }
    // Requests in flight are still answered, so no client waits forever for a server that has
    // gone. They are served one after another, each within 2 memory latencies and a few cycles;
    // the bound (twice that) only matters if the RTL stopped answering.
    uint64_t limit = stats_.cycles + 2 * (2 * uint64_t{latency_} + 8) * w_.slots;
    while (busy() && stats_.cycles < limit) cycle();
    if (busy()) std::fprintf(stderr, "mcas-cosim: requests still in flight after the drain\n");
  }

  const Stats &stats() const { return stats_; }

 private:
  struct Request {
    uint64_t seq, expected, swap, target;
  };
  struct Offer {
    bool spwr;
    uint32_t slot;
  };
  struct Access {
    bool write;
    uint64_t word, wdata, due;
  };

  bool busy() const { return inflight_count_ > 0; }

  void poll_doorbells() {
    for (uint32_t slot = 0; slot < w_.slots; slot++) {
      if (inflight_[slot]) continue;  // one request per slot; a second doorbell waits its turn
      mcas_spwr_slot &s = w_.spwr[slot];
      // Acquire: pairs with the client's release store of seq; the fields below are its request.
      uint64_t seq = mcas_load_acquire(&s.seq);
      if (seq == seen_[slot] || seq == 0) continue;
      seen_[slot] = seq;
      Request r{seq, s.expected, s.swap, s.target};
      if (s.requester != slot) {
        answer(slot, seq, 0, false, MCAS_ERR_BAD_ID);
        continue;
      }
      inflight_[slot] = r;
      inflight_count_++;
      spwrs_.push_back(slot);
    }
  }

  // One clock cycle: inputs settle with the clock low, the transfers of the rising edge are read
  // off the settled ports, then the edge is taken and the transfers are acted upon.
  void cycle() {
    Vmcas_unit &m = *model_;
    stats_.cycles++;

    std::optional<Access> responding;
    if (access_ && access_->due == stats_.cycles) responding = access_;
    m.mem_rsp_valid = responding.has_value();
    if (responding) {
      // Acquire: the word as software last published it (the target area is shared memory).
      m.mem_rsp_rdata = mcas_load_acquire(&w_.target[responding->word]);
    }
    m.mem_req_ready = !access_.has_value();
    if (!offer_) {
      if (!spwrs_.empty()) {
        offer_ = Offer{true, spwrs_.front()};
        spwrs_.pop_front();
      } else if (!sprds_.empty()) {
        offer_ = Offer{false, sprds_.front()};
        sprds_.pop_front();
      }
      if (offer_) drive(*offer_);
    }
    m.req_valid = offer_.has_value();
    m.rsp_ready = 1;

    m.clk = 0;
    m.eval();
    bool req_fire = offer_ && m.req_ready;
    bool rsp_fire = m.rsp_valid;
    bool mem_fire = m.mem_req_valid && m.mem_req_ready;
    Access issued{m.mem_req_write != 0, m.mem_req_addr, m.mem_req_wdata,
                  stats_.cycles + latency_};
    uint64_t rsp_slot = m.rsp_id;
    uint64_t rsp_prev = static_cast<uint64_t>(m.rsp_line[1]) << 32 | m.rsp_line[0];
    bool rsp_success = m.rsp_line[2] & 1;
    uint64_t rsp_error = m.rsp_error;

    m.clk = 1;
    m.eval();

    if (responding) {
      access_.reset();
      if (responding->write) {
        // Release: the swap value is published before the answer that reports it.
        mcas_store_release(&w_.target[responding->word], responding->wdata);
      } else {
        stats_.compared++;
      }
    }
    if (mem_fire) {
      if (issued.word >= w_.target_bytes / 8) {
        // The unit checks targets against cfg_words; an access outside means the RTL is broken.
        std::fprintf(stderr, "mcas-cosim: the RTL accessed word %" PRIu64 " beyond the window\n",
                     issued.word);
        std::abort();
      }
      access_ = issued;
    }
    if (req_fire) {
      if (offer_->spwr) sprds_.push_back(offer_->slot);
      offer_.reset();
    }
    if (rsp_fire) {
      if (rsp_slot >= w_.slots || !inflight_[rsp_slot]) {
        std::fprintf(stderr, "mcas-cosim: the RTL answered requester %" PRIu64
                             ", which has nothing in flight\n", rsp_slot);
        std::abort();
      }
      uint32_t slot = static_cast<uint32_t>(rsp_slot);
      answer(slot, inflight_[slot]->seq, rsp_prev, rsp_success, rsp_error);
      inflight_[slot].reset();
      inflight_count_--;
    }
  }

  void drive(const Offer &o) {
    Vmcas_unit &m = *model_;
    m.req_spwr = o.spwr;
    m.req_id = o.slot;
    const Request &r = *inflight_[o.slot];
    uint64_t fields[4] = {r.expected, r.swap, r.target, o.slot};
    for (int i = 0; i < 16; i++) {
      uint64_t word = i < 8 ? fields[i / 2] : 0;
      m.req_line[i] = static_cast<uint32_t>(i % 2 ? word >> 32 : word);
    }
  }

  void answer(uint32_t slot, uint64_t seq, uint64_t prev, bool success, uint64_t error) {
    mcas_sprd_slot &s = w_.sprd[slot];
    s.prev = prev;
    s.success = success;
    s.error = error;
    // Release: the fields above are visible before the client sees its sequence number.
    mcas_store_release(&s.done_seq, seq);
    stats_.answered++;
    stats_.succeeded += success;
    stats_.rejected += error != MCAS_ERR_NONE;
  }

  mcas_window &w_;
  uint32_t latency_;
  std::vector<uint64_t> seen_;
  std::vector<std::optional<Request>> inflight_;
  uint32_t inflight_count_ = 0;
  std::deque<uint32_t> spwrs_, sprds_;
  std::optional<Offer> offer_;
  std::optional<Access> access_;
  Stats stats_;
  VerilatedContext context_;
  std::unique_ptr<Vmcas_unit> model_;
};

}  // namespace

int main(int argc, char **argv) {
  Options o = parse_options(argc, argv);

  mcas_window w{};
  int created = 0;
  char err[512];
  if (mcas_window_create_or_open(o.window.c_str(), o.slots, o.target_bytes, &w, &created, err,
                                 sizeof err) != 0) {
    std::fprintf(stderr, "mcas-cosim: %s\n", err);
    return 1;
  }
  if (w.slots > MCAS_REQUESTERS) {
    std::fprintf(stderr, "mcas-cosim: %s has %u slots; this RTL build has %d requesters\n",
                 o.window.c_str(), w.slots, MCAS_REQUESTERS);
    return 1;
  }
  if (!claim(w, o.window)) return 1;

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);

  if (!o.quiet) {
    std::printf("mcas-cosim: %s %s: %u slots, %" PRIu64 " target bytes, memory latency %u "
                "cycles\n",
                created ? "created" : "opened", o.window.c_str(), w.slots, w.target_bytes,
                o.latency);
    std::fflush(stdout);
  }
  Stats stats;
  {
    Harness harness(w, o.latency);
    harness.serve();
    stats = harness.stats();
  }
  release(w);
  mcas_window_close(&w);
  if (!o.quiet) {
    std::printf("mcas-cosim: %" PRIu64 " cycles, %" PRIu64 " answers: %" PRIu64
                " succeeded, %" PRIu64 " decided by a memory read, %" PRIu64
                " failed by the conflict rule, %" PRIu64 " rejected\n",
                stats.cycles, stats.answered, stats.succeeded, stats.compared,
                stats.answered - stats.compared - stats.rejected, stats.rejected);
  }
  return 0;
}
