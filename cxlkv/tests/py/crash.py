"""The crash test (docs/design.md §16.7): client processes write under load while a killer sends
SIGKILL to a random worker every interval; afterwards a verifying client reads every key: each
must hold its last acknowledged value (or the value of a write that was in flight when its
connection broke, which may or may not have happened), the table must own exactly the heap's
live blocks (no leak), the server must exit 0 on SIGTERM and the heap checker must find it
consistent. Not a benchmark: fixed seeds, and timing is only reported.

    python crash.py --seconds 10 --every 1.0      # the bounded version script/kvserver.sh runs
    python crash.py --seconds 60 --every 1.0      # the minute-long one (KV_CRASH_SOAK=1)
"""

import argparse
import multiprocessing as mp
import os
import random
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from kvserver import Server, stats  # noqa: E402


def writer(port, tag, keys, stop, out, seed):
    """Sets (and now and then deletes or appends to) its own keys until `stop`; reports acked
    values and in-flight ones."""
    from pymemcache.client.base import Client

    rng = random.Random(seed)
    acked, maybe = {}, {}
    ops = broken = 0

    def connect():
        while not stop.is_set():
            try:
                c = Client(("127.0.0.1", port), connect_timeout=2, timeout=2, default_noreply=False)
                c.version()
                return c
            except Exception:
                time.sleep(0.02)
        return None

    c = connect()
    i = 0
    while c is not None and not stop.is_set():
        key = f"{tag}-{rng.randrange(keys)}"
        r = rng.random()
        if r < 0.1:
            value = None
        elif r < 0.2 and acked.get(key):
            value = acked[key] + b"+"
        else:
            value = f"{tag}-{i}-".encode() * rng.randrange(1, 40)
        try:
            if value is None:
                c.delete(key)
            elif value.endswith(b"+"):
                if not c.append(key, b"+"):
                    raise RuntimeError(f"append to {key}, acknowledged present, not stored")
            else:
                c.set(key, value)
            acked[key] = value
            maybe.pop(key, None)
            ops += 1
        except RuntimeError:
            raise
        except Exception:
            broken += 1
            maybe.setdefault(key, []).append(value)
            c = connect()
        i += 1
    out.put((tag, acked, maybe, ops, broken))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--every", type=float, default=1.0, help="seconds between two kills")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--keys", type=int, default=300, help="keys per client")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()

    server = Server(workers=a.workers, buckets_log2=14)
    rng = random.Random(a.seed)
    stop = mp.Event()
    out = mp.Queue()
    procs = [
        mp.Process(target=writer, args=(server.port, f"c{i}", a.keys, stop, out, a.seed * 100 + i))
        for i in range(a.clients)
    ]
    failures = []
    try:
        for p in procs:
            p.start()
        kills = 0
        t0 = time.time()
        while time.time() - t0 < a.seconds:
            time.sleep(a.every)
            pids = server.worker_pids()
            if pids:
                os.kill(rng.choice(pids), signal.SIGKILL)
                kills += 1
        time.sleep(0.5)
        stop.set()
        results = [out.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(10)
        server.wait_workers()
        from pymemcache.client.base import Client

        c = Client(("127.0.0.1", server.port), connect_timeout=5, timeout=5, default_noreply=False)
        checked = 0
        total_ops = sum(r[3] for r in results)
        total_broken = sum(r[4] for r in results)
        for tag, acked, maybe, _, _ in results:
            for key, value in acked.items():
                got = c.get(key)
                allowed = [value] + maybe.get(key, [])
                # An append in flight may have applied: the acked value plus "+".
                allowed += [v + b"+" for v in allowed if v is not None]
                if got not in allowed:
                    failures.append(f"{key}: got {got!r:.60}, acknowledged {value!r:.60}")
                checked += 1
        st = stats(server.port)
        # Let every worker reclaim what it retired before the census (a few writes each).
        for j in range(400):
            c.set(f"settle-{j % 40}", b"x")
        time.sleep(0.3)
        owned = int(stats(server.port, "cxlkv")["owned_blocks"])
        live = server.check()["live_blocks"]
        if owned != live:
            failures.append(f"leak: the table owns {owned} blocks, the heap has {live} live")
        status = server.stop()
        if status != 0:
            failures.append(f"cxlkv exited {status} on SIGTERM")
        report = server.check()
        if not report["consistent"]:
            failures.append(f"heap check: {report['problems']}")
        print(
            f"crash test: {a.seconds:.0f} s, {kills} SIGKILLs ({st.get('worker_restarts')} restarts), "
            f"{a.clients} clients, {total_ops} acknowledged writes, {total_broken} broken connections, "
            f"{checked} keys verified, owned blocks {owned} = live blocks {live}: "
            f"{'ok' if not failures else 'FAILED'}; heap check: {report['verdict']}"
        )
    finally:
        stop.set()
        for p in procs:
            if p.is_alive():
                p.terminate()
        if failures:
            print(server.output()[-4000:], file=sys.stderr)
        server.close()
    for f in failures[:20]:
        print("  " + f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
