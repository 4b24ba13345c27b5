"""Starting, stopping and checking a cxlkv server (or Debian's memcached) for the tests, the
crash test and the load comparison (docs/design.md §16.7)."""

import json
import os
import signal
import socket
import subprocess
import time
import uuid

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
CXLKV = os.environ.get("CXLKV", os.path.join(ROOT, "target", "release", "cxlkv"))
CXLALLOC = os.environ.get("CXLALLOC", os.path.join(ROOT, "target", "release", "cxlalloc"))

# Every crash point of cxlkv/src/crash.rs, as CXLKV_CRASH_POINT values: the first process of
# each worker index dies at the point's Nth pass; after a `+`, what its replacement is armed
# with (recovery's own point is reached only by recovering from a crash at `swapped`).
CRASH_SPECS = [
    "staged:20",
    "prepared:20",
    "swapped:20",
    "published:20",
    "pushed:20",
    "failed:1",
    "reclaimed:20",
    "swapped:20+recover-marked:1",
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, timeout=20.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before listening")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port} after {timeout} s")


def command(port, line, timeout=5.0):
    """Sends one text-protocol command and returns the reply up to END (or one line). Retried
    on a connection refused or reset (a worker being killed and restarted): use it only for
    commands that may run twice (reads, stats)."""
    deadline = time.time() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
                s.sendall(line.encode() + b"\r\n")
                buf = b""
                while not (buf.endswith(b"END\r\n") or (buf.endswith(b"\r\n") and not buf.startswith(b"STAT"))):
                    chunk = s.recv(65536)
                    if not chunk:
                        raise ConnectionResetError("closed before the reply ended")
                    buf += chunk
                return buf.decode()
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.05)


def stats(port, arg=""):
    out = {}
    for line in command(port, ("stats " + arg).strip()).splitlines():
        parts = line.split(" ", 2)
        if parts[0] == "STAT":
            out[parts[1]] = parts[2]
    return out


class Server:
    """A cxlkv supervisor on a fresh heap and port; `stop()` sends SIGTERM and returns the exit
    status; `close()` also removes the heap."""

    def __init__(self, workers=2, memory_limit=None, heap=None, env=None, buckets_log2=16, port=None, binary=None):
        self.heap = heap or f"cxlkv-test-{uuid.uuid4().hex[:12]}"
        self.port = port or free_port()
        self.workers = workers
        args = [binary or CXLKV, "--port", str(self.port), "--workers", str(workers), "--heap", self.heap,
                "--buckets-log2", str(buckets_log2)]
        if memory_limit is not None:
            args += ["--memory-limit", str(memory_limit)]
        e = dict(os.environ)
        e.update(env or {})
        self.log = open(os.path.join("/tmp", f"{self.heap}.log"), "w+")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=e)
        wait_port(self.port, self.proc)
        self.wait_workers()

    def wait_workers(self, timeout=20.0):
        """Waits until every worker index has a live process."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if len(self.worker_pids()) >= self.workers:
                return
            time.sleep(0.05)
        raise RuntimeError("workers did not start")

    def worker_pids(self):
        try:
            with open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children") as f:
                return [int(p) for p in f.read().split()]
        except OSError:
            return []

    def stop(self, timeout=20.0):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None

    def output(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def check(self):
        """The heap checker's verdict and live block count (`cxlalloc check --json`)."""
        r = subprocess.run([CXLALLOC, "check", self.heap, "--json"], capture_output=True, text=True)
        if r.returncode != 0 and not r.stdout:
            raise RuntimeError(f"cxlalloc check failed: {r.stderr}")
        return json.loads(r.stdout)

    def close(self):
        self.stop()
        subprocess.run([CXLALLOC, "unlink", self.heap], capture_output=True)
        self.log.close()
        try:
            os.unlink(self.log.name)
        except OSError:
            pass
