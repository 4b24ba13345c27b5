"""A reader for Value Change Dump files (IEEE 1364 §18, as Icarus Verilog and Verilator write them),
enough to draw timing diagrams: the header's timescale and variables, then every value change.

Values are kept as the dump spells them: one character ("0", "1", "x", "z") for a scalar, the binary
digits without the leading "b" for a vector, the number after "r" for a real. Several variables may
share one identifier code (the same net seen from several scopes); each of them gets the changes.
Sections that carry nothing for a waveform ($date, $version, $comment) are skipped.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from pathlib import Path

UNIT_SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "ps": 1e-12, "fs": 1e-15}


class VcdError(ValueError):
    """A malformed dump or a signal name that does not name exactly one variable."""


@dataclass
class Signal:
    name: str  # hierarchical, dot-separated, e.g. "tb_mcas.dut.req_valid"
    width: int
    times: list[int] = field(default_factory=list)  # strictly increasing, in timescale units
    values: list[str] = field(default_factory=list)

    def change(self, time: int, value: str) -> None:
        if self.times and self.times[-1] == time:
            self.values[-1] = value  # the last change within one time step wins
        else:
            self.times.append(time)
            self.values.append(value)

    def value_at(self, time: int) -> str:
        """The value during `time` ("x" before the first change)."""
        i = bisect.bisect_right(self.times, time)
        return self.values[i - 1] if i else "x"


@dataclass
class Dump:
    timescale: float | None  # seconds per time unit; None when the dump does not say
    signals: dict[str, Signal]
    end_time: int  # the last timestamp in the file

    def find(self, name: str) -> Signal:
        """The signal with this full name, or else the one whose name ends with "." + name."""
        if name in self.signals:
            return self.signals[name]
        matches = [s for full, s in self.signals.items() if full.endswith("." + name)]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise VcdError(f"no signal named {name!r}")
        names = ", ".join(sorted(s.name for s in matches))
        raise VcdError(f"{name!r} is ambiguous: {names}")


def _tokens(text: str):
    for lineno, line in enumerate(text.splitlines(), 1):
        for token in line.split():
            yield lineno, token


def _timescale(words: list[str], where: str) -> float:
    spec = "".join(words)
    digits = spec.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = spec[len(digits):]
    if digits not in ("1", "10", "100") or unit not in UNIT_SECONDS:
        raise VcdError(f"{where}: bad $timescale {' '.join(words)!r}")
    return int(digits) * UNIT_SECONDS[unit]


def parse(text: str, source: str = "<vcd>") -> Dump:
    tokens = _tokens(text)
    timescale = None
    scopes: list[str] = []
    signals: dict[str, Signal] = {}
    by_code: dict[str, list[Signal]] = {}
    lineno = 0

    def section() -> list[str]:
        """The words up to the next $end."""
        nonlocal lineno
        words = []
        for lineno, token in tokens:
            if token == "$end":
                return words
            words.append(token)
        raise VcdError(f"{source}:{lineno}: missing $end")

    for lineno, token in tokens:
        where = f"{source}:{lineno}"
        if token == "$timescale":
            timescale = _timescale(section(), where)
        elif token == "$scope":
            words = section()
            if len(words) != 2:
                raise VcdError(f"{where}: bad $scope {' '.join(words)!r}")
            scopes.append(words[1])
        elif token == "$upscope":
            section()
            if not scopes:
                raise VcdError(f"{where}: $upscope outside any scope")
            scopes.pop()
        elif token == "$var":
            words = section()
            if len(words) not in (4, 5) or not words[1].isdigit():
                raise VcdError(f"{where}: bad $var {' '.join(words)!r}")
            _, width, code, ref = words[:4]
            # "[7:0]" restates the width; "[3]" selects one bit of a vector and is part of the name.
            if len(words) == 5 and ":" not in words[4]:
                ref += words[4]
            name = ".".join(scopes + [ref])
            signal = signals.setdefault(name, Signal(name, int(width)))
            by_code.setdefault(code, []).append(signal)
        elif token == "$enddefinitions":
            section()
            break
        elif token.startswith("$"):
            section()
        else:
            raise VcdError(f"{where}: unexpected {token!r} in the header")
    else:
        raise VcdError(f"{source}:{lineno}: no $enddefinitions")

    time = 0
    pending_vector = None  # value of a "b..." / "r..." change whose identifier comes next
    for lineno, token in tokens:
        if pending_vector is not None:
            _apply(by_code, token, time, pending_vector, f"{source}:{lineno}")
            pending_vector = None
        elif token[0] == "#":
            try:
                time = int(token[1:])
            except ValueError:
                raise VcdError(f"{source}:{lineno}: bad timestamp {token!r}") from None
        elif token[0] in "bBrR":
            pending_vector = token[1:].lower()
        elif token[0] in "01xXzZ":
            _apply(by_code, token[1:], time, token[0].lower(), f"{source}:{lineno}")
        elif token in ("$dumpvars", "$dumpall", "$dumpon", "$dumpoff", "$end"):
            continue  # the values inside these blocks are ordinary changes
        elif token.startswith("$"):
            section()
        else:
            raise VcdError(f"{source}:{lineno}: unexpected {token!r}")
    if pending_vector is not None:
        raise VcdError(f"{source}:{lineno}: value without an identifier at the end")
    return Dump(timescale, signals, time)


def _apply(by_code: dict[str, list[Signal]], code: str, time: int, value: str, where: str) -> None:
    if code not in by_code:
        raise VcdError(f"{where}: change of undeclared identifier {code!r}")
    for signal in by_code[code]:
        signal.change(time, value)


def load(path) -> Dump:
    path = Path(path)
    return parse(path.read_text(), str(path))
