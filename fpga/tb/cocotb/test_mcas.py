"""cocotb tests of mcas_unit under randomized contention; run.py runs them on Icarus and Verilator.

The testbench is one loop over clock cycles. At each falling edge it drives every input for the
next rising edge (requests from simulated requesters, random back-pressure on the answer channel,
and a device memory with random latency and random back-pressure), lets the outputs settle
(ReadOnly), and works out which transfers that rising edge makes. Those events go, in the order the
unit applies them, to three checkers:

- the reference model (mcas_model.McasModel), which predicts every answer exactly;
- port invariants: one memory request at a time, a read only for a sprd being served, a write only
  after a successful compare and only of its swap value, no request accepted between a successful
  compare and the write acknowledgement, a spwr_dropped pulse exactly after each out-of-range spwr;
- linearizability from the ports alone: the CASes that reached memory replay as a sequential CAS
  object in decision order and leave memory as it ends, and every answer's previous value is a
  value its word held while the request was pending.

Each test also requires that the interesting cases happened (conflict failures, spurious ones,
stalls, every error code), so a change that makes the traffic miss them fails instead of passing
vacuously. Seeds come from cocotb (COCOTB_RANDOM_SEED; run.py fixes one).
"""

from __future__ import annotations

import os
import random
from collections import Counter, deque
from collections.abc import Generator
from dataclasses import dataclass

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly

from mcas_model import (
    ERR_BAD_ID,
    ERR_BAD_TARGET,
    ERR_NO_OPERANDS,
    ERR_NONE,
    MASK64,
    Answer,
    Decision,
    McasModel,
    check_linearizable,
)

REQUESTERS = int(os.environ.get("MCAS_REQUESTERS", "64"))
WORDS = 16  # cfg_words: the device memory the tests give the unit
MAX_LATENCY = 6  # memory answers 1..MAX_LATENCY cycles after a request
MAX_ERRORS = 20  # stop early once the log would only repeat itself


@dataclass(frozen=True)
class Spwr:
    requester: int
    expected: int
    swap: int
    target: int


@dataclass(frozen=True)
class Sprd:
    requester: int


@dataclass(frozen=True)
class Wait:
    cycles: int


Script = Generator[Spwr | Sprd | Wait, Answer | None, None]


@dataclass
class _Agent:
    """A simulated requester: a generator that yields Spwr / Sprd / Wait and receives the answer of
    each Sprd."""

    script: Script
    request: Spwr | Sprd | None = None
    resume_at: int = 0
    awaiting_answer: bool = False
    done: bool = False


@dataclass
class _MemoryAccess:
    write: bool
    word: int
    wdata: int
    due: int


