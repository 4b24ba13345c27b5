#!/usr/bin/env bash
# All tests: formatting, lints, API docs (no broken links), unit/property/integration tests (plus the `validate` feature
# and the crash-point enumeration of the `crash-points` feature),
# the loom models, miri over the unsafe code, the Nix dev shell's syntax, the plot/ Python tests, the fpga/
# RTL testbenches and co-simulation (script/fpga.sh), and the
# main job end to end on workloads/mini.toml, the crash test on workloads/crash.toml, cxlkv
# (the memcached on one heap) under memccapable, pymemcache and SIGKILLs (script/kvserver.sh), and
# Debian programs (redis, memcached, python3, sqlite3, shell pipelines) on the LD_PRELOAD library.
#
# Usage: script/test.sh
# Every step runs even when an earlier one fails; the summary at the end lists each step's
# result, time and the system packages it relied on, the script exits non-zero if any step
# failed, and the last line sums the cargo test counts. Logs: target/test-logs/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=script/setup.sh
. script/setup.sh

start=$SECONDS
ensure_cc
ensure_baselines
ensure_rust

# The system packages each step relies on. script/setup.sh `sysdep_files` names, per package, the
# exact files that prove it is installed. Before a step runs, missing packages are installed; when
# it fails, those files are checked again and each absent one is named, so a missing dependency is
# told apart from a real failure. (Optional ones count too: without Boost the crash test skips.)
declare -A STEP_DEPS=(
  [clippy]="build-essential"
  [doc]="build-essential"
  [test]="build-essential libboost-dev libpmemobj-dev"
  [test-validate]="build-essential"
  [crash-points]="build-essential"
  [noncoherent]="build-essential"
  [icount]="build-essential valgrind"
  [mcas-device]="build-essential libclang-dev"
  [loom]="build-essential"
  [miri]="build-essential"
  [flake]="nix-bin"
  [plot]="python3 python3-venv"
  [fpga]="build-essential iverilog yosys z3 nextpnr-ice40 python3 python3-venv libpython3"
  [main-job]="build-essential libboost-dev libpmemobj-dev python3 python3-venv"
  [crash-job]="build-essential libboost-dev python3 python3-venv"
  [kvserver]="build-essential memcached libmemcached-tools python3 python3-venv"
  [preload]="build-essential python3 redis-server redis-tools memcached libmemcached-tools sqlite3"
  [pod]="build-essential python3 qemu-system-x86 busybox-static cpio linux-image-amd64"
)

