"""Read the harness's NDJSON (schema 1, `cxlalloc-bench/src/harness/record.rs`) into DataFrames.

The harness writes one line per worker *process* per run, so the data comes in three levels:

- `read_lines` — one row per line, with the fields the plots need flattened into columns;
- `runs`       — one row per `run_id`: throughput and PSS summed over the run's processes
                 (a run's throughput is the sum of its processes' throughputs, record.rs);
- `configs`    — one row per `config_id`: medians over the repeats' runs, so that one slow or
                 fast repeat does not move a ratio.

Every line is checked on the way in, and a bad one stops the load with its file and line number:
a silently skipped line would turn into a wrong sum.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

SCHEMA = 1

KV_BENCHMARKS = ("ycsb", "memcached")

# Field -> accepted JSON types. Only what cxlplot reads; other fields may come and go freely.
_REQUIRED = {
    "schema": int,
    "run_id": str,
    "config_id": str,
    "repeat": int,
    "benchmark": str,
    "params": dict,
    "allocator": str,
    "allocator_settings": dict,
    "allocator_label": str,
    "processes": int,
    "threads": int,
    "process": int,
    "throughput": (int, float),
    "memory": dict,
}
_PSS_FIELDS = ("hwcc_bytes", "swcc_bytes", "other_bytes", "total_bytes")

# Columns that describe a configuration: equal on every line of a run and every run of a config.
CONFIG_COLUMNS = [
    "config_id", "workload", "benchmark", "params_key", "params_text", "allocator",
    "allocator_label", "coherence", "recovery", "processes", "threads", "backing",
]
# Per-process quantities that add up over a run's lines.
SUM_COLUMNS = ["throughput", "ops", *_PSS_FIELDS, "peak_total_bytes"]


class LoadError(ValueError):
    """A line that cannot be used; the message starts with `FILE:LINE:`."""


def read_lines(paths: Iterable[str | Path]) -> pd.DataFrame:
    """One row per NDJSON line of `paths`, in file order. Blank lines are ignored.

    Raises `LoadError` for a line that is not JSON, lacks a field, has the wrong schema, or
    repeats a (run_id, process) pair already read (the same file passed twice would otherwise
    double every sum).
    """
    rows = []
    seen: dict[tuple[str, int], str] = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for lineno, text in enumerate(f, 1):
                if not text.strip():
                    continue
                where = f"{path}:{lineno}"
                try:
                    record = json.loads(text)
                except json.JSONDecodeError as e:
                    raise LoadError(f"{where}: not JSON: {e.msg} (column {e.colno})") from None
                row = _flatten(record, where)
                key = (row["run_id"], row["process"])
                if key in seen:
                    raise LoadError(
                        f"{where}: run {key[0]!r} process {key[1]} was already read at {seen[key]}"
                    )
                seen[key] = where
                rows.append(row)
    return pd.DataFrame(rows, columns=_LINE_COLUMNS)


def _flatten(record: object, where: str) -> dict:
    """Checks one parsed line and picks out the columns cxlplot uses."""
    if not isinstance(record, dict):
        raise LoadError(f"{where}: expected a JSON object, found {type(record).__name__}")
    for field, kind in _REQUIRED.items():
        if field not in record:
            raise LoadError(f"{where}: missing field {field!r}")
        value = record[field]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise LoadError(f"{where}: field {field!r} has unexpected value {value!r}")
    if record["schema"] != SCHEMA:
        raise LoadError(f"{where}: schema {record['schema']}, this reader knows schema {SCHEMA}")
    if not math.isfinite(record["throughput"]) or record["throughput"] < 0:
        raise LoadError(f"{where}: throughput {record['throughput']!r} is not a finite ops/s")
    memory = record["memory"]
    pss = {}
    for part in ("end", "peak"):
        block = memory.get(part)
        if not isinstance(block, dict):
            raise LoadError(f"{where}: missing field 'memory.{part}'")
        for field in _PSS_FIELDS:
            if not isinstance(block.get(field), int):
                raise LoadError(f"{where}: missing or non-integer 'memory.{part}.{field}'")
        pss[part] = block

    params = record["params"]
    settings = record["allocator_settings"]
    backing = record.get("backing")
    is_cxlalloc = record["allocator"] == "cxlalloc"
    extra = record.get("extra")
    return {
        "where": where,
        "run_id": record["run_id"],
        "date": record.get("date", ""),
        "workload": record.get("workload", ""),
        "config_id": record["config_id"],
        "repeat": record["repeat"],
        "benchmark": record["benchmark"],
        "params": params,
        # Canonical text of the params: a hashable key to match configurations across allocators.
        "params_key": json.dumps(params, sort_keys=True),
        "params_text": " ".join(f"{k}={params[k]}" for k in sorted(params)),
        "allocator": record["allocator"],
        "allocator_label": record["allocator_label"],
        # Defaults as docs/design.md §12.3 and the harness spell them: settings left out mean the default.
        "coherence": settings.get("coherence", "full") if is_cxlalloc else None,
        "recovery": bool(settings.get("recovery", True)) if is_cxlalloc else None,
        "processes": record["processes"],
        "threads": record["threads"],
        "backing": backing_label(backing if isinstance(backing, dict) else {}),
        "process": record["process"],
        "throughput": float(record["throughput"]),
        "ops": int(record.get("ops", 0)),
        **{field: pss["end"][field] for field in _PSS_FIELDS},
        "peak_total_bytes": pss["peak"]["total_bytes"],
        "extra": extra if isinstance(extra, dict) else {},
    }


_LINE_COLUMNS = [
    "where", "run_id", "date", "workload", "config_id", "repeat", "benchmark", "params",
    "params_key", "params_text", "allocator", "allocator_label", "coherence", "recovery",
    "processes", "threads", "backing", "process", *SUM_COLUMNS, "extra",
]


def backing_label(backing: dict) -> str:
    """What the run root gave (record.rs `backing`, docs/design.md §12.1), as the harness's table
    prints it: `huge=MODE` on a huge-page tmpfs, a note when huge pages were asked for and the
    run fell back, `-` for an ordinary root (and for lines from before the field)."""
    if backing.get("huge_pages"):
        return f"huge={backing.get('huge', '')}"
    if backing.get("requested"):
        return "no huge pages (fallback)"
    return "-"


def runs(lines: pd.DataFrame) -> pd.DataFrame:
    """One row per run: `SUM_COLUMNS` summed over its lines, `lines` = how many there were.

    `hwcc_share` is the run's end-of-run HWcc PSS over its total PSS. A crash run has fewer
    lines than processes (killed workers print nothing); `lines` says so.
    """
    _check_agree(lines, "run_id", "run")
    first = lines.drop_duplicates("run_id").set_index("run_id")
    grouped = lines.groupby("run_id", sort=False)
    out = first[[*CONFIG_COLUMNS, "date", "repeat", "params"]].join(grouped[SUM_COLUMNS].sum())
    out["lines"] = grouped.size()
    out["hwcc_share"] = _share(out["hwcc_bytes"], out["total_bytes"])
    return out.reset_index()


def configs(run_table: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration: medians of the run columns over its repeats.

    `repeats` counts the runs (resumed invocations add runs to the same `config_id`).
    """
    # `workload` may differ: the same configuration can come from two workload files.
    _check_agree(run_table, "config_id", "configuration", ignore=("workload",))
    first = run_table.drop_duplicates("config_id").set_index("config_id")
    grouped = run_table.groupby("config_id", sort=False)
    medians = grouped[[*SUM_COLUMNS, "hwcc_share"]].median()
    out = first[[c for c in CONFIG_COLUMNS if c != "config_id"] + ["params"]].join(medians)
    out["repeats"] = grouped.size()
    return out.reset_index()


