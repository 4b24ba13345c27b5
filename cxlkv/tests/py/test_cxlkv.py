"""Functional tests of cxlkv through pymemcache (docs/design.md §16.7): each test starts a server
on a fresh heap, and ends by stopping it with SIGTERM (exit status 0 required) and running the
heap checker on what is left. Not a benchmark."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

from pymemcache.client.base import Client

sys.path.insert(0, os.path.dirname(__file__))
from kvserver import CRASH_SPECS, Server, command, free_port, stats  # noqa: E402

# Bad and unusual input whose replies must equal memcached 1.6's.
PARITY = [
    b"bogus\r\n",
    b"\r\n",
    b"set k x 0 1\r\na\r\n",
    b"set k 0 0 1\r\nab\r\n",
    b"set k 0 0 1 noreply\r\nab\r\n",
    b"set k 0 0 -1\r\n",
    b"get " + b"k" * 251 + b"\r\n",
    b"get\r\n",
    b"incr\r\n",
    b"incr k x\r\n",
    b"touch k\r\n",
    b"delete k 5\r\n",
    b"delete k 0\r\n",
    b"flush_all x\r\n",
    b"verbosity\r\n",
    b"verbosity 1 noreply\r\nverbosity 1\r\n",
    b"stats noreply\r\n",
    b"set n 5 0 2\r\n10\r\nincr n 5\r\ndecr n 100\r\ngets nope\r\nappend n 0 0 1\r\nx\r\nincr n 1\r\n",
    b"cas nope 0 0 1 1\r\nx\r\nadd n 0 0 1\r\ny\r\nreplace nope 0 0 1\r\ny\r\ntouch nope 10\r\n",
]


def raw(port, data, wait_for=None):
    """The server's whole reply to `data` (read until it stays quiet for 0.3 s)."""
    deadline = time.time() + 5
    while True:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=1)
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.05)
    with s:
        s.sendall(b"flush_all noreply\r\n" + data)
        s.settimeout(0.3)
        buf = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
        except socket.timeout:
            pass
        return buf


def client(server, timeout=5.0):
    # default_noreply=False: every write waits for its reply (acknowledged writes only).
    return Client(("127.0.0.1", server.port), connect_timeout=timeout, timeout=timeout, default_noreply=False)


class Case(unittest.TestCase):
    workers = 2
    memory_limit = None
    env = None
    buckets_log2 = 16

    def setUp(self):
        self.server = Server(
            workers=self.workers, memory_limit=self.memory_limit, env=self.env, buckets_log2=self.buckets_log2
        )

    def tearDown(self):
        status = self.server.stop()
        try:
            self.assertEqual(status, 0, "cxlkv exits 0 on SIGTERM\n" + self.server.output())
            report = self.server.check()
            self.assertTrue(report["consistent"], report)
        finally:
            self.server.close()

    def owned_blocks_match_the_heap(self):
        """The table's census of the blocks it owns equals the checker's live blocks: no leak."""
        owned = int(stats(self.server.port, "cxlkv")["owned_blocks"])
        live = self.server.check()["live_blocks"]
        self.assertEqual(owned, live, "blocks the table owns vs live blocks in the heap")


