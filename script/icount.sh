#!/usr/bin/env bash
# Per-operation instruction counts of the allocator's fast paths, and a guard on them.
#
# Usage: script/icount.sh [--update]
#
# Builds the `icount` driver (cxlalloc-bench/src/bin/icount.rs) in release and runs each
# scenario — local_alloc, local_free, remote_free, remote_free_batched, refill — in each
# coherence model (full, limited, none) under `valgrind --tool=callgrind`. A scenario's count is
# the instruction count of the driver's measured function (callgrind collects only inside it),
# less what its mCAS requests spent waiting for the device's answer (`McasClient::answer_wait`,
# which depends on scheduling), divided by the operations it performed. Instruction counts do not depend on the
# machine's load, so the check is safe on a busy machine.
#
# Compares every count with script/icount.baseline and fails if any grew more than 2 %; counts
# that shrank more than 2 % are reported (update the baseline to keep the gain). The counts repeat
# exactly from run to run (measured: two runs, all 15 equal to the tenth), so 2 % is only slack
# for toolchain drift; 5 % let a 5-instruction regression of the full model's local free (+4.2 %)
# through. --update
# rewrites the baseline from this run: commit it with the change that moved it, and say why in
# the commit message.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

baseline=script/icount.baseline
tolerance=2
update=0
[ "${1:-}" = --update ] && update=1

command -v valgrind >/dev/null || { echo "icount: valgrind is not installed" >&2; exit 1; }
cargo build --release --quiet -p cxlalloc-bench --bin icount
bin=target/release/icount
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

models=(full limited none)
scenarios=(local_alloc local_free remote_free remote_free_batched refill)

# The inclusive count of the function whose name matches $2 in callgrind output $1 (0 if absent).
inclusive() {
  callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null |
    awk -v pat="$2" '!found && $0 ~ pat && / \[/ { gsub(",", "", $1); print $1; found = 1 } END { if (!found) print 0 }'
}

results=$work/results
for model in "${models[@]}"; do
  for scenario in "${scenarios[@]}"; do
    out=$work/cg.$model.$scenario
    ops=$(valgrind --tool=callgrind --toggle-collect='icount::measure_*' --callgrind-out-file="$out" "$bin" "$model" "$scenario" 2>"$work/log" |
      awk '/^ops / { print $2 }') || { cat "$work/log" >&2; exit 1; }
    [ -n "$ops" ] || { echo "icount: $model $scenario printed no operation count" >&2; cat "$work/log" >&2; exit 1; }
    measured=$(inclusive "$out" ':icount::measure_[a-z_]* ')
    waited=$(inclusive "$out" ':cxlalloc::mcas::client::McasClient::answer_wait ')
    [ "$measured" -gt 0 ] || { echo "icount: no measured function in the $model $scenario profile" >&2; exit 1; }
    awk -v m="$model" -v s="$scenario" -v i="$((measured - waited))" -v n="$ops" \
      'BEGIN { printf "%s %s %.1f\n", m, s, i / n }' >>"$results"
  done
done

if [ "$update" = 1 ]; then
  {
    echo "# Instructions per operation of the fast paths (script/icount.sh): model scenario count."
    echo "# Regenerate with script/icount.sh --update; commit with the reason in the message."
    cat "$results"
  } >"$baseline"
  echo "icount: baseline written to $baseline"
  cat "$results"
  exit 0
fi

[ -f "$baseline" ] || { echo "icount: no baseline ($baseline); run script/icount.sh --update" >&2; exit 1; }
awk -v tol="$tolerance" '
  NR == FNR { if ($0 !~ /^#/ && NF == 3) base[$1 " " $2] = $3; next }
  {
    key = $1 " " $2
    if (!(key in base)) { printf "%-8s %-20s %9.1f   (not in the baseline)\n", $1, $2, $3; missing++; next }
    b = base[key]; change = b > 0 ? 100 * ($3 - b) / b : 0
    verdict = change > tol ? "GREW" : (change < -tol ? "shrank: update the baseline" : "ok")
    printf "%-8s %-20s %9.1f   baseline %9.1f  %+6.1f %%  %s\n", $1, $2, $3, b, change, verdict
    if (change > tol) grew++
  }
  END {
    if (grew || missing) { printf "icount: %d count(s) grew more than %d %%, %d not in the baseline\n", grew, tol, missing; exit 1 }
    print "icount: every count within " tol " % of the baseline or below"
  }' "$baseline" "$results"
