"""Writes fixture.ndjson: a small, hand-designed results file in the harness's schema 1.

Kept as a script so the numbers behind the tests' expected values are written down in one place.
Run `python plot/tests/make_fixture.py` after changing it; the tests read the committed file.

Run throughputs (ops/s, sum over a run's processes) and the ratios they are chosen to give:

  threadtest size=8, P=1 T=2   mimalloc 100/200/120 M (median 120 M, mean 140 M)
                               cxlalloc 90/102 M -> 96 M: 96/120 = 0.80
                               recovery=false 98/102 M -> 100 M: recoverable 0.96
                               coherence none 86.4 M (0.90), limited 91.2 M (0.95)
  threadtest size=8, P=1 T=4   mimalloc 200/220 M, cxlalloc 200/220 M -> 1.00
  threadtest size=8, P=2 T=2   cxlalloc 40+50 / 45+55 M -> 95 M (no mimalloc match)
  threadtest size=64, P=1 T=2  mimalloc 100/100 M, cxlalloc 120/130 M -> 1.25
                               threadtest geomean (0.8 * 1.0 * 1.25)^(1/3) = 1.00
  xmalloc, P=1 T=2             mimalloc 40/60 M, cxlalloc 55/65 M -> 1.20
  xmalloc, P=1 T=4             mimalloc 80 M, cxlalloc 96 M -> 1.20; xmalloc geomean 1.20
                               coherence none 15 M (0.25), limited 30 M (0.50)
  xmalloc, P=2 T=2             cxlalloc 20+22 / 21+23 M (no match)
  ycsb load, P=1 T=2           mimalloc 10 M, cxlalloc 11 M -> 1.10
  ycsb a, P=1 T=2              mimalloc 9.5/10.5 M, cxlalloc 8.5/9.5 M -> 0.90; recovery=false 9 M -> 1.00
  ycsb d, P=2 T=2              cxlalloc only (no match)
  memcached MC-12, P=1 T=2     mimalloc 4 M, cxlalloc 4 M -> 1.00; KV geomean 0.99^(1/3)
  crash, P=3 T=3               survivors 0 and 2 (process 1 killed), kills at 0.7 s and 1.3 s

End-of-run HWcc PSS by coherence model, P=1 T=2 (Figure 12's lower row): threadtest size=8
  full 4096 (median of 4096, 4096), limited 4096, none 12288 (the mCAS window); xmalloc full
  8192, limited 8192, none 16384.

HWcc share of default-cxlalloc KV runs (hwcc / total end PSS summed over processes):
  ycsb load 1e-4, 1e-4; ycsb a 1e-4, 1.5e-4; ycsb d 1e-4, 1e-4 (40 000 / (300 M + 100 M));
  MC-12 2e-4, 2e-4  ->  max 2e-4, mean 1.3125e-4.
"""

import json
from pathlib import Path

LABELS = {
    (): "cxlalloc",
    (("coherence", "none"),): "cxlalloc coherence=none",
    (("coherence", "limited"),): "cxlalloc coherence=limited",
    (("recovery", False),): "cxlalloc recovery=false",
}


