#!/usr/bin/env bash
# Real Debian programs on libcxlalloc_preload.so (docs/design.md §17): redis-server driven by
# redis-benchmark on loopback, memcached driven by memcslap, python3 running a workload of its
# own (threads and forked workers), sqlite3 building and querying a database, fork-heavy shell
# pipelines and a thread-heavy C program (cxlalloc-preload/tests/c/workout.c). Each must give
# the output it gives without the library, and every process that exits normally must report
# (CXLALLOC_VERBOSE=1) a heap that checks clean. About a minute here.
#
# Usage: script/preload.sh      (script/test.sh runs it as the `preload` step)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

cargo build --release -q -p cxlalloc-preload
LIB=$PWD/target/release/libcxlalloc_preload.so
WORK=$(mktemp -d "${TMPDIR:-/tmp}/cxlalloc-preload.XXXXXX")
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
failures=0

# A loopback port for this run's servers (distinct per run, so parallel runs do not collide).
PORT=$((20000 + $$ % 20000))

ok() { echo "  ok    $1"; }
fail() {
  echo "  FAIL  $1"
  failures=$((failures + 1))
}

# The release library exports malloc's interface and nothing else, and does not load
# libgcc_s.so.1 (its unwinder is linked in: docs/design.md §17).
exports=$(nm -D --defined-only "$LIB" | awk '{print $3}' | sed 's/@.*//' | LC_ALL=C sort | tr '\n' ' ')
want="aligned_alloc calloc cfree free malloc malloc_usable_size memalign posix_memalign pvalloc realloc reallocarray valloc "
if [[ $exports == "$want" ]]; then ok "exports malloc's interface only"; else fail "exports: $exports"; fi
if readelf -d "$LIB" | grep -q 'NEEDED.*libgcc_s'; then fail "loads libgcc_s.so.1"; else ok "does not load libgcc_s.so.1"; fi

# reports NAME LOG: at least one process of LOG reported a heap, every heap reported checks
# clean, and every other `cxlalloc:` line is a process that stayed below the threshold of its
# bootstrap allocator (docs/design.md §17.2) and so never opened a heap.
reports() {
  local n small bad
  n=$(grep -c '^cxlalloc: heap .*check clean$' "$2" || true)
  small=$(grep -c '^cxlalloc: pid [0-9]* never opened its heap' "$2" || true)
  bad=$(grep '^cxlalloc:' "$2" | grep -v 'check clean$' | grep -vc 'never opened its heap' || true)
  if [ "$n" -ge 1 ] && [ "$bad" -eq 0 ]; then
    ok "$1: $n process(es) reported a clean heap at exit ($small stayed below the threshold)"
  else
    fail "$1: $n clean report(s), $bad other cxlalloc line(s):"
    grep '^cxlalloc:' "$2" | grep -v 'check clean$' | grep -v 'never opened its heap' | head -5
  fi
}

# same NAME CMD...: CMD's stdout under the library equals its stdout without it.
same() {
  local name=$1
  shift
  "$@" >"$WORK/$name.want" 2>/dev/null
  if LD_PRELOAD=$LIB CXLALLOC_VERBOSE=1 "$@" >"$WORK/$name.got" 2>"$WORK/$name.err"; then
    if cmp -s "$WORK/$name.want" "$WORK/$name.got"; then
      ok "$name: output identical to the run without the library ($(wc -c <"$WORK/$name.got") bytes)"
    else
      fail "$name: output differs"
      diff "$WORK/$name.want" "$WORK/$name.got" | head -5
    fi
  else
    fail "$name: exit status $? under the library"
    tail -5 "$WORK/$name.err"
  fi
  reports "$name" "$WORK/$name.err"
}

