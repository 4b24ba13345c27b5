#!/usr/bin/env bash
# Main job: script/run.sh WORKLOAD   (e.g. script/run.sh workloads/mini.toml)
#
# Installs what is missing (a C toolchain, the baselines' Debian packages, Rust, a Python venv
# for plot/), builds the harness in release mode, runs every configuration of WORKLOAD
# (driver -> coordinator -> worker processes, docs/design.md §12), prints the results table, writes
# one NDJSON line per worker process to results/NAME-DATE.ndjson, draws the figures into
# results/NAME-DATE/ (PNG and PDF) and prints the headline: every configuration against its target.
# Exits non-zero when any run failed (the rest still run and are reported).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=script/setup.sh
. script/setup.sh

if [ $# -ne 1 ] || [ ! -f "$1" ]; then
  echo "usage: script/run.sh WORKLOAD.toml   (e.g. workloads/mini.toml)" >&2
  exit 2
fi
workload=$1
# A [kvserver] workload is the cxlkv-vs-memcached comparison (script/kvserver.sh, docs/design.md §16).
if grep -q '^\[kvserver\]' "$workload"; then
  exec script/kvserver.sh load "$workload"
fi
name=$(basename "$workload" .toml)
stamp=$(date -u +%Y%m%dT%H%M%SZ)
out="results/$name-$stamp.ndjson"
figures="results/$name-$stamp"
mkdir -p results

ensure_cc
ensure_baselines
ensure_rust
have_venv=1
ensure_venv || have_venv=0

echo "==> building (release)"
cargo build --release -p cxlalloc-bench --bin cxlalloc-bench

echo
echo "==> running $workload"
status=0
./target/release/cxlalloc-bench run "$workload" --out "$out" || status=$?

if [ ! -s "$out" ]; then
  echo "no results were written" >&2
  exit 1
fi
if [ "$have_venv" -eq 1 ]; then
  echo
  echo "==> figures"
  PYTHONPATH=plot "$PYTHON" -m cxlplot figures "$out" --out "$figures"
  echo
  echo "==> headline: every configuration against its docs/design.md §15 target, then the geomeans"
  PYTHONPATH=plot "$PYTHON" -m cxlplot compare "$out"
else
  echo "plots skipped: the Python venv for plot/ could not be set up" >&2
fi

echo
echo "NDJSON: $out"
[ "$have_venv" -eq 0 ] || echo "figures: $figures/"
exit "$status"