def lines_of_run(bench, params, allocator, settings, processes, threads, repeat, per_process,
                 hwcc=None, total=None, extra=None, survivors=None):
    """The lines of one run. `per_process` are the processes' throughputs (ops/s)."""
    label = "mimalloc" if allocator == "mimalloc" else LABELS[tuple(sorted(settings.items()))]
    tag = "-".join(f"{k}{v}" for k, v in sorted(params.items()))
    stag = "-".join(f"{k}{v}" for k, v in sorted(settings.items()))
    config_id = f"{bench}-{tag}-{allocator}{'-' + stag if stag else ''}-p{processes}-t{threads}"
    hwcc = hwcc or [0] * processes
    total = total or [64 << 20] * processes
    survivors = survivors if survivors is not None else range(processes)
    per_proc_threads = threads // processes
    out = []
    for process in survivors:
        thr = per_process[process]
        first = process * per_proc_threads
        secs = 0.5
        per_thread = [
            {"thread": first + i, "ops": round(thr / per_proc_threads * secs), "secs": secs}
            for i in range(per_proc_threads)
        ]
        ops = sum(t["ops"] for t in per_thread)
        end = {"hwcc_bytes": hwcc[process], "swcc_bytes": total[process] // 2 - hwcc[process],
               "other_bytes": total[process] - total[process] // 2, "total_bytes": total[process]}
        peak = {k: v + v // 10 for k, v in end.items()}
        out.append({
            "schema": 1,
            "run_id": f"{config_id}-r{repeat}",
            "date": "2026-11-21T06:03:17Z",
            "workload": "fixture",
            "config_id": config_id,
            "repeat": repeat,
            "benchmark": bench,
            "params": params,
            "allocator": allocator,
            "allocator_settings": settings,
            "allocator_label": label,
            "processes": processes,
            "threads": threads,
            "process": process,
            "seed": 1,
            "per_thread": per_thread,
            "ops": ops,
            "throughput": float(thr),
            "allocated": ops // 2,
            "freed": ops // 2,
            "verified": ops // 4 if bench in ("ycsb", "memcached") else 0,
            "extra": (extra[process] if isinstance(extra, list) else extra) or {},
            "memory": {"end": end, "peak": peak, "peak_rss_bytes": peak["total_bytes"], "samples": 4},
            "rusage": {"user_s": secs * per_proc_threads, "system_s": 0.01, "minor_faults": 2048,
                       "major_faults": 0, "voluntary_switches": 3, "involuntary_switches": 1},
            "allocator_stats": None if allocator == "mimalloc" else {"slabs": 12, "huge": 0},
            "heap_check": None if allocator == "mimalloc" else {"inconsistencies": 0, "leaked_blocks": 0},
            "trace": ({"synthetic": True, "cluster": params["cluster"], "seed": 1, "path": None}
                      if bench == "memcached" else None),
            "host": {"cores": 16, "kernel": "6.1.0-18-amd64"},
        })
    return out


def fixture():
    M = 1_000_000
    lines = []

    def add(bench, params, allocator, settings, processes, threads, runs, **kw):
        for repeat, per_process in enumerate(runs):
            lines.extend(lines_of_run(bench, params, allocator, settings, processes, threads, repeat,
                                      [round(x * M) for x in per_process], **kw))

    tt8, tt64 = {"size": 8}, {"size": 64}
    add("threadtest", tt8, "mimalloc", {}, 1, 2, [[100], [200], [120]])
    add("threadtest", tt8, "cxlalloc", {}, 1, 2, [[90], [102]], hwcc=[4096])
    add("threadtest", tt8, "cxlalloc", {"recovery": False}, 1, 2, [[98], [102]], hwcc=[4096])
    add("threadtest", tt8, "cxlalloc", {"coherence": "none"}, 1, 2, [[86.4]], hwcc=[12288])
    add("threadtest", tt8, "cxlalloc", {"coherence": "limited"}, 1, 2, [[91.2]], hwcc=[4096])
    add("threadtest", tt8, "mimalloc", {}, 1, 4, [[200], [220]])
    add("threadtest", tt8, "cxlalloc", {}, 1, 4, [[200], [220]], hwcc=[8192])
    add("threadtest", tt8, "cxlalloc", {}, 2, 2, [[40, 50], [45, 55]],
        hwcc=[4096, 0], total=[10 << 20, 12 << 20])
    add("threadtest", tt64, "mimalloc", {}, 1, 2, [[100], [100]])
    add("threadtest", tt64, "cxlalloc", {}, 1, 2, [[120], [130]], hwcc=[4096])

    add("xmalloc", {}, "mimalloc", {}, 1, 2, [[40], [60]])
    add("xmalloc", {}, "cxlalloc", {}, 1, 2, [[55], [65]], hwcc=[8192])
    add("xmalloc", {}, "mimalloc", {}, 1, 4, [[80], [80]])
    add("xmalloc", {}, "cxlalloc", {}, 1, 4, [[96], [96]], hwcc=[8192])
    add("xmalloc", {}, "cxlalloc", {"coherence": "none"}, 1, 2, [[15]], hwcc=[16384])
    add("xmalloc", {}, "cxlalloc", {"coherence": "limited"}, 1, 2, [[30]], hwcc=[8192])
    add("xmalloc", {}, "cxlalloc", {}, 2, 2, [[20, 22], [21, 23]], hwcc=[8192, 8192])

    kv_extra = {"inserts_new": 1000, "inserts_overwrite": 0}
    add("ycsb", {"workload": "load"}, "mimalloc", {}, 1, 2, [[10], [10]], total=[900_000_000])
    add("ycsb", {"workload": "load"}, "cxlalloc", {}, 1, 2, [[11], [11]],
        hwcc=[100_000], total=[1_000_000_000], extra=kv_extra)
    add("ycsb", {"workload": "a"}, "mimalloc", {}, 1, 2, [[9.5], [10.5]], total=[450_000_000])
    for repeat, (thr, hw) in enumerate([(8.5, 50_000), (9.5, 75_000)]):
        lines.extend(lines_of_run("ycsb", {"workload": "a"}, "cxlalloc", {}, 1, 2, repeat, [round(thr * M)],
                                  hwcc=[hw], total=[500_000_000], extra=kv_extra))
    add("ycsb", {"workload": "a"}, "cxlalloc", {"recovery": False}, 1, 2, [[9], [9]],
        hwcc=[50_000], total=[500_000_000])
    add("ycsb", {"workload": "d"}, "cxlalloc", {}, 2, 2, [[3, 3], [3, 3]],
        hwcc=[40_000, 0], total=[300_000_000, 100_000_000])
    add("memcached", {"cluster": "MC-12"}, "mimalloc", {}, 1, 2, [[4], [4]], total=[180_000_000])
    add("memcached", {"cluster": "MC-12"}, "cxlalloc", {}, 1, 2, [[4], [4]],
        hwcc=[40_000], total=[200_000_000])

    # Survivors sample every 0.5 s; the dip after each kill is recovery of the killed slot.
    timelines = [
        [[0.0, 1.00e6], [0.5, 1.10e6], [1.0, 0.90e6], [1.5, 0.95e6], [2.0, 1.05e6]],
        None,  # process 1 was killed: it prints no line
        [[0.0, 0.95e6], [0.5, 1.00e6], [1.0, 0.85e6], [1.5, 1.00e6], [2.0, 1.00e6]],
    ]
    crash_extra = [t and {"timeline": t, "kill_times_s": [0.7, 1.3], "kills": 2, "recoveries": 2}
                   for t in timelines]
    add("crash", {"kills": 2}, "cxlalloc", {}, 3, 3, [[1, 1, 1]], hwcc=[4096] * 3,
        extra=crash_extra, survivors=[0, 2])
    return lines


if __name__ == "__main__":
    path = Path(__file__).with_name("fixture.ndjson")
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(line, separators=(",", ":")) + "\n" for line in fixture())
    print(f"wrote {path}")
