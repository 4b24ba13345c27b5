#!/usr/bin/env bash
# Model-checks the lock-free protocols (cxlalloc/src/protocol) with loom: cxlalloc/tests/loom.rs.
#
# Builds with `--cfg loom` into its own target dir (target/loom), so the normal build cache is
# left alone. Preemption bounds are set per model in tests/loom.rs (its header has the table);
# LOOM_MAX_PREEMPTIONS=n overrides all of them for experiments. Extra arguments go to the test
# harness, e.g. `script/loom.sh remote_` to run only the remote-counter models.
#
# The harness runs the models one at a time (--test-threads 1): loom allocates a coroutine stack
# per model thread per execution, and two models in parallel in one process spend their time in
# the kernel (measured: 190 s wall, 212 s sys, against 79 s one at a time).
#
# Measured on the 2-core dev machine (other builds running, load ~1.5), release build already
# compiled: 13 tests (9 models and 4 negative controls), 79 s wall in all; with the hazard and
# detectable-CAS models, 24 tests (13 models, 11 negative controls), 93 s (load ~0.1); the
# fault-handler registry models add 3 tests (2 models, 1 negative control), 1.4 s;
# the host-table models (docs/design.md §8.6) add 5 tests (2 models, 3 negative controls), 0.4 s;
# the host-number claim models (docs/design.md §9.2) add 2 tests (1 model, 1 negative control), 0.5 s;
# the huge-mapping eviction model (docs/design.md §7.4) adds 2 tests (1 model, 1 negative
# control): 1792 executions at preemption bound 3, 0.24 s;
# the huge owner's own-entry model (docs/design.md §7.6) adds 2 tests (1 model, 1 negative
# control): 8 executions unbounded, < 0.1 s;
# the huge kept-mapping model (docs/design.md §7.6) adds 2 tests (1 model, 1 negative
# control): 37 executions unbounded, < 0.1 s;
# the free-mark models (docs/design.md §4.1) add 5 tests (2 models, 3 negative controls): 608
# executions at preemption bound 3, 0.1 s;
# a cold build of loom and its dependencies adds ~40 s.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=script/setup.sh
. script/setup.sh

# The loom build compiles code the normal clippy step never sees (the `cfg(loom)` branches of
# the sync facade and its users): lint it too on a full run.
if [ $# -eq 0 ]; then
  RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
    cargo clippy -p cxlalloc -p cxlkv --lib --test loom -- -D warnings
fi
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
  cargo test -p cxlalloc --test loom --release -- --nocapture --test-threads 1 "$@"
# cxlkv's detectable publish (docs/design.md §16.3): 1 model, 2 negative controls, < 0.1 s.
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
  cargo test -p cxlkv --test loom --release -- --nocapture --test-threads 1 "$@"
