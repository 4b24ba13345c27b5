"""The paper's figures (docs/design.md §12.4), each drawn only from the data that is present.

Every `figN_*` function takes the loaded tables and returns either a matplotlib Figure or a string
saying why it has nothing to draw; `write_all` saves the figures as PNG and PDF and collects the
reasons, so a partial results file still yields the figures it can.

Conventions shared by the figures:
- a point or bar is a configuration's median over repeats (`load.configs`);
- the series is the allocator label, with " (multi-process)" appended for runs with more than one
  worker process, since cross-process runs of one allocator are a different line in the paper;
- an allocator label has one colour in every figure (`palette`); its multi-process series keeps
  that colour and is told apart by a dashed line or hatched bars;
- cxlalloc with reduced coherence appears only in Figure 12, against full HWcc;
- throughput axes switch to a log scale when the values span more than `LOG_SPAN`, as the paper
  does for mutex-bound baselines that are orders of magnitude slower, and their label says "(log)";
- an axis of thread or process counts has ticks at the counts the data has, and only there.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: never needs a display

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import NullLocator  # noqa: E402

from .load import KV_BENCHMARKS, LoadError, param_sort_key  # noqa: E402

MIB = 1 << 20
GIB = 1 << 30
LOG_SPAN = 50.0
MICRO_BENCHMARKS = ("threadtest", "xmalloc", "larson", "mstress")
KV_ORDER = ["YCSB-Load", "YCSB-A", "YCSB-D", "MC-12", "MC-15", "MC-31", "MC-37"]
COHERENCE_ORDER = ["full", "limited", "none"]
COHERENCE_LABEL = {"full": "full HWcc", "limited": "limited HWcc", "none": "no HWcc (mCAS)"}
CRASH_PANELS = 6  # runs drawn in Figure 7; more would make the panels unreadable
MULTI_PROCESS = " (multi-process)"
# Each allocator's colour (matplotlib's tab10), the same in every figure and every results file.
ALLOCATOR_COLORS = {
    "cxlalloc": "#2ca02c",  # green
    "mimalloc": "#1f77b4",  # blue
    "jemalloc": "#9467bd",  # purple
    "system": "#7f7f7f",  # grey
    "boost": "#d62728",  # red
    "pmdk": "#8c564b",  # brown
}
# For labels that are a variant of an allocator drawn beside its plain label (cxlalloc
# recovery=false), or an allocator not listed above: the rest of tab10, then tab20's light shades.
SPARE_COLORS = ["#ff7f0e", "#bcbd22", "#17becf", "#e377c2", "#98df8a", "#aec7e8", "#ff9896", "#c5b0d5",
                "#c49c94", "#f7b6d2", "#dbdb8d", "#9edae5", "#ffbb78"]
TITLE_WIDTH = 34  # characters of a panel title's line: three panels a row must not overlap


def series_name(df: pd.DataFrame) -> pd.Series:
    """Allocator label, marked when the run spans several processes."""
    multi = df["allocator_label"] + MULTI_PROCESS
    return df["allocator_label"].where(df["processes"] == 1, multi)


def palette(configs: pd.DataFrame) -> dict[str, str]:
    """Allocator label -> colour, one mapping for every figure of a results file.

    A label takes its allocator's colour from `ALLOCATOR_COLORS` when it is the allocator's only
    label in the data, or its plain name (`cxlalloc` beside `cxlalloc recovery=false`); other labels
    take `SPARE_COLORS` in name order. Every figure computes it from the whole table it is given,
    so the same data gives the same colours whichever figure draws them.
    """
    pairs = configs[["allocator", "allocator_label"]].drop_duplicates()
    labels_of = pairs.groupby("allocator")["allocator_label"].apply(set)
    colors, spare = {}, []
    for label, allocator in sorted(zip(pairs["allocator_label"], pairs["allocator"])):
        own = ALLOCATOR_COLORS.get(allocator)
        if own is not None and (label == allocator or len(labels_of[allocator]) == 1):
            colors[label] = own
        else:
            spare.append(label)
    for i, label in enumerate(spare):
        colors[label] = SPARE_COLORS[i % len(SPARE_COLORS)]
    return colors


def series_style(series: str, colors: dict[str, str]) -> dict:
    """Line keywords for a series: the label's colour; dashed with hollow markers for the
    multi-process one (hollow, so that a lone point is told apart too)."""
    multi = series.endswith(MULTI_PROCESS)
    label = series[: -len(MULTI_PROCESS)] if multi else series
    if multi:
        return {"color": colors[label], "linestyle": "--", "markerfacecolor": "white"}
    return {"color": colors[label], "linestyle": "-"}


def _scale(ax, values, label: str) -> None:
    """Sets a log scale when `values` span more than `LOG_SPAN`, and the axis label, marked
    "(log)" then: a log panel read as a linear one hides a 100x gap."""
    positive = [v for v in values if v > 0]
    if positive and max(positive) / min(positive) > LOG_SPAN:
        ax.set_yscale("log")
        label += " (log)"
    ax.set_ylabel(label)


def _count_ticks(ax, counts) -> None:
    """x ticks at the thread or process counts present, labelled as integers (a lone count would
    otherwise get fractional ticks around it)."""
    counts = sorted({int(c) for c in counts})
    ax.set_xticks(counts, [str(c) for c in counts])
    ax.xaxis.set_minor_locator(NullLocator())
    if len(counts) == 1:
        ax.set_xlim(counts[0] - 1, counts[0] + 1)


def _panel_title(ax, head: str, detail: str = "") -> None:
    """A panel title: `head`, then `detail` (parameters) wrapped to `TITLE_WIDTH` in smaller
    type, so that long parameter lists do not run into the next panel's title."""
    lines = textwrap.wrap(detail, TITLE_WIDTH) if detail else []
    ax.set_title("\n".join([head, *lines]), fontsize=10 if lines else None)


