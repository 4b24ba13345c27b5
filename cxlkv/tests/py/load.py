"""The load comparison (docs/design.md §16.7): memcslap (libmemcached-tools) against cxlkv and
against Debian's memcached with the same number of workers (cxlkv processes, memcached
threads) on loopback; prints throughput per test, the cxlkv/memcached ratio, and the servers'
memory (RSS and PSS summed over their processes, after the load).

    python load.py workloads/kvserver.toml [--json OUT]

    python load.py workloads/kvserver.toml --repeats 7 --baseline /path/to/old/cxlkv

Each configuration runs `repeats` times (the workload's, or --repeats, or $KV_REPEATS), the
servers taking turns in a rotating order, and reports per server the median with the spread
(min-max), and per test two ratios: of the medians, and the median of the per-round ratios
(each round's servers ran back to back, so a round's ratio sees the same machine load).
--baseline adds a second cxlkv binary (e.g. main's) to every round, to compare two builds.
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
    def __init__(self, workers, binary=None):
        self.server = Server(workers=workers, buckets_log2=20, binary=binary)
        self.port = self.server.port

    def pids(self):
        return [self.server.proc.pid] + self.server.worker_pids()

    def close(self):
        status = self.server.stop()
        report = self.server.check()
        self.server.close()
        if status != 0 or not report["consistent"]:
            raise RuntimeError(f"cxlkv exited {status}, heap check {report['verdict']}")


def servers(baseline):
    """Names of the servers compared (cxlkv first: the ratios are against it)."""
    return ["cxlkv", "memcached"] + (["baseline"] if baseline else [])


def start(name, workers, cfg, baseline):
    if name == "memcached":
        return Memcached(workers, cfg.get("memcached_memory_mib", 1024))
    return Cxlkv(workers, baseline if name == "baseline" else None)


def run(cfg, repeats, baseline=None):
    rows = []
    tests = cfg.get("tests", ["set", "get"])
    names = servers(baseline)
    for workers in cfg["workers"]:
        samples = {(s, t): [] for s in names for t in tests}
        mem = {s: [] for s in names}
        for rep in range(repeats):
            # Rotating order: no server always runs first (or right after another).
            order = names[rep % len(names):] + names[:rep % len(names)]
            for name in order:
                srv = start(name, workers, cfg, baseline)
                try:
                    for t in tests:
                        samples[(name, t)].append(memcslap(srv.port, t, cfg["concurrency"], cfg["execute"]))
                    mem[name].append(memory_kib(srv.pids()))
                finally:
                    srv.close()
        for t in tests:
            row = {"workers": workers, "test": t}
            for name in names:
                xs = samples[(name, t)]
                row[f"{name}_ops"] = statistics.median(xs)
                row[f"{name}_min"], row[f"{name}_max"] = min(xs), max(xs)
                row[f"{name}_samples"] = xs
            for other in names[1:]:
                row[f"ratio_{other}"] = row["cxlkv_ops"] / row[f"{other}_ops"]
                paired = [a / b for a, b in zip(samples[("cxlkv", t)], samples[(other, t)])]
                row[f"paired_ratio_{other}"] = statistics.median(paired)
            row["ratio"] = row["ratio_memcached"]
            rows.append(row)
        for name in mem:
            rss = statistics.median(m[0] for m in mem[name])
            pss = statistics.median(m[1] for m in mem[name])
            rows.append({"workers": workers, "test": "memory", "server": name, "rss_kib": rss, "pss_kib": pss})
    return rows


def table(rows, cfg, repeats, baseline=None):
    names = servers(baseline)
    print(f"memcslap -c {cfg['concurrency']} -e {cfg['execute']} on loopback; {repeats} rounds; "
          "ops/s: median [min-max]")
    if baseline:
        print(f"baseline = {baseline}")
    head = f"{'workers':>7}  {'test':<5}" + "".join(f" {n + ' ops/s':>28}" for n in names)
    head += "".join(f" {'/' + o:>10} {'paired':>7}" for o in names[1:])
    print(head)
    for r in rows:
        if r["test"] == "memory":
            continue
        line = f"{r['workers']:>7}  {r['test']:<5}"
        for n in names:
            line += f" {r[n + '_ops']:>10.0f} [{r[n + '_min']:>7.0f}-{r[n + '_max']:>7.0f}]"
        for o in names[1:]:
            line += f" {r['ratio_' + o]:>10.2f} {r['paired_ratio_' + o]:>7.2f}"
        print(line)
    print("  (/X: cxlkv's median over X's; paired: the median of the per-round ratios)")
    print(f"\n{'workers':>7}  {'server':<10} {'RSS MiB':>9} {'PSS MiB':>9}   (after the load, all processes)")
    for r in rows:
        if r["test"] == "memory":
            print(f"{r['workers']:>7}  {r['server']:<10} {r['rss_kib'] / 1024:>9.1f} {r['pss_kib'] / 1024:>9.1f}")
    ratios = [r["ratio"] for r in rows if r["test"] != "memory"]
    geo = statistics.geometric_mean(ratios)
    worst = min(ratios)
    target = cfg.get("target_ratio", 1.0)
    print(f"\ngeomean throughput ratio cxlkv/memcached: {geo:.2f}, lowest row {worst:.2f} "
          f"(target >= {target:.2f} on every row: {'met' if worst >= target else 'not met'})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workload")
    ap.add_argument("--json")
    ap.add_argument("--repeats", type=int, help="rounds per configuration (default: $KV_REPEATS or the workload's)")
    ap.add_argument("--baseline", help="another cxlkv binary to measure in every round (e.g. main's build)")
    a = ap.parse_args()
    with open(a.workload, "rb") as f:
        cfg = tomllib.load(f)["kvserver"]
    for tool in ("memcached", "memcslap"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed (script/kvserver.sh installs memcached and libmemcached-tools)")
    t0 = time.time()
    repeats = a.repeats or int(os.environ.get("KV_REPEATS", 0)) or cfg.get("repeats", 5)
    baseline = a.baseline or os.environ.get("KV_BASELINE") or None
    if baseline and not os.access(baseline, os.X_OK):
        sys.exit(f"--baseline {baseline}: not an executable")
    rows = run(cfg, repeats, baseline)
    table(rows, cfg, repeats, baseline)
    print(f"({time.time() - t0:.0f} s)")
    if a.json:
        with open(a.json, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
