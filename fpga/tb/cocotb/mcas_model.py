"""Reference model of the mCAS unit's rules (fpga/rtl/mcas_unit.sv header, docs/design.md §9.2), and a
linearizability check of an observed history that does not rely on the model.

The model is untimed: the testbench feeds it the events it observes on the unit's ports, in the
order the unit must apply them within one clock edge (a decision, then an accepted sprd, then an
accepted spwr), and it predicts every answer. Where the unit is free to choose (how long a request
waits, when memory answers), the observation decides; what the unit answers given that order is
fixed by the rules.
"""

from __future__ import annotations

from dataclasses import dataclass

ERR_NONE = 0
ERR_BAD_ID = 1
ERR_NO_OPERANDS = 2
ERR_BAD_TARGET = 3

MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class Answer:
    requester: int
    prev: int
    success: bool
    error: int = ERR_NONE


@dataclass
class _Operands:
    expected: int
    swap: int
    word: int | None  # None: the target was rejected
    failed_value: int | None = None  # set when a completion on the same word failed them (rule 2)


@dataclass(frozen=True)
class Decision:
    """A CAS that reached memory, as observed on the ports."""

    requester: int
    word: int
    expected: int
    swap: int
    prev: int
    success: bool


class McasModel:
    def __init__(self, requesters: int, words: int, memory: dict[int, int]):
        self.requesters = requesters
        self.words = words
        self.memory = dict(memory)
        self._parked: dict[int, _Operands] = {}
        self._serving: tuple[int, _Operands] | None = None

    def word_of(self, target: int) -> int | None:
        if target % 8 or target // 8 >= self.words:
            return None
        return target // 8

    def spwr(self, requester: int, expected: int, swap: int, target: int) -> bool:
        """A spwr was accepted; returns False when the unit must drop it (requester out of range)."""
        if not 0 <= requester < self.requesters:
            return False
        self._parked[requester] = _Operands(expected, swap, self.word_of(target))
        return True

    def sprd(self, requester: int) -> Answer | None:
        """A sprd was accepted: its answer when the unit gives it without memory, else None (the
        CAS is now being served and `decide` gives the answer)."""
        assert self._serving is None, "the unit accepted a sprd while serving another"
        if not 0 <= requester < self.requesters:
            return Answer(requester, 0, False, ERR_BAD_ID)
        ops = self._parked.pop(requester, None)
        if ops is None:
            return Answer(requester, 0, False, ERR_NO_OPERANDS)
        if ops.word is None:
            return Answer(requester, 0, False, ERR_BAD_TARGET)
        if ops.failed_value is not None:
            return Answer(requester, ops.failed_value, False)
        self._serving = (requester, ops)
        return None

    @property
    def serving(self) -> tuple[int, int, int] | None:
        """(word, expected, swap) of the CAS being served, if any."""
        if self._serving is None:
            return None
        ops = self._serving[1]
        return ops.word, ops.expected, ops.swap

    def decide(self) -> Answer:
        """The served CAS compared: apply it and rule 2, and return its answer."""
        assert self._serving is not None, "a decision without a CAS being served"
        requester, ops = self._serving
        self._serving = None
        prev = self.memory.get(ops.word, 0)
        success = prev == ops.expected
        if success:
            self.memory[ops.word] = ops.swap
        after = self.memory.get(ops.word, 0)
        for other in self._parked.values():
            if other.word == ops.word and other.failed_value is None:
                other.failed_value = after
        return Answer(requester, prev, success)


def check_linearizable(initial: dict[int, int], decisions: list[Decision],
                       final: dict[int, int]) -> list[str]:
    """Checks the CASes that reached memory, in the order they were decided, against a sequential
    CAS object: each reads what the previous one left, succeeds exactly when that equals its
    expected value, and memory ends holding what the successful ones left. Returns the violations.
    (Failures answered by rule 2 never reach memory; the testbench checks their previous value
    against the values the word held while they were pending.)"""
    problems = []
    current = dict(initial)
    for n, d in enumerate(decisions):
        value = current.get(d.word, 0)
        if d.prev != value:
            problems.append(f"decision {n} ({d}): read {d.prev:#x}, word held {value:#x}")
        if d.success != (value == d.expected):
            problems.append(f"decision {n} ({d}): success={d.success} with word {value:#x}")
        if d.success:
            current[d.word] = d.swap
    for word, value in current.items():
        if final.get(word, 0) != value:
            problems.append(f"word {word}: memory holds {final.get(word, 0):#x}, "
                            f"the successful CASes in order leave {value:#x}")
    return problems
