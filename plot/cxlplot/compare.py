"""The headline ratios of docs/design.md §15, each next to its target.

Throughput ratios are geometric means over *matched* configurations: the two sides must agree on
benchmark, params, processes and threads, so a ratio never compares different work. Each side of
a match is its configuration's median over repeats (`load.configs`). A geometric mean, because the
ratios multiply: a 2x win and a 2x loss should cancel to 100 %, not average to 125 %.

A ratio with no matched configuration is reported as "n/a (no data)", never as 0 or 100 %.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

import pandas as pd

from .load import KV_BENCHMARKS, is_default_cxlalloc

MATCH = ["benchmark", "params_key", "processes", "threads"]


@dataclass
class Ratio:
    """One headline number. `value` is a fraction (1.0 = 100 %), None when it has no data."""

    name: str
    value: float | None
    n: int  # matched configurations (or runs, for HWcc shares) behind the value
    target: float
    op: str  # ">=" or "<=": how value must compare with target
    digits: int = 1  # decimals when printed as a percentage

    @property
    def met(self) -> bool | None:
        if self.value is None:
            return None
        return self.value >= self.target if self.op == ">=" else self.value <= self.target

    def to_json(self) -> dict:
        return {**asdict(self), "met": self.met}

    def line(self, width: int) -> str:
        target = f"target {self.op} {self.target * 100:g} %".ljust(17)
        if self.value is None:
            return f"  {self.name:<{width}}  {'n/a (no data)':>14}  {'':6}  {target}".rstrip()
        verdict = "met" if self.met else "MISSED"
        value = _pct(self.value, self.digits)
        return f"  {self.name:<{width}}  {value:>14}  n={self.n:<4}  {target} {verdict}"


def _pct(x: float, digits: int) -> str:
    return f"{x * 100:.{digits}f} %"


def geomean(values: pd.Series) -> float:
    """exp(mean(log x)) of positive values."""
    return math.exp(sum(math.log(v) for v in values) / len(values))


Mask = Callable[[pd.DataFrame], pd.Series]


def matched_ratio(configs: pd.DataFrame, benchmarks, num: Mask, den: Mask) -> tuple[float | None, int]:
    """Geometric mean over matched configurations of `benchmarks` of num / den throughput.

    When several configurations on one side share a match key (e.g. two seeds), their medians
    are combined by median.
    """
    sel = configs[configs["benchmark"].isin(list(benchmarks))]
    if sel.empty:
        return None, 0
    top = sel[num(sel)].groupby(MATCH)["throughput"].median()
    bottom = sel[den(sel)].groupby(MATCH)["throughput"].median()
    both = pd.concat([top, bottom], axis=1, keys=["num", "den"], join="inner")
    both = both[(both["num"] > 0) & (both["den"] > 0)]
    if both.empty:
        return None, 0
    return geomean(both["num"] / both["den"]), len(both)


def _allocator(name: str) -> Mask:
    return lambda df: df["allocator"] == name


def _cxlalloc(coherence: str, recovery: bool) -> Mask:
    return lambda df: (
        (df["allocator"] == "cxlalloc") & (df["coherence"] == coherence) & (df["recovery"] == recovery)
    )


GROUPS = {"KV": KV_BENCHMARKS, "threadtest": ("threadtest",), "xmalloc": ("xmalloc",)}


def headline(runs: pd.DataFrame, configs: pd.DataFrame) -> list[Ratio]:
    """All headline ratios, in the order of docs/design.md §15."""
    out = []
    for group, target in (("KV", 1.00), ("threadtest", 0.80), ("xmalloc", 1.00)):
        value, n = matched_ratio(configs, GROUPS[group], is_default_cxlalloc, _allocator("mimalloc"))
        out.append(Ratio(f"cxlalloc / mimalloc, {group}", value, n, target, ">="))
    for group in ("KV", "threadtest", "xmalloc"):
        value, n = matched_ratio(configs, GROUPS[group], _cxlalloc("full", True), _cxlalloc("full", False))
        out.append(Ratio(f"recoverable / non-recoverable, {group}", value, n, 0.98, ">="))
    for group, target in (("threadtest", 0.80), ("xmalloc", 0.20)):
        value, n = matched_ratio(configs, GROUPS[group], _cxlalloc("none", True), _cxlalloc("full", True))
        out.append(Ratio(f"no-HWcc (mCAS) / HWcc, {group}", value, n, target, ">="))
    # HWcc share: per run of default cxlalloc on KV (baselines have no HWcc region to count).
    kv = runs[runs["benchmark"].isin(list(KV_BENCHMARKS)) & is_default_cxlalloc(runs)]
    shares = kv["hwcc_share"].dropna()
    for stat in ("max", "mean"):
        value = float(getattr(shares, stat)()) if len(shares) else None
        out.append(Ratio(f"HWcc share of PSS, KV, {stat}", value, len(shares), 0.0002, "<=", digits=4))
    return out


def render(ratios: list[Ratio]) -> str:
    """Plain-text report, one ratio per line."""
    width = max(len(r.name) for r in ratios)
    head = "headline ratios (geometric means over matched configurations; docs/design.md §15 targets)"
    return "\n".join([head, *(r.line(width) for r in ratios)])