# wait_port PORT: until something listens on it (10 s at most).
wait_port() {
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

echo "==> redis-server + redis-benchmark"
LD_PRELOAD=$LIB CXLALLOC_VERBOSE=1 redis-server --port "$PORT" --bind 127.0.0.1 --save '' \
  --appendonly no --daemonize no >"$WORK/redis.log" 2>&1 &
PIDS+=($!)
redis=$!
if wait_port "$PORT"; then
  if redis-benchmark -p "$PORT" -q -n 20000 -c 20 -t set,get,incr,lpush,lpop,sadd,hset,zadd \
    --csv >"$WORK/redis.csv" 2>&1 && [ "$(grep -c '^"[A-Z]' "$WORK/redis.csv")" -ge 8 ]; then
    ok "redis-benchmark: $(grep -c '^"[A-Z]' "$WORK/redis.csv") tests ran"
  else
    fail "redis-benchmark"
    tail -3 "$WORK/redis.csv"
  fi
  # Values written and read back, across a 10 000-key keyspace.
  for i in $(seq 1 10000); do echo "SET key:$i value-$i-$((i * 7919 % 10007))"; done |
    redis-cli -p "$PORT" >/dev/null
  got=$(for i in 1 77 5000 9999 10000; do redis-cli -p "$PORT" GET "key:$i"; done | tr '\n' ' ')
  want=$(for i in 1 77 5000 9999 10000; do echo "value-$i-$((i * 7919 % 10007))"; done | tr '\n' ' ')
  if [ "$got" = "$want" ] && [ "$(redis-cli -p "$PORT" EXISTS key:5000)" = 1 ]; then
    ok "redis: values read back"
  else
    fail "redis: read back '$got', want '$want'"
  fi
  redis-cli -p "$PORT" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
  wait "$redis" || true
  reports redis "$WORK/redis.log"
else
  fail "redis-server did not listen on $PORT"
  tail -5 "$WORK/redis.log"
fi

echo "==> memcached + memcslap"
PORT=$((PORT + 1))
LD_PRELOAD=$LIB CXLALLOC_VERBOSE=1 memcached -p "$PORT" -U 0 -l 127.0.0.1 -t 4 -m 64 -u "$(id -un)" \
  >"$WORK/memcached.log" 2>&1 &
PIDS+=($!)
mc=$!
if wait_port "$PORT"; then
  if memcslap --servers="127.0.0.1:$PORT" --concurrency=8 --execute-number=5000 >"$WORK/memcslap.out" 2>&1 &&
    grep -q 'Time total' "$WORK/memcslap.out"; then
    ok "memcslap: $(grep 'Time to set' "$WORK/memcslap.out" | tr -s ' ')"
  else
    fail "memcslap"
    tail -3 "$WORK/memcslap.out"
  fi
  reply=$(exec 3<>"/dev/tcp/127.0.0.1/$PORT"
    printf 'set greeting 0 0 11\r\nhello world\r\nget greeting\r\nquit\r\n' >&3
    cat <&3)
  if printf '%s' "$reply" | tr -d '\r' | grep -qx 'hello world'; then
    ok "memcached: value read back"
  else
    fail "memcached: reply $reply"
  fi
  kill -TERM "$mc"
  wait "$mc" || true
  reports memcached "$WORK/memcached.log"
else
  fail "memcached did not listen on $PORT"
  tail -5 "$WORK/memcached.log"
fi

echo "==> python3"
cat >"$WORK/work.py" <<'EOF'
import hashlib, json, os, threading, collections
from concurrent.futures import ProcessPoolExecutor

def chunk(seed):
    d = {}
    for i in range(40000):
        k = "k%d" % ((i * 2654435761 + seed) % 100003)
        d[k] = [i, str(i) * (i % 13), {"s": seed}]
        if i % 3 == 0:
            d.pop("k%d" % ((i * 40503) % 100003), None)
    return hashlib.sha256(json.dumps(sorted(d.items())[:2000]).encode()).hexdigest()

results = [None] * 8
def work(t):
    results[t] = chunk(t)
threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print(results)
with ProcessPoolExecutor(max_workers=3) as ex:   # forked workers
    print(list(ex.map(chunk, range(100, 106))))
big = [bytes(range(256)) * (1 << k) for k in range(14)]   # up to 4 MiB: the huge heap
print(sum(map(len, big)), collections.Counter("".join(map(str, range(20000)))).most_common(3))
EOF
same python3 /usr/bin/python3 "$WORK/work.py"

echo "==> sqlite3"
cat >"$WORK/work.sql" <<'EOF'
create table t(id integer primary key, k text, v blob, n real);
with recursive c(x) as (select 1 union all select x + 1 from c where x < 200000)
insert into t select x, printf('key-%08d', (x * 7919) % 200003), zeroblob(x % 300), x * 0.5 from c;
create index tk on t(k);
select count(*), sum(length(v)), round(sum(n), 1) from t;
select k from t where k between 'key-00100000' and 'key-00100100' order by k limit 5;
delete from t where id % 3 = 0;
vacuum;
select count(*), min(k), max(k) from t;
pragma integrity_check;
EOF
same sqlite3 sh -c "rm -f '$WORK/db.sqlite' && sqlite3 '$WORK/db.sqlite' <'$WORK/work.sql'"

echo "==> fork-heavy shell pipelines"
# Every process opens its heap at start (CXLALLOC_THRESHOLD=0), so that the forks and execs
# run on heaps rather than on the bootstrap allocator of processes this small.
same pipelines env CXLALLOC_THRESHOLD=0 sh -c 'for i in $(seq 1 150); do echo "$i $((i * i))" | sed "s/1/x/g" | tr x y | awk "{print \$2, \$1}"; done | sort -n | md5sum'

echo "==> thread-heavy C program"
cc -O2 -pthread -o "$WORK/workout" cxlalloc-preload/tests/c/workout.c
same threads "$WORK/workout" threads 48 2000

echo
if [ "$failures" -eq 0 ]; then
  echo "preload: all programs passed"
else
  echo "preload: $failures check(s) failed"
  exit 1
fi
