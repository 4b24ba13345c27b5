#!/usr/bin/env python3
"""Debian programs under each allocator, preloaded: glibc (cxlalloc-preload/bench/glibc-shim.c,
which also takes redis-server off the jemalloc it links), mimalloc (Debian's libmimalloc2.0) and
cxlalloc (libcxlalloc_preload.so, its private heap). Prints, per program, the median throughput
of REPS runs, its ratio to glibc, and peak RSS and PSS (docs/design.md §17.5).

Throughput: redis-benchmark requests/s (geometric mean over its tests), memcslap keys set per
second, and 1 / wall time for python3, sqlite3, the shell pipelines and the threaded C program.
Peak RSS is the kernel's high-water mark (VmHWM) of the measured process and peak PSS the largest
of /proc/PID/smaps_rollup, both sampled every 20 ms (servers: the server process; others: the
program's first process), so a program shorter than that may show 0.

Usage: script/preload-bench.py [REPS]   (after `cargo build --release -p cxlalloc-preload`)
CXLALLOC_BENCH_ONLY=redis,sh measures only the programs whose names start with those words.
Each row also gives the spread: the slowest and fastest run as ratios to glibc's median.
"""
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
WORK = tempfile.mkdtemp(prefix="cxlalloc-preload-bench.")
PORT = 30000 + os.getpid() % 20000


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def libmimalloc():
    for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib"):
        p = os.path.join(d, "libmimalloc.so.2")
        if os.path.exists(p):
            return p
    sys.exit("libmimalloc.so.2 missing: apt-get install libmimalloc2.0")


SHIM = os.path.join(WORK, "glibc-shim.so")
sh(["cc", "-O2", "-shared", "-fPIC", "-o", SHIM, os.path.join(ROOT, "cxlalloc-preload/bench/glibc-shim.c")])
WORKOUT = os.path.join(WORK, "workout")
sh(["cc", "-O2", "-pthread", "-o", WORKOUT, os.path.join(ROOT, "cxlalloc-preload/tests/c/workout.c")])
ALLOCATORS = {
    "glibc": SHIM,
    "mimalloc": libmimalloc(),
    # CXLALLOC_BENCH_LIB: another build of the library (a copy, so the tree can be rebuilt meanwhile).
    "cxlalloc": os.environ.get("CXLALLOC_BENCH_LIB", os.path.join(ROOT, "target/release/libcxlalloc_preload.so")),
}


class Sampler:
    """Peak PSS and VmHWM of one process, sampled in a thread."""

    def __init__(self, pid, marker=None):
        # Samples count only once /proc/PID/cmdline holds `marker` (the child has exec'd: before
        # that it shows the driver's memory).
        self.pid, self.pss, self.hwm, self.stop, self.marker = pid, 0, 0, False, marker
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def sample(self):
        try:
            if self.marker is not None:
                with open(f"/proc/{self.pid}/cmdline", "rb") as f:
                    if self.marker.encode() not in f.read():
                        return
            with open(f"/proc/{self.pid}/smaps_rollup") as f:
                m = re.search(r"^Pss:\s+(\d+) kB", f.read(), re.M)
            with open(f"/proc/{self.pid}/status") as f:
                h = re.search(r"^VmHWM:\s+(\d+) kB", f.read(), re.M)
            if m:
                self.pss = max(self.pss, int(m.group(1)))
            if h:
                self.hwm = max(self.hwm, int(h.group(1)))
        except (OSError, ValueError):
            pass

    def run(self):
        while not self.stop:
            self.sample()
            time.sleep(0.02)

    def done(self):
        self.sample()
        self.stop = True
        self.t.join()
        return self.hwm, self.pss


def env_for(lib):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CXLALLOC_")}
    env["LD_PRELOAD"] = lib
    return env


def wait_port(port):
    import socket

    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def server(lib, argv, port, drive, stop):
    srv = subprocess.Popen(argv, env=env_for(lib), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        s = Sampler(srv.pid)
        tput = drive()
        hwm, pss = s.done()
        stop(srv)
        srv.wait(timeout=30)
        return tput, hwm, pss
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()


def redis(lib):
    port = PORT

    def drive():
        out = sh(["redis-benchmark", "-p", str(port), "-n", "50000", "-c", "20", "-d", "64",
                  "-t", "set,get,lpush,lpop,hset", "--csv"]).stdout
        rps = [float(l.split(",")[1].strip('"')) for l in out.splitlines() if l.startswith('"') and not l.startswith('"test"')]
        return math.exp(sum(map(math.log, rps)) / len(rps))

    def stop(_):
        subprocess.run(["redis-cli", "-p", str(port), "SHUTDOWN", "NOSAVE"], capture_output=True)

    return server(lib, ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                        "--appendonly", "no"], port, drive, stop)


