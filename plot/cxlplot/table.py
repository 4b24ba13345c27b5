"""A plain-text results table, one row per configuration, for terminals and the harness's log."""

from __future__ import annotations

import math

import pandas as pd

from .load import param_sort_key

MIB = 1 << 20

HEADER = ["benchmark", "params", "allocator", "P", "T", "Mops/s", "PSS MiB", "HWcc", "repeats", "root"]


def rows(configs: pd.DataFrame) -> list[list[str]]:
    """The table's cells, sorted so that the allocators of one configuration sit together."""
    order = sorted(
        configs.itertuples(),
        key=lambda c: (c.benchmark, param_sort_key(c.params), c.processes, c.threads, c.allocator_label, c.backing),
    )
    out = []
    for c in order:
        share = "-" if math.isnan(c.hwcc_share) else f"{c.hwcc_share * 100:.3f} %"
        out.append([
            c.benchmark,
            c.params_text or "-",
            c.allocator_label,
            str(c.processes),
            str(c.threads),
            f"{c.throughput / 1e6:.3f}",
            f"{c.total_bytes / MIB:.1f}",
            share,
            str(c.repeats),
            c.backing,
        ])
    return out


def render(configs: pd.DataFrame) -> str:
    """Columns padded to their widest cell; numbers right-aligned. Medians over repeats."""
    body = rows(configs)
    if not body:
        return "no runs"
    widths = [max(len(r[i]) for r in [HEADER, *body]) for i in range(len(HEADER))]
    numeric = {3, 4, 5, 6, 7, 8}

    def fmt(cells: list[str]) -> str:
        return "  ".join(
            cell.rjust(w) if i in numeric else cell.ljust(w) for i, (cell, w) in enumerate(zip(cells, widths))
        ).rstrip()

    return "\n".join([fmt(HEADER), "  ".join("-" * w for w in widths), *map(fmt, body)])