class Protocol(Case):
    def test_a_write_through_one_worker_is_read_through_every_other(self):
        # Which worker accepts a connection depends on scheduling (on a loaded machine one
        # worker may take many in a row): connect until two workers have answered, at least 16
        # connections, and give up only after 30 s.
        conns, workers = [], {}
        deadline = time.monotonic() + 30
        while len(conns) < 16 or (len(workers) < 2 and time.monotonic() < deadline):
            c = client(self.server)
            conns.append(c)
            workers.setdefault(c.stats()[b"worker"], []).append(c)
            if len(conns) >= 16 and len(workers) < 2:
                time.sleep(0.05)
        self.assertGreaterEqual(len(workers), 2, f"{len(conns)} connections all landed on one worker")
        for i, c in enumerate(conns):
            self.assertTrue(c.set(f"k{i}", f"v{i}".encode() * 50))
        for c in conns:
            for i in range(16):
                self.assertEqual(c.get(f"k{i}"), f"v{i}".encode() * 50)

    def test_cas_refuses_a_stale_unique_from_another_worker(self):
        a, b = client(self.server), client(self.server)
        a.set("c", b"1")
        _, unique = a.gets("c")
        self.assertTrue(b.cas("c", b"2", unique))
        self.assertFalse(a.cas("c", b"3", unique), "the unique changed with b's write")
        self.assertEqual(a.get("c"), b"2")

    def test_add_replace_append_prepend_follow_memcached(self):
        c = client(self.server)
        self.assertTrue(c.add("a", b"x", noreply=False))
        self.assertFalse(c.add("a", b"y", noreply=False))
        self.assertFalse(c.replace("nope", b"y", noreply=False))
        self.assertTrue(c.append("a", b"z", noreply=False))
        self.assertTrue(c.prepend("a", b"w", noreply=False))
        self.assertEqual(c.get("a"), b"wxz")
        self.assertFalse(c.append("nope", b"y", noreply=False))

    def test_incr_wraps_and_decr_stops_at_zero(self):
        c = client(self.server)
        c.set("n", str(2**64 - 1).encode())
        self.assertEqual(c.incr("n", 2), 1)
        self.assertEqual(c.decr("n", 5), 0)
        c.set("s", b"abc")
        with self.assertRaises(Exception):
            c.incr("s", 1)
        self.assertIsNone(c.incr("missing", 1))

    def test_a_value_of_one_mebibyte_round_trips_and_a_larger_one_is_refused(self):
        c = client(self.server)
        big = bytes(range(256)) * 4096
        c.set("big", big)
        self.assertEqual(c.get("big"), big)
        reply = command(self.server.port, "set huge 0 0 %d\r\n%s" % (2**20 + 1, "x" * (2**20 + 1)))
        self.assertTrue(reply.startswith("SERVER_ERROR object too large"), reply)
        self.assertEqual(c.get("big"), big)

    def test_flags_survive_and_noreply_sets_are_stored(self):
        c = client(self.server)
        command(self.server.port, "set f 42 0 2 noreply\r\nhi\r\nversion")
        self.assertEqual(command(self.server.port, "get f"), "VALUE f 42 2\r\nhi\r\nEND\r\n")

    def test_a_deleted_or_flushed_key_is_gone_and_no_block_leaks(self):
        c = client(self.server)
        for i in range(200):
            c.set(f"d{i}", b"v" * i)
        for i in range(0, 200, 2):
            self.assertTrue(c.delete(f"d{i}", noreply=False))
        self.assertIsNone(c.get("d0"))
        self.assertEqual(c.get("d1"), b"v")
        c.flush_all()
        self.assertIsNone(c.get("d1"))
        for i in range(200):
            c.set(f"d{i}", b"w")
        self.owned_blocks_match_the_heap()

    def test_bad_input_gets_the_replies_of_debians_memcached_byte_for_byte(self):
        if shutil.which("memcached") is None:
            self.skipTest("Debian's memcached is not installed (script/kvserver.sh installs it)")
        port = free_port()
        mc = subprocess.Popen(
            ["memcached", "-u", "root", "-p", str(port), "-l", "127.0.0.1", "-t", "1"], stdout=subprocess.DEVNULL
        )
        try:
            for line in PARITY:
                self.assertEqual(raw(self.server.port, line), raw(port, line, wait_for=port), line)
        finally:
            mc.terminate()
            mc.wait()


class Expiry(Case):
    workers = 1

    def test_an_item_expires_after_its_ttl_and_touch_extends_it(self):
        c = client(self.server)
        c.set("t", b"1", expire=1)
        c.set("u", b"1", expire=1)
        c.set("forever", b"1")
        self.assertTrue(c.touch("u", 100, noreply=False))
        self.assertEqual(c.get("t"), b"1")
        time.sleep(2.2)
        self.assertIsNone(c.get("t"))
        self.assertEqual(c.get("u"), b"1")
        self.assertEqual(c.get("forever"), b"1")

    def test_a_negative_ttl_stores_an_already_expired_item(self):
        c = client(self.server)
        self.assertEqual(command(self.server.port, "set n 0 -1 1\r\nx"), "STORED\r\n")
        self.assertIsNone(c.get("n"))

    def test_a_delayed_flush_takes_effect_at_its_time(self):
        c = client(self.server)
        c.set("f", b"1")
        self.assertEqual(command(self.server.port, "flush_all 1"), "OK\r\n")
        self.assertEqual(c.get("f"), b"1")
        time.sleep(2.1)
        self.assertIsNone(c.get("f"))


class MemoryLimit(Case):
    workers = 2
    memory_limit = "1M"

    def test_the_limit_holds_by_evicting_the_least_recently_read(self):
        c = client(self.server)
        c.set("hot", b"h" * 1000)
        for i in range(4000):
            c.set(f"cold{i}", b"c" * 1000)
            if i % 100 == 0:
                self.assertEqual(c.get("hot"), b"h" * 1000, "the item read all along is kept")
        s = stats(self.server.port)
        self.assertGreater(int(s["evictions"]), 0)
        self.assertLessEqual(int(s["bytes"]), 1.25 * 2**20, "bytes stay near the limit")
        self.assertIsNone(c.get("cold0"), "the oldest item went")
        self.assertEqual(c.get("cold3999"), b"c" * 1000)
        self.owned_blocks_match_the_heap()


class Restart(unittest.TestCase):
    def test_the_table_survives_a_stop_and_a_start_on_the_same_heap(self):
        s = Server(workers=2)
        try:
            client(s).set("persist", b"yes")
            self.assertEqual(s.stop(), 0)
            s2 = Server(workers=3, heap=s.heap)
            try:
                self.assertEqual(client(s2).get("persist"), b"yes")
            finally:
                self.assertEqual(s2.stop(), 0)
        finally:
            s.close()