def size_text(nbytes: int) -> str:
    """`nbytes` in the largest binary unit that divides it: 16 MiB, 1 GiB, 1536 KiB."""
    for unit, name in ((GIB, "GiB"), (MIB, "MiB"), (1 << 10, "KiB")):
        if nbytes >= unit and nbytes % unit == 0:
            return f"{nbytes // unit} {name}"
    return f"{nbytes} B"


def _legend(fig, axes) -> None:
    """One legend for all panels, outside on the right: per-panel legends hide the points."""
    entries = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    fig.legend(entries.values(), entries.keys(), loc="outside right upper", fontsize=8)


def _grid(n: int, width: float = 4.2, height: float = 3.2):
    """`n` panels in rows of at most three, room on the right for the legend; returns the figure
    and the flat list of used axes."""
    cols = min(3, n)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols + 2, height * rows), squeeze=False,
                             layout="constrained")
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def _without_ablation(df: pd.DataFrame) -> pd.DataFrame:
    """Drops cxlalloc runs with reduced coherence: Figure 12 shows them, against full HWcc."""
    return df[df["coherence"].isna() | (df["coherence"] == "full")].copy()


def kv_workload(benchmark: str, params: dict) -> str:
    """The x-axis name of a KV configuration: YCSB-Load/A/D or the memcached cluster."""
    if benchmark == "ycsb":
        w = str(params.get("workload", "?"))
        return "YCSB-Load" if w == "load" else f"YCSB-{w.upper()}"
    return str(params.get("cluster", "memcached"))


def fig8_kv(configs: pd.DataFrame):
    """Figure 8: KV throughput and PSS per workload, bars per allocator, at the largest T."""
    kv = _without_ablation(configs[configs["benchmark"].isin(KV_BENCHMARKS)])
    if kv.empty:
        return "no ycsb or memcached runs"
    kv["group"] = [kv_workload(b, p) for b, p in zip(kv["benchmark"], kv["params"])]
    # One bar per allocator needs one thread count per workload: the largest, the paper's headline.
    kv = kv[kv["threads"] == kv.groupby("group")["threads"].transform("max")]
    kv["series"] = series_name(kv)
    agg = kv.groupby(["group", "series"]).agg(
        throughput=("throughput", "median"), total=("total_bytes", "median"), hwcc=("hwcc_bytes", "median")
    )
    threads = kv.groupby("group")["threads"].max()
    groups = sorted(threads.index, key=lambda g: (KV_ORDER.index(g) if g in KV_ORDER else len(KV_ORDER), g))
    series = sorted(kv["series"].unique())
    colors = palette(configs)

    fig, (ax_t, ax_m) = plt.subplots(2, 1, figsize=(max(6.0, 1.4 * len(groups) + 2), 6.5), sharex=True,
                                     layout="constrained")
    width = 0.8 / len(series)
    for i, name in enumerate(series):
        offset = (i - (len(series) - 1) / 2) * width
        present = [(j, agg.loc[(g, name)]) for j, g in enumerate(groups) if (g, name) in agg.index]
        xs = [j + offset for j, _ in present]
        color = series_style(name, colors)["color"]
        hatch = "//" if name.endswith(MULTI_PROCESS) else None  # the multi-process bars
        ax_t.bar(xs, [r.throughput / 1e6 for _, r in present], width, color=color, hatch=hatch, label=name)
        ax_m.bar(xs, [r.total / MIB for _, r in present], width, color=color, hatch=hatch)
        # The HWcc part is a sliver of the total: draw it black and print its share above the bar.
        ax_m.bar(xs, [r.hwcc / MIB for _, r in present], width, color="black")
        for x, (_, r) in zip(xs, present):
            if r.hwcc > 0 and r.total > 0:
                ax_m.annotate(f"{100 * r.hwcc / r.total:.3f}%", (x, r.total / MIB), ha="center",
                              va="bottom", rotation=90, fontsize=7, xytext=(0, 2), textcoords="offset points")
    _scale(ax_t, agg["throughput"], "throughput (Mops/s)")
    ax_m.set_ylabel("PSS at end (MiB)\nblack, %: HWcc part")
    ax_m.margins(y=0.18)  # room for the share labels above the tallest bar
    ax_m.set_xticks(range(len(groups)), [f"{g}\nT={threads[g]}" for g in groups])
    ax_t.legend(fontsize=8)
    ax_t.set_title("Figure 8: key-value store throughput and memory")
    return fig


