#!/usr/bin/env bash
# Main job: script/run.sh WORKLOAD   (e.g. script/run.sh workloads/mini.toml)
#
# What it runs today: the multi-process demo with the [demo] parameters of WORKLOAD (several
# processes sharing one /dev/shm heap, freeing each other's blocks, then the heap checker), and a
# quick smoke pass of the threadtest micro benchmark. The evaluation harness proper — a driver
# that reads the whole workload file, expands its lists into configurations and runs coordinator
# and worker processes for each (DESIGN.md §12) — is a later issue and will replace the body of
# this script. Tables go to stdout; NDJSON goes to results/ (gitignored).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=script/setup.sh
. script/setup.sh

if [ $# -ne 1 ] || [ ! -f "$1" ]; then
  echo "usage: script/run.sh WORKLOAD.toml   (e.g. workloads/mini.toml)" >&2
  exit 2
fi
workload=$1
name=$(basename "$workload" .toml)
stamp=$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p results

ensure_cc
ensure_baselines
ensure_rust
echo "==> building (release)"
cargo build --release -p cxlalloc-bench --bins

echo
echo "==> demo: $workload"
cargo run -q --release -p cxlalloc-bench --bin demo -- \
  --workload "$workload" --ndjson "results/$name-demo-$stamp.ndjson"

echo
echo "==> micro benchmark (--quick smoke pass; run the micro binary without --quick to measure)"
cargo run -q --release -p cxlalloc-bench --bin micro -- \
  --quick --ndjson "results/$name-micro-$stamp.ndjson"

echo
echo "==> results"
ls -1 "results/$name-demo-$stamp.ndjson" "results/$name-micro-$stamp.ndjson"
