#!/usr/bin/env bash
# cxlkv, the memcached on one cxlalloc heap (docs/design.md §16):
#
#   script/kvserver.sh test            # the `kvserver` step of script/test.sh (about 1.5 min)
#   script/kvserver.sh load WORKLOAD   # the memcslap comparison (script/run.sh workloads/kvserver.toml)
#   KV_CRASH_SOAK=1 script/kvserver.sh test   # adds the minute-long crash test (60 SIGKILLs)
#   KV_REPEATS=9 KV_BASELINE=/path/to/old/cxlkv script/run.sh workloads/kvserver.toml
#                                      # more rounds; a second cxlkv build measured in each round
#
# `test` runs Debian's memccapable (libmemcached-tools) in ASCII mode against cxlkv and requires
# all of its tests to pass, then the Python functional and crash-point tests (pymemcache, in
# .venv-kv), then the bounded crash test: 10 SIGKILLs, one a second, under six writing clients.
# Installs what is missing: memcached and libmemcached-tools (sysdep table in setup.sh), the venv.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=script/setup.sh
. script/setup.sh

mode=${1:-}
ensure_cc
ensure_rust
ensure_sysdeps memcached libmemcached-tools
ensure_kv_venv

echo "==> building cxlkv and the cxlalloc CLI (release)"
cargo build --release -p cxlkv -p cxlalloc-cli --bin cxlkv --bin cxlalloc
py=cxlkv/tests/py

case $mode in
  test)
    echo "==> memccapable -a against cxlkv (2 workers)"
    port=$("$KV_PYTHON" -c "import sys; sys.path.insert(0, '$py'); import kvserver; print(kvserver.free_port())")
    heap="cxlkv-memccapable-$$"
    ./target/release/cxlkv --port "$port" --workers 2 --heap "$heap" --buckets-log2 16 &
    server=$!
    trap 'kill $server 2>/dev/null; ./target/release/cxlalloc unlink "$heap" >/dev/null 2>&1 || true' EXIT
    for _ in $(seq 100); do
      (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
      sleep 0.1
    done
    out=$(memccapable -h 127.0.0.1 -p "$port" -a -t 5 2>&1) || true
    echo "$out"
    passed=$(grep -c '\[pass\]' <<<"$out" || true)
    failed=$(grep -c '\[FAIL\]' <<<"$out" || true)
    kill -TERM "$server"
    wait "$server" || { echo "cxlkv did not exit 0 on SIGTERM" >&2; exit 1; }
    ./target/release/cxlalloc check "$heap" | tail -1
    trap - EXIT
    ./target/release/cxlalloc unlink "$heap"
    echo "memccapable: $passed passed, $failed failed"
    if [ "$failed" -ne 0 ] || [ "$passed" -lt 27 ] || ! grep -q "All tests passed" <<<"$out"; then
      echo "memccapable -a: not all ASCII tests passed against cxlkv" >&2
      exit 1
    fi

    echo "==> Python functional and crash-point tests (pymemcache)"
    (cd "$py" && "$KV_PYTHON" -W ignore -m unittest -v test_cxlkv 2>&1)

    echo "==> crash test: a worker SIGKILLed every second for 10 s under load"
    "$KV_PYTHON" -W ignore "$py/crash.py" --seconds 10 --every 1
    if [ "${KV_CRASH_SOAK:-0}" = 1 ]; then
      echo "==> crash soak: a worker SIGKILLed every second for 60 s under load"
      "$KV_PYTHON" -W ignore "$py/crash.py" --seconds 60 --every 1
    fi
    ;;
  load)
    [ $# -eq 2 ] || { echo "usage: script/kvserver.sh load WORKLOAD.toml" >&2; exit 2; }
    mkdir -p results
    out="results/$(basename "$2" .toml)-$(date -u +%Y%m%dT%H%M%SZ).ndjson"
    "$KV_PYTHON" "$py/load.py" "$2" --json "$out"
    echo "NDJSON: $out"
    ;;
  *)
    echo "usage: script/kvserver.sh test | load WORKLOAD.toml" >&2
    exit 2
    ;;
esac
