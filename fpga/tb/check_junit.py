"""Fails unless a JUnit XML results file reports at least N test cases and none failed or errored.

    python check_junit.py RESULTS.xml --min-tests N [--label NAME]

cocotb's runner can exit 0 when a test failed, so script/fpga.sh judges a cocotb run by this.
It counts <testcase> elements and their <failure>/<error> children itself rather than trusting the
suite's summary attributes, prints "LABEL: P passed, F failed" and exits 1 on any failure, a
missing or unreadable file, or fewer test cases than expected (a module that failed to import runs
no test at all).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from xml.etree import ElementTree


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--min-tests", type=int, required=True)
    parser.add_argument("--label", default="junit")
    args = parser.parse_args()
    try:
        root = ElementTree.parse(args.results).getroot()
    except (OSError, ElementTree.ParseError) as e:
        print(f"{args.label}: cannot read {args.results}: {e}", file=sys.stderr)
        return 1
    passed = failed = 0
    for case in root.iter("testcase"):
        bad = case.findall("failure") + case.findall("error")
        if bad:
            failed += 1
            detail = (bad[0].get("message") or bad[0].text or "").strip()
            first = detail.splitlines()[0] if detail else "(no message)"
            print(f"{args.label}: FAILED {case.get('name')}: {first}")
        elif case.find("skipped") is None:
            passed += 1
    print(f"{args.label}: {passed} passed, {failed} failed")
    if failed or passed < args.min_tests:
        if not failed:
            print(f"{args.label}: FAILED: {passed} test(s) passed, want at least {args.min_tests}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