def fig9_micro(configs: pd.DataFrame):
    """Figure 9: micro benchmark throughput vs threads, one panel per benchmark and params."""
    micro = _without_ablation(configs[configs["benchmark"].isin(MICRO_BENCHMARKS)])
    if micro.empty:
        return "no threadtest, xmalloc, larson or mstress runs"
    micro["series"] = series_name(micro)
    colors = palette(configs)
    panels = sorted(
        micro.groupby(["benchmark", "params_text"])["params"].first().items(),
        key=lambda kv: (MICRO_BENCHMARKS.index(kv[0][0]), param_sort_key(kv[1])),
    )
    fig, axes = _grid(len(panels))
    for ax, ((bench, ptext), _) in zip(axes, panels):
        sel = micro[(micro["benchmark"] == bench) & (micro["params_text"] == ptext)]
        # Several process counts at one T (same series) are combined by median.
        points = sel.groupby(["series", "threads"])["throughput"].median()
        for name in sorted(sel["series"].unique()):
            line = points.loc[name]
            ax.plot(line.index, line.values / 1e6, marker="o", label=name, **series_style(name, colors))
        _scale(ax, points.values, "throughput (Mops/s)")
        _panel_title(ax, bench, ptext)
        ax.set_xlabel("threads")
        _count_ticks(ax, sel["threads"])
        if ax.get_yscale() == "linear":
            ax.set_ylim(bottom=0)
    _legend(fig, axes)
    fig.suptitle("Figure 9: allocator micro benchmarks")
    return fig


def fig10_huge(configs: pd.DataFrame):
    """Figure 10: huge allocations, throughput vs processes, one panel per mode and object size
    (the benchmark's `size_mib`, 1024 when absent, as in the harness)."""
    huge = configs[configs["benchmark"] == "huge"].copy()
    if huge.empty:
        return "no huge runs"
    huge["mode"] = [str(p.get("mode", "threadtest")) for p in huge["params"]]
    huge["size"] = [int(p.get("size_mib", 1024)) * MIB for p in huge["params"]]
    colors = palette(configs)
    # One colour per allocator label; thread counts, when several, by line style.
    thread_counts = sorted(huge["threads"].unique())
    styles = ["-", "--", ":", "-."]
    panels = sorted(set(zip(huge["mode"], huge["size"])), key=lambda ms: (ms[1], ms[0]))
    fig, axes = _grid(len(panels))
    for ax, (mode, size) in zip(axes, panels):
        sel = huge[(huge["mode"] == mode) & (huge["size"] == size)]
        points = sel.groupby(["allocator_label", "backing", "threads", "processes"])["throughput"].median()
        series = dict.fromkeys(zip(*[points.index.get_level_values(i) for i in (0, 1, 2)]))
        for label, backing, threads in series:
            line = points.loc[(label, backing, threads)]
            # A run root with huge pages (docs/design.md §12.1) is its own series, same colour.
            name = label if backing == "-" else f"{label} ({backing})"
            name = f"{name}, T={threads}" if len(thread_counts) > 1 else name
            ax.plot(line.index, line.values, marker="o" if backing == "-" else "s", color=colors[label],
                    linestyle=styles[thread_counts.index(threads) % len(styles)], label=name)
        _panel_title(ax, f"huge {mode} ({size_text(size)} objects)")
        ax.set_xlabel("processes")
        _count_ticks(ax, sel["processes"])
        _scale(ax, points.values, "throughput (ops/s)")
        if ax.get_yscale() == "linear":
            ax.set_ylim(bottom=0)
    _legend(fig, axes)
    sizes = sorted(huge["size"].unique())
    fig.suptitle(f"Figure 10: huge allocations, {', '.join(size_text(s) for s in sizes)} objects")
    return fig


