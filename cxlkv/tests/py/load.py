"""The load comparison (docs/design.md §16.7): memcslap (libmemcached-tools) against cxlkv and
against Debian's memcached with the same number of workers (cxlkv processes, memcached
threads) on loopback; prints throughput per test, the cxlkv/memcached ratio, and the servers'
memory (RSS and PSS summed over their processes, after the load).

    python load.py workloads/kvserver.toml [--json OUT]

Each configuration runs `repeats` times, the two servers alternating, and reports medians.
On a shared machine only the ratios within one run mean anything.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import tomllib

sys.path.insert(0, os.path.dirname(__file__))
from kvserver import Server, free_port, wait_port  # noqa: E402


def memory_kib(pids):
    """(RSS, PSS) in KiB summed over `pids` (smaps_rollup)."""
    rss = pss = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1])
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1])
        except OSError:
            pass
    return rss, pss


def memcslap(port, test, concurrency, execute):
    """Operations per second of one memcslap run."""
    r = subprocess.run(
        ["memcslap", "-s", f"127.0.0.1:{port}", "-t", test, "-c", str(concurrency), "-e", str(execute), "-N"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    m = re.search(rf"Time to {test}\s+(\d+) keys by\s+(\d+) threads:\s+([\d.]+) seconds", r.stdout)
    if r.returncode != 0 or not m:
        raise RuntimeError(f"memcslap {test} failed ({r.returncode}): {r.stdout[-500:]} {r.stderr[-500:]}")
    seconds = float(m.group(3))
    return concurrency * execute / seconds


class Memcached:
    def __init__(self, threads, memory_mib):
        self.port = free_port()
        args = ["memcached", "-p", str(self.port), "-l", "127.0.0.1", "-t", str(threads), "-m", str(memory_mib)]
        if os.geteuid() == 0:
            args += ["-u", "root"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port, self.proc)

    def pids(self):
        return [self.proc.pid]

    def close(self):
        self.proc.terminate()
        self.proc.wait()


class Cxlkv:
    def __init__(self, workers):
        self.server = Server(workers=workers, buckets_log2=20)
        self.port = self.server.port

    def pids(self):
        return [self.server.proc.pid] + self.server.worker_pids()

    def close(self):
        status = self.server.stop()
        report = self.server.check()
        self.server.close()
        if status != 0 or not report["consistent"]:
            raise RuntimeError(f"cxlkv exited {status}, heap check {report['verdict']}")


def run(cfg):
    rows = []
    tests = cfg.get("tests", ["set", "get"])
    for workers in cfg["workers"]:
        samples = {(s, t): [] for s in ("cxlkv", "memcached") for t in tests}
        mem = {"cxlkv": [], "memcached": []}
        for rep in range(cfg.get("repeats", 3)):
            order = ("cxlkv", "memcached") if rep % 2 == 0 else ("memcached", "cxlkv")
            for name in order:
                srv = Cxlkv(workers) if name == "cxlkv" else Memcached(workers, cfg.get("memcached_memory_mib", 1024))
                try:
                    for t in tests:
                        samples[(name, t)].append(memcslap(srv.port, t, cfg["concurrency"], cfg["execute"]))
                    mem[name].append(memory_kib(srv.pids()))
                finally:
                    srv.close()
        for t in tests:
            a = statistics.median(samples[("cxlkv", t)])
            b = statistics.median(samples[("memcached", t)])
            rows.append({"workers": workers, "test": t, "cxlkv_ops": a, "memcached_ops": b, "ratio": a / b})
        for name in mem:
            rss = statistics.median(m[0] for m in mem[name])
            pss = statistics.median(m[1] for m in mem[name])
            rows.append({"workers": workers, "test": "memory", "server": name, "rss_kib": rss, "pss_kib": pss})
    return rows


def table(rows, cfg):
    print(f"memcslap -c {cfg['concurrency']} -e {cfg['execute']} on loopback; medians of {cfg.get('repeats', 3)}")
    print(f"{'workers':>7}  {'test':<6} {'cxlkv ops/s':>12} {'memcached ops/s':>16} {'ratio':>7}")
    for r in rows:
        if r["test"] != "memory":
            print(f"{r['workers']:>7}  {r['test']:<6} {r['cxlkv_ops']:>12.0f} {r['memcached_ops']:>16.0f} {r['ratio']:>7.2f}")
    print(f"\n{'workers':>7}  {'server':<10} {'RSS MiB':>9} {'PSS MiB':>9}   (after the load, all processes)")
    for r in rows:
        if r["test"] == "memory":
            print(f"{r['workers']:>7}  {r['server']:<10} {r['rss_kib'] / 1024:>9.1f} {r['pss_kib'] / 1024:>9.1f}")
    ratios = [r["ratio"] for r in rows if r["test"] != "memory"]
    geo = statistics.geometric_mean(ratios)
    target = cfg.get("target_ratio", 1.0)
    print(f"\ngeomean throughput ratio cxlkv/memcached: {geo:.2f} (target >= {target:.2f}: "
          f"{'met' if geo >= target else 'not met'})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workload")
    ap.add_argument("--json")
    a = ap.parse_args()
    with open(a.workload, "rb") as f:
        cfg = tomllib.load(f)["kvserver"]
    for tool in ("memcached", "memcslap"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed (script/kvserver.sh installs memcached and libmemcached-tools)")
    t0 = time.time()
    rows = run(cfg)
    table(rows, cfg)
    print(f"({time.time() - t0:.0f} s)")
    if a.json:
        with open(a.json, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