def memcached(lib):
    port = PORT + 1

    def drive():
        out = sh(["memcslap", f"--servers=127.0.0.1:{port}", "--concurrency=8", "--execute-number=10000"]).stdout
        m = re.search(r"Time to set\s+(\d+) keys by\s+\d+ threads:\s+([\d.]+) seconds", out)
        return int(m.group(1)) / float(m.group(2))

    def stop(srv):
        srv.terminate()

    user = subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip()
    return server(lib, ["memcached", "-p", str(port), "-U", "0", "-l", "127.0.0.1", "-t", "4", "-m", "256",
                        "-u", user], port, drive, stop)


PY = os.path.join(WORK, "work.py")
with open(PY, "w") as f:
    f.write("""
import json, threading
def chunk(seed):
    d = {}
    for i in range(60000):
        k = "k%d" % ((i * 2654435761 + seed) % 100003)
        d[k] = [i, str(i) * (i % 13), {"s": seed}]
        if i % 3 == 0:
            d.pop("k%d" % ((i * 40503) % 100003), None)
    return len(json.dumps(sorted(d.items())[:5000]))
ts = [threading.Thread(target=chunk, args=(t,)) for t in range(4)]
for t in ts: t.start()
for t in ts: t.join()
print(sum(chunk(s) for s in range(4)))
""")
SQL = os.path.join(WORK, "work.sql")
with open(SQL, "w") as f:
    f.write("""
create table t(id integer primary key, k text, v blob, n real);
with recursive c(x) as (select 1 union all select x + 1 from c where x < 300000)
insert into t select x, printf('key-%08d', (x * 7919) % 300007), zeroblob(x % 300), x * 0.5 from c;
create index tk on t(k);
select count(*), sum(length(v)) from t;
delete from t where id % 3 = 0;
select count(*), min(k), max(k) from t group by id % 7 order by 1 limit 3;
""")
PIPE = 'for i in $(seq 1 300); do echo "$i $((i * i))" | sed "s/1/x/g" | tr x y | awk "{print \\$2}"; done | sort -n | md5sum'


def program(argv):
    def run(lib):
        db = os.path.join(WORK, "db.sqlite")
        if os.path.exists(db):
            os.remove(db)
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, env=env_for(lib), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             stdin=open(SQL) if argv[0] == "sqlite3" else None)
        s = Sampler(p.pid, argv[-1])
        _, status, _ = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = status
        hwm, pss = s.done()
        if status != 0:
            raise RuntimeError(f"{argv[0]} failed: {p.stderr.read().decode()[-300:]}")
        return 1 / wall, hwm, pss

    return run


PROGRAMS = {
    "redis (req/s)": redis,
    "memcached (sets/s)": memcached,
    "python3 (1/s)": program(["/usr/bin/python3", PY]),
    "sqlite3 (1/s)": program(["sqlite3", os.path.join(WORK, "db.sqlite")]),
    "sh pipelines (1/s)": program(["sh", "-c", PIPE]),
    "threads (1/s)": program([WORKOUT, "threads", "32", "3000"]),
}


def main():
    print(f"{REPS} runs each, interleaved, medians; this machine: {os.cpu_count()} cores, shared with other jobs")
    rows = []
    # CXLALLOC_BENCH_ONLY=redis,sh: only the programs whose names start with one of these.
    only = [w for w in os.environ.get("CXLALLOC_BENCH_ONLY", "").split(",") if w]
    # In the order CXLALLOC_BENCH_ONLY names them.
    order = lambda item: next((i for i, w in enumerate(only) if item[0].startswith(w)), 0)
    for name, fn in sorted(PROGRAMS.items(), key=order):
        if only and not any(name.startswith(w) for w in only):
            continue
        # Interleaved (glibc, mimalloc, cxlalloc, glibc, ...): a change in the machine's load
        # during the runs then weighs on every allocator alike.
        runs = {a: [] for a in ALLOCATORS}
        for _ in range(REPS):
            for a, lib in ALLOCATORS.items():
                runs[a].append(fn(lib))
        res = {a: tuple(statistics.median(r[i] for r in rs) for i in range(3)) for a, rs in runs.items()}
        g = res["glibc"][0]
        for a, (tput, hwm, pss) in res.items():
            rows.append((name, a, tput, tput / g, hwm, pss))
            # The spread: the lowest and highest run, each as a ratio to glibc's median.
            lo, hi = min(r[0] for r in runs[a]) / g, max(r[0] for r in runs[a]) / g
            print(f"  {name:20} {a:9} {tput:12.1f}  x{tput / g:5.2f} glibc (runs x{lo:.2f}-x{hi:.2f})  "
                  f"peak RSS {hwm / 1024:7.1f} MiB  peak PSS {pss / 1024:7.1f} MiB", flush=True)
    ratios = [r[3] for r in rows if r[1] == "cxlalloc"]
    print(f"cxlalloc / glibc: geometric mean x{math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}, "
          f"lowest x{min(ratios):.2f} (target >= 0.9 each)")
    shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