def coherence_tables(configs: pd.DataFrame):
    """Figure 12's numbers: `(ratio, hwcc)`, or a string saying why there are none.

    Both are indexed by (benchmark, params_text, processes, threads) with one column per
    coherence model present (full first). `ratio` is each model's median throughput over full
    HWcc's at the same point (a 2-process run is never compared with a 1-process one); `hwcc` is
    each model's median end-of-run HWcc PSS in bytes, summed over the run's processes (for no
    HWcc, the heap's mCAS window). Only points with full and at least one other model are kept.
    """
    sel = configs[
        (configs["allocator"] == "cxlalloc")
        & (configs["recovery"] == True)  # noqa: E712 (recovery is an object column)
        & configs["benchmark"].isin(["threadtest", "xmalloc"])
    ]
    if sel.empty:
        return "no cxlalloc threadtest or xmalloc runs"
    keys = ["benchmark", "params_text", "processes", "threads", "coherence"]
    grouped = sel.groupby(keys)
    table = grouped["throughput"].median().unstack("coherence")
    hwcc = grouped["hwcc_bytes"].median().unstack("coherence")
    others = [c for c in table.columns if c != "full"]
    if "full" not in table or not others:
        return "no cxlalloc runs with a coherence model other than full next to full"
    ratio = table.div(table["full"], axis=0).dropna(subset=["full"]).dropna(subset=others, how="all")
    if ratio.empty:
        return "no coherence model matched with a full-coherence run"
    models = [m for m in COHERENCE_ORDER if m in ratio.columns] + sorted(set(ratio.columns) - set(COHERENCE_ORDER))
    # Panels in Figure 9's order: benchmark, then params with numbers as numbers.
    params = sel.groupby(["benchmark", "params_text"])["params"].first()
    order = sorted(ratio.index, key=lambda k: (MICRO_BENCHMARKS.index(k[0]), param_sort_key(params[k[:2]]),
                                               k[3], k[2]))
    return ratio.loc[order, models], hwcc.reindex(index=order, columns=models)


def fig12_coherence(configs: pd.DataFrame):
    """Figure 12: cxlalloc per coherence model, normalized to full HWcc, per thread count; below,
    each model's HWcc memory (end-of-run PSS) when the runs recorded any."""
    tables = coherence_tables(configs)
    if isinstance(tables, str):
        return tables
    ratio, hwcc = tables
    models = list(ratio.columns)
    panels = list(dict.fromkeys(ratio.index.droplevel(["processes", "threads"])))
    with_memory = bool((hwcc.fillna(0) > 0).to_numpy().any())
    rows = 2 if with_memory else 1
    fig, axes = plt.subplots(rows, len(panels), figsize=(4.2 * len(panels) + 2, 3.2 * rows), squeeze=False,
                             layout="constrained")
    width = 0.8 / len(models)
    for col, (bench, ptext) in enumerate(panels):
        # Rows by position, not a partial .loc: the index is in plotting order, not sorted.
        at = [i for i, key in enumerate(ratio.index) if key[:2] == (bench, ptext)]
        points, memory = ratio.iloc[at], hwcc.iloc[at]
        ticks = [str(t) if p == 1 else f"{t} ({p} proc)" for _, _, p, t in points.index]
        ax = axes[0][col]
        for i, model in enumerate(models):
            xs = np.arange(len(points)) + (i - (len(models) - 1) / 2) * width
            values = points[model].to_numpy(dtype=float)
            ax.bar(xs, np.nan_to_num(values), width, label=COHERENCE_LABEL.get(model, model))
            # Printed too: a model 100x slower than full is a bar too thin to see.
            for x, v in zip(xs, values):
                if not np.isnan(v):
                    ax.annotate(f"{v:.2g}", (x, v), ha="center", va="bottom", fontsize=7, xytext=(0, 1),
                                textcoords="offset points")
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.margins(y=0.12)
        ax.set_xticks(range(len(points)), ticks)
        ax.set_xlabel("threads")
        ax.set_ylabel("throughput / full HWcc")
        _panel_title(ax, bench, ptext)
        if with_memory:
            ax = axes[1][col]
            for i, model in enumerate(models):
                xs = np.arange(len(memory)) + (i - (len(models) - 1) / 2) * width
                values = memory[model].to_numpy(dtype=float) / 1024
                ax.bar(xs, np.nan_to_num(values), width, label=COHERENCE_LABEL.get(model, model))
                for x, v in zip(xs, values):
                    if not np.isnan(v):
                        ax.annotate(f"{v:.0f}", (x, v), ha="center", va="bottom", fontsize=7, xytext=(0, 1),
                                    textcoords="offset points")
            ax.margins(y=0.12)
            ax.set_xticks(range(len(memory)), ticks)
            ax.set_xlabel("threads")
            ax.set_ylabel("HWcc PSS at end (KiB)")
    _legend(fig, axes[0])
    fig.suptitle("Figure 12: cxlalloc by coherence model")
    return fig