def load(paths: Iterable[str | Path]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """`(lines, runs, configs)` of the files, the three levels most callers want."""
    line_table = read_lines(paths)
    run_table = runs(line_table)
    return line_table, run_table, configs(run_table)


def is_default_cxlalloc(df: pd.DataFrame) -> pd.Series:
    """cxlalloc as shipped: full coherence, recovery on — the row compared with baselines."""
    return (df["allocator"] == "cxlalloc") & (df["coherence"] == "full") & (df["recovery"] == True)  # noqa: E712


def param_sort_key(params: dict) -> tuple:
    """Orders params with numbers as numbers (size 8 before size 64), everything else as text."""
    return tuple(
        (k, 0, float(v), "") if isinstance(v, (int, float)) else (k, 1, 0.0, str(v))
        for k, v in sorted(params.items())
    )


def _share(part: pd.Series, total: pd.Series) -> pd.Series:
    """part / total, NaN where total is 0 (an empty measurement is not a 0 % share)."""
    return part / total.where(total > 0)


def _check_agree(df: pd.DataFrame, key: str, what: str, ignore: tuple[str, ...] = ()) -> None:
    """Raises when the rows sharing `key` disagree on a configuration column (mixed-up ids)."""
    columns = [c for c in CONFIG_COLUMNS if c != key and c not in ignore]
    if df.empty:
        return
    counts = df[[key, *columns]].astype(str).groupby(key).nunique()
    bad = counts[(counts > 1).any(axis=1)]
    if not bad.empty:
        ident = bad.index[0]
        fields = [c for c in columns if bad.loc[ident, c] > 1]
        raise LoadError(f"{what} {ident!r}: its lines disagree on {', '.join(fields)}")
