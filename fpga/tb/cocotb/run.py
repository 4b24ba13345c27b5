"""Builds mcas_unit for one simulator and runs the cocotb tests in test_mcas.py on it.

    python run.py {icarus,verilator} --build-dir DIR --results FILE [--seed N]

The exit status only says whether the simulation ran: cocotb's runner can exit 0 although a test
failed, so the caller reads FILE (JUnit XML) with check_junit.py (script/fpga.sh does).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cocotb_tools.runner import get_runner

HERE = Path(__file__).resolve().parent
RTL = HERE.parent.parent / "rtl"
SOURCES = [RTL / "mcas_pkg.sv", RTL / "mcas_unit.sv"]
REQUESTERS = 64
# 16 word-address bits are plenty for the 16-word memory the tests configure through cfg_words,
# and keep the simulated comparators small.
PARAMETERS = {"NUM_REQUESTERS": REQUESTERS, "MEM_ADDR_W": 16}
SEED = 6  # fixed, so a failure reproduces; --seed explores others


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("simulator", choices=["icarus", "verilator"])
    parser.add_argument("--build-dir", type=Path, required=True)
    parser.add_argument("--results", type=Path, required=True, help="JUnit XML file to write")
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args()

    runner = get_runner(args.simulator)
    runner.build(
        sources=SOURCES,
        hdl_toplevel="mcas_unit",
        parameters=PARAMETERS,
        build_dir=args.build_dir,
        # Icarus skips a rebuild when only parameters changed; it compiles in well under a second.
        always=args.simulator == "icarus",
        timescale=("1ns", "1ps"),
    )
    runner.test(
        test_module="test_mcas",
        hdl_toplevel="mcas_unit",
        build_dir=args.build_dir,
        results_xml=str(args.results.resolve()),
        seed=args.seed,
        extra_env={"MCAS_REQUESTERS": str(REQUESTERS)},
    )


if __name__ == "__main__":
    main()