def _timeline(extra: dict, where: str) -> tuple[np.ndarray, np.ndarray]:
    """`extra.timeline` as (t, ops/s) arrays; a malformed one is an error naming its line."""
    try:
        points = np.asarray(extra["timeline"], dtype=float)
    except (KeyError, TypeError, ValueError):
        raise LoadError(f"{where}: extra.timeline is not a list of [t_seconds, ops_per_second]") from None
    if points.ndim != 2 or points.shape[1] != 2 or len(points) == 0:
        raise LoadError(f"{where}: extra.timeline is not a list of [t_seconds, ops_per_second]")
    return points[:, 0], points[:, 1]


def fig7_recovery(lines: pd.DataFrame):
    """Figure 7: survivors' throughput over time under SIGKILLs, one panel per crash run.

    A crash run has one line per process index, covering its killed incarnations and their
    replacements. Their sum is drawn over the time span all of them sampled; kill times are the
    union over the run's lines.
    """
    crash = lines[(lines["benchmark"] == "crash") & lines["extra"].map(lambda e: "timeline" in e)]
    if crash.empty:
        return "no crash runs with extra.timeline"
    run_ids = list(dict.fromkeys(crash["run_id"]))
    shown = run_ids[:CRASH_PANELS]
    fig, axes = _grid(len(shown), width=5.0, height=4.0)
    for ax, run_id in zip(axes, shown):
        run = crash[crash["run_id"] == run_id]
        series = [(p, *_timeline(e, w)) for p, e, w in zip(run["process"], run["extra"], run["where"])]
        for process, t, v in series:
            ax.plot(t, v / 1e6, lw=0.8, alpha=0.7, label=f"process {process}")
        if len(series) > 1:
            lo = max(t[0] for _, t, _ in series)
            hi = min(t[-1] for _, t, _ in series)
            grid = np.unique(np.concatenate([t[(t >= lo) & (t <= hi)] for _, t, _ in series]))
            total = sum(np.interp(grid, t, v) for _, t, v in series)
            ax.plot(grid, total / 1e6, color="black", lw=1.6, label="survivors, total")
        kills = sorted({float(k) for e in run["extra"] for k in e.get("kill_times_s", [])})
        for i, k in enumerate(kills):
            ax.axvline(k, color="red", ls="--", lw=0.8, label="kill" if i == 0 else None)
        first = run.iloc[0]
        ax.set_title(f"{first['allocator_label']} P={first['processes']} T={first['threads']} "
                     f"repeat {first['repeat']}: {len(kills)} kills", fontsize=9)
        ax.set_xlabel("time (s)")
        ax.set_ylabel("throughput (Mops/s)")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7)  # process numbers differ between runs: one legend per panel
    title = "Figure 7: throughput of survivors under crashes"
    if len(run_ids) > len(shown):
        title += f" (first {len(shown)} of {len(run_ids)} runs)"
    fig.suptitle(title)
    return fig


def write_all(lines: pd.DataFrame, configs: pd.DataFrame, out_dir: str | Path):
    """Saves every figure with data as NAME.png and NAME.pdf under `out_dir`.

    Returns `(written paths, {figure name: reason skipped})`.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    makers = {
        "fig7-recovery": lambda: fig7_recovery(lines),
        "fig8-kv": lambda: fig8_kv(configs),
        "fig9-micro": lambda: fig9_micro(configs),
        "fig10-huge": lambda: fig10_huge(configs),
        "fig12-coherence": lambda: fig12_coherence(configs),
    }
    written, skipped = [], {}
    for name, make in makers.items():
        fig = make()
        if isinstance(fig, str):
            skipped[name] = fig
            continue
        for ext in ("png", "pdf"):
            path = out / f"{name}.{ext}"
            # No creation date in the PDF, so the same data gives the same file.
            fig.savefig(path, dpi=150, metadata={"CreationDate": None} if ext == "pdf" else None)
            written.append(path)
        plt.close(fig)
    return written, skipped
