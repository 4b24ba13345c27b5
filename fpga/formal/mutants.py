"""Mutants of the mCAS unit for the formal stage (script/fpga.sh formal, fpga/README.md "Formal").

Each mutant removes or bends one rule of fpga/rtl/mcas_unit.sv by replacing one exact piece of
its text. The formal stage checks every mutant against the one property group it breaks (the
assertions whose names start with `group`) and requires a counterexample: a property that no
mutant can fail would be a property that checks nothing.

    python3 mutants.py list                  # one line per mutant: NAME GROUP
    python3 mutants.py write NAME RTL OUT    # RTL with mutant NAME applied, written to OUT

`write` fails when the text to replace does not occur exactly once, so an edit of the RTL that
moves it makes the stage fail loudly instead of checking an unmutated unit.
"""

import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    name: str
    group: str  # the assertions (by name prefix) that must fail
    old: str
    new: str
    why: str


MUTANTS = [
    Mutant(
        "conflict-rule-removed",
        "p_conflict",
        "loses[j] = decide && parked[j]",
        "loses[j] = 1'b0 && parked[j]",
        "Figure 6: a request parked on the word when another CAS decides runs its own CAS later",
    ),
    Mutant(
        "stall-removed",
        "p_stall",
        "wire stalled = state == S_WR_REQ || state == S_WR_WAIT;",
        "wire stalled = 1'b0;",
        "spwrs are accepted between a successful compare and the write's acknowledgement",
    ),
    Mutant(
        "write-never-acknowledged",
        "p_response",
        "S_WR_WAIT: if (mem_rsp_valid) state <= S_ANSWER;",
        "S_WR_WAIT: if (mem_rsp_valid) state <= S_WR_WAIT;",
        "the unit waits for a second acknowledgement of its write: a successful CAS never answers",
    ),
    Mutant(
        "writes-expected-value",
        "p_write",
        "assign mem_req_wdata = cur_swap;",
        "assign mem_req_wdata = cur_expected;",
        "a successful compare writes the expected value instead of the swap value",
    ),
    Mutant(
        "success-without-write",
        "p_shadow",
        "state <= match ? S_WR_REQ : S_ANSWER;",
        "state <= S_ANSWER;",
        "a successful compare answers success without writing: the update is lost",
    ),
    Mutant(
        "sprd-id-truncated",
        "p_reject",
        "wire sprd_id_ok = req_id < 64'(NUM_REQUESTERS);",
        "wire sprd_id_ok = 64'(sprd_idx) < 64'(NUM_REQUESTERS);",
        "a sprd's id is judged by its low bits (docs/design.md §14.7): id 4 reaches register 0",
    ),
    Mutant(
        "target-bound-unchecked",
        "p_reject",
        "{3'b0, line_word} < cfg_words;",
        "1'b1;",
        "a target at or after 8 * cfg_words bytes reaches memory",
    ),
]


def main(argv: list[str]) -> int:
    if argv[1:] == ["list"]:
        for m in MUTANTS:
            print(m.name, m.group)
        return 0
    if len(argv) == 5 and argv[1] == "write":
        _, _, name, rtl, out = argv
        found = [m for m in MUTANTS if m.name == name]
        if not found:
            print(f"mutants.py: no mutant named {name!r}", file=sys.stderr)
            return 2
        m = found[0]
        with open(rtl, encoding="utf-8") as f:
            text = f.read()
        if text.count(m.old) != 1:
            print(
                f"mutants.py: {name}: {m.old!r} occurs {text.count(m.old)} times in {rtl}, "
                "not once",
                file=sys.stderr,
            )
            return 1
        with open(out, "w", encoding="utf-8") as f:
            f.write(text.replace(m.old, m.new))
        print(f"{name}: {m.why}")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