logs=target/test-logs
mkdir -p "$logs"
rm -f "$logs"/*.log
names=()
results=()
times=()
failed=0

# step NAME CMD... — installs the step's missing system packages (STEP_DEPS), runs CMD, logging
# its output to $logs/NAME.log; when CMD fails, names each of the step's dependencies that is
# still missing.
step() {
  local name=$1
  shift
  local t0=$SECONDS dep why missing=""
  echo
  echo "==> $name: $*"
  # shellcheck disable=SC2086 # a list of package names
  ensure_sysdeps ${STEP_DEPS[$name]:-} || echo "==> $name: could not install its system dependencies; running it anyway"
  if "$@" 2>&1 | tee "$logs/$name.log"; then
    results+=("ok")
  else
    for dep in ${STEP_DEPS[$name]:-}; do
      if why=$(sysdep_missing "$dep"); then
        echo "step $name failed; missing system dependency $(sysdep_package "$dep"): $why" |
          tee -a "$logs/$name.log"
        missing+=" $(sysdep_package "$dep")"
      fi
    done
    results+=("FAILED${missing:+ (missing:$missing)}")
    failed=$((failed + 1))
  fi
  names+=("$name")
  times+=("$((SECONDS - t0))s")
}

# skip NAME REASON — records a step that could not run here.
skip() {
  echo
  echo "==> $1: skipped ($2)"
  names+=("$1")
  results+=("skipped: $2")
  times+=("-")
}

step fmt cargo fmt --all -- --check
step clippy cargo clippy --workspace --all-targets -- -D warnings
step doc env RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps
step test cargo test --workspace --no-fail-fast
step test-validate cargo test -p cxlalloc --features validate
step crash-points sh -c 'cargo test -p cxlalloc --features crash-points --test crash_points --test hosts &&
  cargo test -p cxlalloc-cli --features crash-points --test crash_points'
step noncoherent cargo test -p cxlalloc --features noncoherent-sim --test noncoherent
# Instruction counts of the fast paths (local alloc/free, remote free, batched remote free,
# refill) in every coherence model under callgrind, against script/icount.baseline: fails when
# one grows more than 5 % (about a minute).
step icount script/icount.sh
# bindgen loads libclang to generate the userfaultfd crate's bindings (STEP_DEPS installs it).
step mcas-device sh -c 'cargo clippy -p cxlalloc --all-targets --features mcas-standin -- -D warnings &&
  cargo test -p cxlalloc --features mcas-standin --lib --test mcas_device'

if [ -x script/loom.sh ]; then
  step loom script/loom.sh
else
  skip loom "script/loom.sh is not there yet"
fi

if ensure_miri; then
  step miri script/miri.sh
else
  skip miri "the nightly toolchain with miri could not be installed"
fi

if ensure_sysdeps nix-bin >/dev/null 2>&1; then
  step flake nix-instantiate --parse flake.nix
else
  skip flake "nix-instantiate unavailable and nix-bin could not be installed"
fi

if ensure_venv; then
  step plot "$PYTHON" -m unittest discover -s plot/tests
else
  skip plot "the Python venv for plot/ could not be set up"
fi

# The pod: QEMU guests (each a host of its own) and this machine on one heap device; blocks
# allocated on one guest, checked and freed on another; the cxlkv table under YCSB A with a
# worker on two guests and here, every value read checked (~30 s); a guest holding every slot
# never adopted from here; a guest killed mid-workload recovered with `recover --host` (about 2-2.5 minutes on
# this machine under TCG, plus the kernel package's install on a fresh one).
step pod script/pod.sh test

# The mCAS unit's RTL: lint, Icarus and cocotb testbenches, the Figure 6 waveform, the
# Verilator co-simulation behind a shared-memory window, the formal properties with their mutants,
# and the synthesis report (about 4 minutes on a fresh machine).
step fpga script/fpga.sh

step main-job script/run.sh workloads/mini.toml
# The black-box crash test: 50 SIGKILLs per run under load, cxlalloc with and without recovery
# and Boost (about 25 s; cargo test runs a 10-kill version, crash-soak.toml the 1000-kill one).
step crash-job script/run.sh workloads/crash.toml
# cxlkv, the memcached on one heap: memccapable -a (all ASCII tests must pass), the pymemcache
# functional and crash-point tests, and a 10-kill crash test (about 1.5 min; KV_CRASH_SOAK=1 adds
# the minute-long one).
step kvserver script/kvserver.sh test

# Debian programs on the LD_PRELOAD library: redis, memcached, python3, sqlite3, shell
# pipelines, a thread-heavy C program; same output as without it, clean heaps (about a minute).
step preload script/preload.sh

echo
echo "==> summary"
printf '  %-14s %-8s %-40s %s\n' step time result "system packages relied on"
for i in "${!names[@]}"; do
  printf '  %-14s %-8s %-40s %s\n' "${names[$i]}" "${times[$i]}" "${results[$i]}" \
    "${STEP_DEPS[${names[$i]}]:--}"
done
passed=0
tfailed=0
while read -r p f; do
  passed=$((passed + p))
  tfailed=$((tfailed + f))
done < <(cat "$logs"/*.log | sed -nE 's/^test result: [A-Za-z]+\. ([0-9]+) passed; ([0-9]+) failed.*/\1 \2/p')
echo "  elapsed: $((SECONDS - start))s, $failed step(s) failed"
echo "tests: $passed passed, $tfailed failed"
[ "$failed" -eq 0 ]