class FewerWorkers(unittest.TestCase):
    def test_a_restart_with_fewer_workers_recovers_the_indexes_it_does_not_start(self):
        # Three workers die inside a write (pinned, blocks staged) while the supervisor is
        # stopped, so nobody replaces them; then the server goes. A new one with two workers
        # must recover index 2 itself, or its pinned announcement holds the epoch forever
        # (writes stall once the retire rings fill) and its staged blocks leak.
        s = Server(workers=3, env={"CXLKV_CRASH_POINT": "prepared:3"})
        try:
            os.kill(s.proc.pid, signal.SIGSTOP)
            conns = [client(s, timeout=1) for _ in range(3)]
            for c in conns:
                try:
                    for i in range(10):
                        c.set(f"x{i}", b"v")
                except Exception:
                    pass
            deadline = time.time() + 10
            while time.time() < deadline and any(os.path.exists(f"/proc/{p}/stat") and open(f"/proc/{p}/stat").read().split()[2] != "Z" for p in s.worker_pids()):
                time.sleep(0.05)
            os.kill(s.proc.pid, signal.SIGKILL)
            s.proc.wait()
            s2 = Server(workers=2, heap=s.heap)
            try:
                self.assertIn("recovered unused worker index 2", s2.output())
                c = client(s2, timeout=5)
                for i in range(3000):
                    c.set(f"y{i % 100}", b"w" * 10)
                self.assertEqual(c.get("y99"), b"w" * 10)
                time.sleep(0.2)
                owned = int(stats(s2.port, "cxlkv")["owned_blocks"])
                self.assertEqual(owned, s2.check()["live_blocks"], "blocks the table owns vs live blocks")
            finally:
                self.assertEqual(s2.stop(), 0)
        finally:
            s.close()


class WorkerDeath(Case):
    workers = 2

    def test_a_killed_worker_is_restarted_and_every_acknowledged_write_stays(self):
        c = client(self.server)
        for i in range(500):
            c.set(f"w{i}", f"{i}".encode())
        victims = self.server.worker_pids()
        for pid in victims:
            os.kill(pid, 9)
        deadline = time.time() + 10
        while time.time() < deadline and not set(self.server.worker_pids()).isdisjoint(victims):
            time.sleep(0.05)
        self.server.wait_workers()
        c = client(self.server)
        for i in range(500):
            self.assertEqual(c.get(f"w{i}"), f"{i}".encode())
        self.assertGreaterEqual(int(stats(self.server.port)["worker_restarts"]), 2)


class Writer(threading.Thread):
    """Sets and deletes its own keys until told to stop, through reconnects; remembers what was
    acknowledged, and what was in flight when a connection broke (that one may or may not
    have happened)."""

    def __init__(self, server, tag, keys=40):
        super().__init__(daemon=True)
        self.server, self.tag, self.keys = server, tag, keys
        self.acked, self.maybe = {}, {}
        self.broken = 0
        self.stop = threading.Event()

    def run(self):
        c = client(self.server, timeout=2)
        i = 0
        while not self.stop.is_set():
            key = f"{self.tag}-{i % self.keys}"
            value = None if i % 5 == 4 else f"{self.tag}-{i}".encode()
            try:
                if value is None:
                    c.delete(key, noreply=False)
                else:
                    c.set(key, value, noreply=False)
                self.acked[key] = value
                self.maybe.pop(key, None)
            except Exception:
                self.broken += 1
                self.maybe.setdefault(key, set()).add(value)
                time.sleep(0.05)
                c = client(self.server, timeout=2)
            i += 1

    def verify(self, test, c):
        for key, value in self.acked.items():
            allowed = {value} | self.maybe.get(key, set())
            test.assertIn(c.get(key), allowed, key)


def crash_point_case(spec):
    """Workers armed to die at a crash point (CXLKV_CRASH_POINT=spec), under writes from six
    client threads that contend on 16 buckets; the replacements recover."""

    class CrashPoint(Case):
        workers = 2
        env = {"CXLKV_CRASH_POINT": spec}
        buckets_log2 = 4

        def test(self):
            writers = [Writer(self.server, f"t{i}") for i in range(6)]
            for w in writers:
                w.start()
            deadline = time.time() + 30
            while time.time() < deadline and int(stats(self.server.port).get("worker_restarts", 0)) < spec.count("+") + 1:
                time.sleep(0.1)
            time.sleep(0.3)
            for w in writers:
                w.stop.set()
            for w in writers:
                w.join()
            restarts = int(stats(self.server.port)["worker_restarts"])
            self.assertGreaterEqual(restarts, spec.count("+") + 1, f"no worker died at {spec}")
            self.server.wait_workers()
            c = client(self.server)
            for w in writers:
                w.verify(self, c)
            self.assertIn("recovered its index", self.server.output())
            # Writes after the crash let the replacement reclaim what its predecessor retired.
            for j in range(300):
                c.set(f"after{j % 50}", b"x")
            time.sleep(0.2)
            self.owned_blocks_match_the_heap()

    name = "CrashAt_" + spec.split(":")[0].replace("-", "_") + ("_then_recovery" if "+" in spec else "")
    CrashPoint.__name__ = CrashPoint.__qualname__ = name
    return CrashPoint


for _spec in CRASH_SPECS:
    _case = crash_point_case(_spec)
    globals()[_case.__name__] = _case


if __name__ == "__main__":
    unittest.main()
