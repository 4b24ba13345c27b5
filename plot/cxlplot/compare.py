"""The headline of docs/design.md §15: every configuration's ratio to mimalloc, then the geomeans.

The targets are per row: one configuration (benchmark x params x processes x threads) below its
target is a regression even when the geometric mean hides it, so `rows` lists each one with its
own ratio, target and mark, and nothing is aggregated away.

The summary ratios below the rows are geometric means over *matched* configurations: the two sides must agree on
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

from .load import KV_BENCHMARKS, is_default_cxlalloc, param_sort_key

MATCH = ["benchmark", "params_key", "processes", "threads"]


@dataclass
class Ratio:
    """One headline number. `value` is a fraction (1.0 = 100 %), None when it has no data."""

    name: str
    value: float | None
    n: int  # matched configurations (or runs, for HWcc shares) behind the value
    target: float | None  # None: docs/design.md §15 sets no target for it
    op: str  # ">=" or "<=": how value must compare with target
    digits: int = 1  # decimals when printed as a percentage

    @property
    def met(self) -> bool | None:
        """None when there is nothing to judge: no value, or no target."""
        if self.value is None or self.target is None:
            return None
        return self.value >= self.target if self.op == ">=" else self.value <= self.target

    def to_json(self) -> dict:
        return {**asdict(self), "met": self.met}

    def target_text(self) -> str:
        return "-" if self.target is None else f"{self.op} {self.target * 100:g} %"

    def mark(self) -> str:
        """`met`, `MISSED`, or `-` when there is nothing to judge."""
        return {True: "met", False: "MISSED", None: "-"}[self.met]

    def line(self, width: int) -> str:
        target = f"target {self.target_text()}".ljust(17)
        if self.value is None:
            return f"  {self.name:<{width}}  {'n/a (no data)':>14}  {'':6}  {target}".rstrip()
        value = _pct(self.value, self.digits)
        return f"  {self.name:<{width}}  {value:>14}  n={self.n:<4}  {target} {self.mark()}"


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


GROUPS = {
    "KV": KV_BENCHMARKS, "threadtest": ("threadtest",), "xmalloc": ("xmalloc",), "larson": ("larson",),
}

# docs/design.md §15, per row: cxlalloc's throughput / mimalloc's, and (KV only) its peak PSS /
# mimalloc's. A benchmark missing here has no target against mimalloc; its rows are still listed.
ROW_THROUGHPUT_TARGETS = {"ycsb": 1.00, "memcached": 1.00, "threadtest": 1.00, "xmalloc": 1.00, "larson": 1.00}
ROW_PSS_TARGETS = {"ycsb": 1.10, "memcached": 1.10}


@dataclass
class Row:
    """One configuration of the data: cxlalloc (as shipped) against mimalloc, each judged alone.

    mimalloc is process-local, so it never runs a P > 1 configuration. Such a row of cxlalloc is
    judged against mimalloc's P = 1 row with the same benchmark, params and total threads
    (docs/design.md §15: the KV target at P = 2 processes x 1 thread is against mimalloc at
    1 x 2): `against` names that row's (processes, threads), and is None when mimalloc's row has
    the row's own shape (or there is none).
    """

    benchmark: str
    params: str  # "k=v ..." of the benchmark's parameters, "" when it has none
    processes: int
    threads: int
    backing: str  # the run root's pages (load.backing_label): "huge=within_size", "-", ...
    throughput: Ratio  # median throughput, cxlalloc / mimalloc
    pss: Ratio | None  # median peak PSS, cxlalloc / mimalloc; None where §15 sets no PSS target
    missing: str | None  # "no mimalloc" or "no cxlalloc" when only one side ran it
    against: tuple[int, int] | None = None  # mimalloc's (P, T) when it is not the row's own

    @property
    def met(self) -> bool | None:
        """False when either ratio misses its target; None when neither can be judged."""
        verdicts = [r.met for r in (self.throughput, self.pss) if r is not None and r.met is not None]
        return all(verdicts) if verdicts else None

    def to_json(self) -> dict:
        return {
            "benchmark": self.benchmark, "params": self.params, "processes": self.processes,
            "threads": self.threads, "backing": self.backing, "throughput": self.throughput.to_json(),
            "pss": None if self.pss is None else self.pss.to_json(),
            "missing": self.missing, "met": self.met,
            "against": None if self.against is None
            else {"processes": self.against[0], "threads": self.against[1]},
        }

    def against_text(self) -> str:
        """The note printed after a row judged against mimalloc at another shape, else ""."""
        return "" if self.against is None else f"vs mimalloc P={self.against[0]} T={self.against[1]}"


def rows(configs: pd.DataFrame) -> list[Row]:
    """One row per configuration that default cxlalloc or mimalloc ran, sorted like `table`.

    A cross-process row of cxlalloc (P > 1) that mimalloc did not run is judged against
    mimalloc's P = 1 row with the same benchmark, params and total threads, when there is one
    (`Row.against`). Any other configuration only one side ran (a failed allocator, a P > 1 row
    without such a P = 1 row) is kept, with its ratios n/a, so that a configuration dropping out
    of the data is seen too.

    cxlalloc's rows are per run root as well (`backing`: its heap on `/dev/shm` and on a
    huge-page tmpfs are two rows); mimalloc's memory is anonymous wherever it runs, so each of
    those rows is compared with the same mimalloc row.
    """
    key = ["benchmark", "params_key", "processes", "threads"]
    mine = configs[is_default_cxlalloc(configs)].groupby([*key, "backing"])
    theirs = configs[configs["allocator"] == "mimalloc"].groupby(key)
    mine_med = mine[["throughput", "peak_total_bytes"]].median()
    theirs_med = theirs[["throughput", "peak_total_bytes"]].median()
    first = configs.drop_duplicates(key).set_index(key)
    mine_keys = set(mine_med.index)
    only_theirs = {(*k, "-") for k in theirs_med.index} - {(*k[:4], "-") for k in mine_keys}
    only_theirs = {k for k in only_theirs if not any(m[:4] == k[:4] for m in mine_keys)}
    out = []
    for k in sorted(
        mine_keys | only_theirs,
        key=lambda k: (k[0], param_sort_key(first.loc[k[:4], "params"]), k[2], k[3], k[4] != "-", k[4]),
    ):
        benchmark, params_key, processes, threads, backing = k
        have_mine, theirs_key, against = k in mine_med.index, k[:4], None
        if have_mine and theirs_key not in theirs_med.index and processes > 1:
            # mimalloc cannot share a heap between processes: the same work in one process.
            theirs_key = (benchmark, params_key, 1, threads)
            if theirs_key in theirs_med.index:
                against = (1, int(threads))
        have_theirs = theirs_key in theirs_med.index
        missing = None if have_mine and have_theirs else ("no mimalloc" if have_mine else "no cxlalloc")

        def ratio(column: str, name: str, target: float | None, op: str) -> Ratio:
            value = None
            if missing is None and theirs_med.loc[theirs_key, column] > 0:
                value = float(mine_med.loc[k, column] / theirs_med.loc[theirs_key, column])
            return Ratio(name, value, 0 if value is None else 1, target, op)

        out.append(Row(
            benchmark, first.loc[k[:4], "params_text"], int(processes), int(threads), backing,
            ratio("throughput", "throughput", ROW_THROUGHPUT_TARGETS.get(benchmark), ">="),
            ratio("peak_total_bytes", "peak PSS", ROW_PSS_TARGETS[benchmark], "<=")
            if benchmark in ROW_PSS_TARGETS else None,
            missing,
            against,
        ))
    return out


def headline(runs: pd.DataFrame, configs: pd.DataFrame) -> list[Ratio]:
    """The geometric means and HWcc shares, in the order of docs/design.md §15."""
    out = []
    for group in ("KV", "threadtest", "xmalloc", "larson"):
        value, n = matched_ratio(configs, GROUPS[group], is_default_cxlalloc, _allocator("mimalloc"))
        out.append(Ratio(f"cxlalloc / mimalloc, {group}", value, n, 1.00, ">="))
    for group in ("KV", "threadtest", "xmalloc"):
        value, n = matched_ratio(configs, GROUPS[group], _cxlalloc("full", True), _cxlalloc("full", False))
        out.append(Ratio(f"recoverable / non-recoverable, {group}", value, n, 0.98, ">="))
    for group, target in (("threadtest", 0.90), ("xmalloc", 0.50)):
        value, n = matched_ratio(configs, GROUPS[group], _cxlalloc("none", True), _cxlalloc("full", True))
        out.append(Ratio(f"no-HWcc (mCAS) / HWcc, {group}", value, n, target, ">="))
    # HWcc share: per run of default cxlalloc on KV (baselines have no HWcc region to count).
    kv = runs[runs["benchmark"].isin(list(KV_BENCHMARKS)) & is_default_cxlalloc(runs)]
    shares = kv["hwcc_share"].dropna()
    for stat, target in (("max", 0.0003), ("mean", 0.0002)):
        value = float(getattr(shares, stat)()) if len(shares) else None
        out.append(Ratio(f"HWcc share of PSS, KV, {stat}", value, len(shares), target, "<=", digits=4))
    return out


ROW_HEADER = ["benchmark", "params", "P", "T", "cxlalloc/mimalloc", "target", "", "peak PSS", "target", "",
              "root", ""]


def _row_cells(row: Row) -> list[str]:
    cells = [row.benchmark, row.params or "-", str(row.processes), str(row.threads)]
    for ratio in (row.throughput, row.pss):
        if ratio is None:
            cells += ["-", "-", "-"]
            continue
        if ratio.value is None:
            value = f"n/a ({row.missing})" if row.missing else "n/a"
        else:
            value = _pct(ratio.value, ratio.digits)
        cells += [value, ratio.target_text(), ratio.mark()]
    return [*cells, row.backing, row.against_text()]


def render_rows(table: list[Row]) -> str:
    """The per-configuration table; ratio columns right-aligned, a missed target says MISSED."""
    if not table:
        return "no configuration of cxlalloc or mimalloc"
    body = [_row_cells(r) for r in table]
    widths = [max(len(r[i]) for r in [ROW_HEADER, *body]) for i in range(len(ROW_HEADER))]
    text = {0, 1, 6, 9, 10, 11}

    def fmt(cells: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i in text else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
        ).rstrip()

    rule = "  ".join("-" * w for w in widths).rstrip()
    return "\n".join([fmt(ROW_HEADER), rule, *map(fmt, body)])


# docs/design.md §15, huge blocks: cxlalloc against the best process-local allocator at P = 1, and
# against Boost.Interprocess with its segment on the same run root at P >= 2.
PROCESS_LOCAL = ("mimalloc", "jemalloc", "system")
HUGE_TARGET = 1.00


@dataclass
class HugeRow:
    """One huge configuration of default cxlalloc on one run root, against its §15 reference."""

    params: str
    processes: int
    threads: int
    backing: str  # the run root's pages (load.backing_label)
    reference: str  # the allocator label compared with, or why there is none
    throughput: Ratio  # median throughput, cxlalloc / reference (None without a reference)
    pss_mib: float  # cxlalloc's median peak PSS, MiB (summed over processes)
    reference_pss_mib: float | None

    def to_json(self) -> dict:
        return {**asdict(self), "throughput": self.throughput.to_json()}


def huge_rows(configs: pd.DataFrame) -> list[HugeRow]:
    """Every huge configuration default cxlalloc ran, per run root: its ratio to the best
    process-local allocator (P = 1; their memory is anonymous, so any root) or to Boost on the
    same root (P >= 2), each side its median over repeats."""
    huge = configs[configs["benchmark"] == "huge"]
    mine = huge[is_default_cxlalloc(huge)]
    if mine.empty:
        return []
    key = ["params_key", "processes", "threads", "backing"]
    med = mine.groupby(key)[["throughput", "peak_total_bytes"]].median()
    first = mine.drop_duplicates(key).set_index(key)
    out = []
    for k in sorted(med.index, key=lambda k: (param_sort_key(first.loc[k, "params"]), k[1], k[2], k[3] != "-", k[3])):
        params_key, processes, threads, backing = k
        same = huge[(huge["params_key"] == params_key) & (huge["processes"] == processes)
                    & (huge["threads"] == threads)]
        if processes == 1:
            others, none = same[same["allocator"].isin(PROCESS_LOCAL)], "no process-local allocator"
        else:
            others = same[(same["allocator"] == "boost") & (same["backing"] == backing)]
            none = "no Boost on this root"
        theirs = others.groupby("allocator_label")[["throughput", "peak_total_bytes"]].median()
        theirs = theirs[theirs["throughput"] > 0]
        value, reference, reference_pss = None, none, None
        if not theirs.empty:
            reference = str(theirs["throughput"].idxmax())
            value = float(med.loc[k, "throughput"] / theirs.loc[reference, "throughput"])
            reference_pss = float(theirs.loc[reference, "peak_total_bytes"]) / (1 << 20)
        out.append(HugeRow(
            first.loc[k, "params_text"], int(processes), int(threads), backing, reference,
            Ratio("throughput", value, 0 if value is None else 1, HUGE_TARGET, ">="),
            float(med.loc[k, "peak_total_bytes"]) / (1 << 20), reference_pss,
        ))
    return out


HUGE_HEADER = ["params", "P", "T", "root", "against", "cxlalloc/it", "target", "", "PSS MiB", "its PSS MiB"]


def render_huge(rows_: list[HugeRow]) -> str:
    """The huge-block table: one line per configuration and run root."""
    body = []
    for r in rows_:
        value = "n/a" if r.throughput.value is None else _pct(r.throughput.value, 1)
        body.append([r.params or "-", str(r.processes), str(r.threads), r.backing, r.reference, value,
                     r.throughput.target_text(), r.throughput.mark(), f"{r.pss_mib:.1f}",
                     "-" if r.reference_pss_mib is None else f"{r.reference_pss_mib:.1f}"])
    widths = [max(len(c[i]) for c in [HUGE_HEADER, *body]) for i in range(len(HUGE_HEADER))]
    text = {0, 3, 4, 7}

    def fmt(cells: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i in text else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
        ).rstrip()

    return "\n".join([fmt(HUGE_HEADER), "  ".join("-" * w for w in widths), *map(fmt, body)])


def render(table: list[Row], ratios: list[Ratio], huge: list[HugeRow] | None = None) -> str:
    """Plain-text report: every configuration's row, the huge-block rows (when there are any),
    then the summary ratios, one per line."""
    width = max(len(r.name) for r in ratios)
    missed = sum(1 for r in table if r.met is False)
    huge_part = []
    if huge:
        huge_missed = sum(1 for r in huge if r.throughput.met is False)
        huge_part = [
            "",
            "huge blocks (docs/design.md §15): cxlalloc against the best process-local allocator at P = 1 "
            f"and Boost on the same run root at P >= 2, per run root; {huge_missed} of {len(huge)} rows MISSED",
            render_huge(huge),
        ]
    return "\n".join([
        "per configuration, median over repeats (docs/design.md §15 targets per row); "
        f"{missed} of {len(table)} rows MISSED",
        render_rows(table),
        *huge_part,
        "",
        "geometric means over matched configurations; HWcc share per run (docs/design.md §15)",
        *(r.line(width) for r in ratios),
    ])