class Bench:
    def __init__(self, dut, rng: random.Random, initial: dict[int, int]):
        self.dut = dut
        self.rng = rng
        self.initial = dict(initial)
        self.memory = dict(initial)  # the device memory behind the port
        self.model = McasModel(REQUESTERS, WORDS, initial)
        self.cycle = 0
        self.errors: list[str] = []
        self.stats: Counter[str] = Counter()
        self.decisions: list[Decision] = []
        self._agents: list[_Agent] = []
        self._offer: tuple[_Agent, Spwr | Sprd] | None = None
        self._answers: deque[tuple[Answer, tuple | None]] = deque()  # (answer, decision info)
        self._access: _MemoryAccess | None = None
        self._read_issued = False
        self._stall = False  # between a successful compare and its write acknowledgement
        self._deciding = False  # the coming edge brings the served CAS's read data
        self._expect_dropped = False
        self._waiting: dict[int, _Agent] = {}  # requester id -> agent waiting for its answer
        self._pending_op: dict[int, tuple[Spwr, int]] = {}  # requester -> (spwr, accept cycle)
        self._history: dict[int, list[tuple[int, int]]] = {w: [(-1, v)] for w, v in initial.items()}

    def error(self, message: str) -> None:
        self.errors.append(f"cycle {self.cycle}: {message}")
        self.dut._log.error("cycle %d: %s", self.cycle, message)

    def add_agent(self, script: Script) -> None:
        agent = _Agent(script)
        self._agents.append(agent)
        self._advance(agent, None)

    # ---- agents ------------------------------------------------------------------------------

    def _advance(self, agent: _Agent, value) -> None:
        try:
            step = agent.script.send(value)
        except StopIteration:
            agent.done = True
            agent.request = None
            return
        if isinstance(step, Wait):
            agent.resume_at = self.cycle + step.cycles
            agent.request = None
            if step.cycles == 0:
                self._advance(agent, None)
        else:
            agent.request = step

    def _ready_agents(self) -> list[_Agent]:
        ready = []
        for agent in self._agents:
            if agent.done or agent.awaiting_answer:
                continue
            if agent.request is None and agent.resume_at <= self.cycle:
                self._advance(agent, None)
            if agent.request is not None:
                ready.append(agent)
        return ready

    def _busy(self) -> bool:
        return (any(not a.done for a in self._agents) or self._offer is not None
                or bool(self._answers) or self._access is not None)

    # ---- one clock cycle ---------------------------------------------------------------------

    async def reset(self) -> None:
        dut = self.dut
        dut.rst.value = 1
        dut.cfg_words.value = WORDS
        dut.req_valid.value = 0
        dut.req_spwr.value = 0
        dut.req_id.value = 0
        dut.req_line.value = 0
        dut.rsp_ready.value = 0
        dut.mem_req_ready.value = 0
        dut.mem_rsp_valid.value = 0
        dut.mem_rsp_rdata.value = 0
        for _ in range(3):
            await FallingEdge(dut.clk)
        dut.rst.value = 0

    async def run(self, max_cycles: int) -> None:
        while self._busy() and len(self.errors) < MAX_ERRORS:
            if self.cycle >= max_cycles:
                self.error(f"still busy after {max_cycles} cycles: a handshake hangs")
                break
            await self._step()

    async def _step(self) -> None:
        dut, rng = self.dut, self.rng
        await FallingEdge(dut.clk)
        self.cycle += 1

        # Drive this cycle's inputs.
        responding = self._access if self._access and self._access.due == self.cycle else None
        dut.mem_rsp_valid.value = int(responding is not None)
        if responding is not None:
            dut.mem_rsp_rdata.value = self.memory.get(responding.word, 0)
        mem_ready = rng.random() < 0.7
        dut.mem_req_ready.value = int(mem_ready)
        if self._offer is None:
            ready = self._ready_agents()
            if ready and rng.random() < 0.9:
                agent = rng.choice(ready)
                self._offer = (agent, agent.request)
                self._drive_request(agent.request)
        dut.req_valid.value = int(self._offer is not None)
        rsp_ready = rng.random() < 0.8
        dut.rsp_ready.value = int(rsp_ready)

        await ReadOnly()

        # Sample what the coming rising edge transfers.
        req_fire = self._offer is not None and int(dut.req_ready.value) == 1
        rsp_fire = rsp_ready and int(dut.rsp_valid.value) == 1
        mem_fire = mem_ready and int(dut.mem_req_valid.value) == 1
        dropped = int(dut.spwr_dropped.value) == 1
        if dropped != self._expect_dropped:
            self.error(f"spwr_dropped is {int(dropped)}, want {int(self._expect_dropped)}")
        self._expect_dropped = False
        stalled = self._stall

        # Apply them in the unit's order: memory answer (decision), memory request, request, answer.
        self._deciding = responding is not None and not responding.write
        if responding is not None:
            self._access = None
            self._memory_answer(responding)
        if mem_fire:
            self._memory_request()
        if req_fire:
            if stalled:
                self.error("a request was accepted between a successful compare and its write")
            agent, request = self._offer
            self._offer = None
            self._accept(agent, request)
        elif self._offer is not None and stalled:
            self.stats["request held by the stall"] += 1
        if rsp_fire:
            self._answer()

    def _drive_request(self, request: Spwr | Sprd) -> None:
        dut = self.dut
        if isinstance(request, Spwr):
            # The padding carries noise: the unit must ignore it.
            padding = self.rng.getrandbits(256)
            line = (request.expected | request.swap << 64 | request.target << 128
                    | request.requester << 192 | padding << 256)
            dut.req_spwr.value = 1
            dut.req_line.value = line
            dut.req_id.value = self.rng.getrandbits(64)  # unused by a spwr
        else:
            dut.req_spwr.value = 0
            dut.req_id.value = request.requester
            dut.req_line.value = self.rng.getrandbits(512)  # unused by a sprd

    # ---- events ------------------------------------------------------------------------------

    def _memory_request(self) -> None:
        dut = self.dut
        write = int(dut.mem_req_write.value) == 1
        word = int(dut.mem_req_addr.value)
        wdata = int(dut.mem_req_wdata.value)
        if self._access is not None:
            self.error("a second memory request while one is outstanding")
            return
        serving = self.model.serving
        if not write:
            if serving is None or self._read_issued:
                self.error(f"memory read of word {word} with no CAS waiting for one")
            elif word != serving[0]:
                self.error(f"memory read of word {word}, the CAS targets word {serving[0]}")
            self._read_issued = True
        else:
            want = self._answers[-1][1] if self._answers else None
            if not self._stall or want is None:
                self.error(f"memory write of word {word} without a successful compare")
            elif (word, wdata) != (want[0], want[2]):
                self.error(f"memory write {wdata:#x} to word {word}, want {want[2]:#x} to word "
                           f"{want[0]}")
        latency = self.rng.randint(1, MAX_LATENCY)
        self._access = _MemoryAccess(write, word, wdata, self.cycle + latency)

    def _memory_answer(self, access: _MemoryAccess) -> None:
        if access.write:
            self.memory[access.word] = access.wdata
            self._stall = False
            return
        self._read_issued = False
        read = self.memory.get(access.word, 0)
        if self.model.memory.get(access.word, 0) != read:
            self.error(f"word {access.word} holds {read:#x}, the model says "
                       f"{self.model.memory.get(access.word, 0):#x}")
        word, expected, swap = self.model.serving
        answer = self.model.decide()
        self._answers.append((answer, (word, expected, swap, read)))
        if answer.success:
            self._stall = True
            self._history.setdefault(word, [(-1, 0)]).append((self.cycle, swap))

    def _accept(self, agent: _Agent, request: Spwr | Sprd) -> None:
        if isinstance(request, Spwr):
            if self.model.spwr(request.requester, request.expected, request.swap, request.target):
                self._pending_op[request.requester] = (request, self.cycle)
                if self.model.serving is not None:
                    self.stats["spwr parked while a CAS is served"] += 1
                if self._deciding:
                    self.stats["spwr parked as a CAS decides"] += 1
            else:
                self._expect_dropped = True
                self.stats["spwr dropped"] += 1
            self._advance(agent, None)
            return
        answer = self.model.sprd(request.requester)
        if answer is not None:
            self._answers.append((answer, None))
        agent.request = None
        agent.awaiting_answer = True
        if request.requester in self._waiting:
            self.error(f"two agents share requester {request.requester}")
        self._waiting[request.requester] = agent

    def _answer(self) -> None:
        dut = self.dut
        got_id = int(dut.rsp_id.value)
        line = int(dut.rsp_line.value)
        got = Answer(got_id, line & MASK64, bool(line >> 64 & 1), int(dut.rsp_error.value))
        if line >> 65:
            self.error(f"answer line has bits set above the success flag: {line:#x}")
        if not self._answers:
            self.error(f"unexpected answer {got}")
            return
        want, decided = self._answers.popleft()
        if got != want:
            self.error(f"answer {got}, the model says {want}")
        agent = self._waiting.pop(got_id, None)
        if agent is None:
            self.error(f"answer for requester {got_id}, which is not waiting")
            return
        op = self._pending_op.pop(got_id, None)
        if decided is not None:
            word, expected, swap, read = decided
            if got.prev != read:
                self.error(f"answer's previous value {got.prev:#x}, memory read {read:#x}")
            self.decisions.append(Decision(got_id, word, expected, swap, got.prev, got.success))
        if got.error == ERR_NONE and op is not None:
            self._check_held(op[0], op[1], got)
        self.stats[self._kind(got, decided, op)] += 1
        agent.awaiting_answer = False
        self._advance(agent, got)

    @staticmethod
    def _kind(got: Answer, decided, op) -> str:
        if got.error != ERR_NONE:
            return f"error {got.error}"
        if got.success:
            return "success"
        if decided is not None:
            return "compare failure"
        if op is not None and got.prev == op[0].expected:
            return "spurious conflict failure"
        return "conflict failure"

    def _check_held(self, op: Spwr, since: int, got: Answer) -> None:
        """The previous value must be one the word held between the spwr and the answer."""
        history = self._history.get(op.target // 8, [(-1, 0)])
        held = {value for cycle, value in history if since < cycle <= self.cycle}
        held.add(next(value for cycle, value in reversed(history) if cycle <= since))
        if got.prev not in held:
            self.error(f"requester {got.requester}: previous value {got.prev:#x} was never held by "
                       f"word {op.target // 8} while its request was pending")

    # ---- end of test -------------------------------------------------------------------------

    def finish(self, need: list[str]) -> None:
        self.dut._log.info("%d cycles; %s", self.cycle,
                           ", ".join(f"{k}: {v}" for k, v in sorted(self.stats.items())))
        for problem in check_linearizable(self.initial, self.decisions, self.memory):
            self.error(problem)
        if self.model.memory != self.memory:
            self.error("device memory and the model's memory differ at the end")
        for kind in need:
            if self.stats[kind] == 0:
                self.error(f"the traffic never produced: {kind}")
        assert not self.errors, f"{len(self.errors)} problem(s); first: {self.errors[0]}"


async def start(dut, initial: dict[int, int]) -> Bench:
    Clock(dut.clk, 10, unit="ns").start()
    bench = Bench(dut, random.Random(cocotb.RANDOM_SEED), initial)
    await bench.reset()
    return bench


# ---- requester scripts -----------------------------------------------------------------------


def contending_requester(rng: random.Random, requester: int, words: list[int], known: dict[int, int],
                         operations: int):
    """Mostly well-formed CASes on a few hot words, expecting the last value it saw; now and then a
    wrong expected value, a replaced spwr, a sprd with nothing parked, or a bad target."""
    for _ in range(operations):
        word = rng.choice(words)
        roll = rng.random()
        if roll < 0.04:
            yield Sprd(requester)
            continue
        target = 8 * word
        if roll < 0.10:
            target = rng.choice([8 * word + rng.randint(1, 7), 8 * (WORDS + rng.randrange(4)),
                                 1 << 63 | 8 * word])
        if rng.random() < 0.05:
            yield Spwr(requester, rng.getrandbits(64), rng.getrandbits(64), 8 * rng.choice(words))
        expected = known[word] if rng.random() < 0.8 else rng.getrandbits(64)
        swap = rng.getrandbits(64)
        yield Spwr(requester, expected, swap, target)
        yield Wait(rng.randrange(12))
        answer = yield Sprd(requester)
        if answer.error == ERR_NONE:
            known[word] = swap if answer.success else answer.prev


def out_of_range_requester(rng: random.Random, ids: list[int], operations: int):
    """Requests under ids the unit has no register for, mixed into the traffic."""
    for _ in range(operations):
        requester = rng.choice(ids)
        if rng.random() < 0.5:
            yield Spwr(requester, 0, 1, 0)
        yield Wait(rng.randrange(4))
        yield Sprd(requester)


def incrementer(rng: random.Random, requester: int, words: list[int], known: dict[int, int],
                increments: int, tally: Counter):
    """Adds one to a random word `increments` times, retrying each with the value a failure
    returned."""
    for _ in range(increments):
        word = rng.choice(words)
        while True:
            yield Spwr(requester, known[word], (known[word] + 1) & MASK64, 8 * word)
            yield Wait(rng.randrange(8))
            answer = yield Sprd(requester)
            if answer.error != ERR_NONE:
                raise AssertionError(f"requester {requester}: error {answer.error} on a valid CAS")
            if answer.success:
                tally[word] += 1
                known[word] = (known[word] + 1) & MASK64
                break
            known[word] = answer.prev


# ---- tests -------------------------------------------------------------------------------------


@cocotb.test()
async def random_contention_matches_the_reference_model(dut):
    rng = random.Random(cocotb.RANDOM_SEED + 1)
    words = [2, 3, 9]
    initial = {w: rng.getrandbits(64) for w in range(WORDS)}
    bench = await start(dut, initial)
    # The highest id is always among them: off-by-one range checks show up there.
    ids = rng.sample(range(REQUESTERS - 1), 19) + [REQUESTERS - 1]
    for requester in ids:
        bench.add_agent(contending_requester(rng, requester, words, dict(initial), 80))
    bad_ids = [REQUESTERS, REQUESTERS + 1, 1 << 63 | 1, MASK64]
    bench.add_agent(out_of_range_requester(rng, bad_ids, 40))
    await bench.run(max_cycles=60_000)
    bench.finish(need=[
        "success", "compare failure", "conflict failure", "spurious conflict failure",
        f"error {ERR_BAD_ID}", f"error {ERR_NO_OPERANDS}", f"error {ERR_BAD_TARGET}",
        "spwr dropped", "spwr parked while a CAS is served", "spwr parked as a CAS decides",
        "request held by the stall",
    ])


@cocotb.test()
async def counter_increments_are_never_lost(dut):
    rng = random.Random(cocotb.RANDOM_SEED + 2)
    words = [0, 5, 15]
    initial = {w: rng.getrandbits(64) for w in range(WORDS)}
    initial[15] = MASK64 - 20  # wraps around during the test
    bench = await start(dut, initial)
    tally: Counter[int] = Counter()
    agents, increments = 16, 25
    for requester in rng.sample(range(REQUESTERS), agents):
        bench.add_agent(incrementer(rng, requester, words, dict(initial), increments, tally))
    await bench.run(max_cycles=60_000)
    for word in words:
        want = (initial[word] + tally[word]) & MASK64
        if bench.memory[word] != want:
            bench.error(f"word {word} holds {bench.memory[word]:#x}, want {want:#x} "
                        f"({tally[word]} increments)")
    if sum(tally.values()) != agents * increments:
        bench.error(f"{sum(tally.values())} increments succeeded, want {agents * increments}")
    bench.finish(need=["success", "conflict failure"])
