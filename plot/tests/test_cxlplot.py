"""Tests of cxlplot against the recorded fixture (numbers derived in make_fixture.py).

Run from the repository root:  .venv/bin/python -m unittest discover -s plot/tests
(script/test.sh does this after `ensure_venv`). The module puts plot/ on sys.path itself.
"""

import contextlib
import io
import json
import re
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import matplotlib  # noqa: E402

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from cxlplot import compare, figures, load, table  # noqa: E402
from cxlplot.__main__ import main  # noqa: E402

sys.path.insert(0, str(HERE))
import make_fixture  # noqa: E402  (the fixture's record builder, for records made in a test)

FIXTURE = HERE / "fixture.ndjson"
M = 1e6


def fixture_records():
    return [json.loads(text) for text in FIXTURE.read_text().splitlines() if text.strip()]


def write_records(directory, records, name="results.ndjson"):
    path = Path(directory) / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def ratios_by_name(runs, configs):
    return {r.name: r for r in compare.headline(runs, configs)}


class Loading(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.lines, cls.runs, cls.configs = load.load([FIXTURE])

    def config(self, benchmark, allocator_label, processes, threads, **params):
        c = self.configs
        key = json.dumps(params, sort_keys=True)
        rows = c[(c.benchmark == benchmark) & (c.allocator_label == allocator_label)
                 & (c.processes == processes) & (c.threads == threads) & (c.params_key == key)]
        self.assertEqual(len(rows), 1)
        return rows.iloc[0]

    def test_every_line_is_read(self):
        self.assertEqual(len(self.lines), len(fixture_records()))

    def test_run_throughput_is_the_sum_over_its_processes(self):
        run = self.runs.set_index("run_id").loc["threadtest-size8-cxlalloc-p2-t2-r0"]
        self.assertEqual(run.lines, 2)
        self.assertEqual(run.throughput, 90 * M)  # 40 M + 50 M

    def test_run_memory_is_the_sum_over_its_processes(self):
        run = self.runs.set_index("run_id").loc["ycsb-workloadd-cxlalloc-p2-t2-r0"]
        self.assertEqual(run.total_bytes, 400_000_000)
        self.assertEqual(run.hwcc_bytes, 40_000)
        self.assertEqual(run.hwcc_share, 1e-4)  # of the sums, not the mean of per-process shares

    def test_config_throughput_is_the_median_over_repeats(self):
        mimalloc = self.config("threadtest", "mimalloc", 1, 2, size=8)
        self.assertEqual(mimalloc.repeats, 3)
        self.assertEqual(mimalloc.throughput, 120 * M)  # median of 100, 200, 120 (mean is 140)
        self.assertEqual(self.config("threadtest", "cxlalloc", 2, 2, size=8).throughput, 95 * M)

    def test_absent_settings_mean_full_coherence_and_recovery_on(self):
        default = self.config("xmalloc", "cxlalloc", 1, 2)
        self.assertEqual((default.coherence, default.recovery), ("full", True))
        self.assertEqual(self.config("xmalloc", "cxlalloc coherence=none", 1, 2).coherence, "none")
        self.assertFalse(self.config("threadtest", "cxlalloc recovery=false", 1, 2, size=8).recovery)
        self.assertIsNone(self.config("xmalloc", "mimalloc", 1, 2).coherence)

    def test_a_crash_run_keeps_only_its_survivors(self):
        run = self.runs[self.runs.benchmark == "crash"].iloc[0]
        self.assertEqual((run.processes, run.lines), (3, 2))


class MalformedInput(unittest.TestCase):
    def assert_load_error(self, text, *fragments):
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "bad.ndjson"
            path.write_text(text)
            with self.assertRaises(load.LoadError) as caught:
                load.read_lines([path])
            for fragment in (f"{path}:", *fragments):
                self.assertIn(fragment, str(caught.exception))

    def test_a_line_that_is_not_json_names_its_file_and_line(self):
        good = FIXTURE.read_text().splitlines()[0]
        self.assert_load_error(f"{good}\n\n{{\"schema\": 1,\n", ":3:", "not JSON")

    def test_a_missing_field_is_named(self):
        record = fixture_records()[0]
        del record["throughput"]
        self.assert_load_error(json.dumps(record) + "\n", ":1:", "'throughput'")

    def test_a_missing_memory_field_is_named(self):
        record = fixture_records()[0]
        del record["memory"]["end"]["hwcc_bytes"]
        self.assert_load_error(json.dumps(record) + "\n", ":1:", "memory.end.hwcc_bytes")

    def test_an_unknown_schema_is_refused(self):
        record = fixture_records()[0]
        record["schema"] = 2
        self.assert_load_error(json.dumps(record) + "\n", ":1:", "schema 2")

    def test_the_same_process_of_a_run_read_twice_is_refused(self):
        good = FIXTURE.read_text().splitlines()[0]
        self.assert_load_error(f"{good}\n{good}\n", ":2:", "already read at")

    def test_the_command_line_reports_the_error_and_exits_2(self):
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "bad.ndjson"
            path.write_text("not json\n")
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                self.assertEqual(main(["compare", str(path)]), 2)
            self.assertIn(f"{path}:1:", err.getvalue())


class Compare(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        _, runs, configs = load.load([FIXTURE])
        cls.ratios = ratios_by_name(runs, configs)

    def assert_ratio(self, name, value, n):
        ratio = self.ratios[name]
        self.assertAlmostEqual(ratio.value, value, places=12, msg=name)
        self.assertEqual(ratio.n, n, msg=name)

    def test_cxlalloc_against_mimalloc(self):
        self.assert_ratio("cxlalloc / mimalloc, KV", 0.99 ** (1 / 3), 3)  # 1.1 * 0.9 * 1.0
        self.assert_ratio("cxlalloc / mimalloc, threadtest", 1.0, 3)  # 0.8 * 1.0 * 1.25
        self.assert_ratio("cxlalloc / mimalloc, xmalloc", 1.2, 2)

    def test_recoverable_against_non_recoverable(self):
        self.assert_ratio("recoverable / non-recoverable, KV", 1.0, 1)
        self.assert_ratio("recoverable / non-recoverable, threadtest", 0.96, 1)

    def test_no_hwcc_against_hwcc(self):
        self.assert_ratio("no-HWcc (mCAS) / HWcc, threadtest", 0.9, 1)
        self.assert_ratio("no-HWcc (mCAS) / HWcc, xmalloc", 0.25, 1)

    def test_hwcc_share_of_kv_runs(self):
        self.assert_ratio("HWcc share of PSS, KV, max", 2e-4, 8)
        self.assert_ratio("HWcc share of PSS, KV, mean", 1.3125e-4, 8)

    def test_targets_are_judged(self):
        self.assertFalse(self.ratios["cxlalloc / mimalloc, KV"].met)  # 99.7 % < 100 %
        self.assertTrue(self.ratios["cxlalloc / mimalloc, xmalloc"].met)  # 120 % >= 100 %
        self.assertTrue(self.ratios["no-HWcc (mCAS) / HWcc, threadtest"].met)  # 90 % >= 90 %
        self.assertFalse(self.ratios["no-HWcc (mCAS) / HWcc, xmalloc"].met)  # 25 % < 50 %
        self.assertTrue(self.ratios["HWcc share of PSS, KV, max"].met)  # 0.02 % <= 0.03 %

    def test_a_ratio_without_data_is_na(self):
        ratio = self.ratios["recoverable / non-recoverable, xmalloc"]
        self.assertIsNone(ratio.value)
        self.assertIsNone(ratio.met)
        self.assertIn("n/a (no data)", ratio.line(40))

    def test_text_and_json_output(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self.assertEqual(main(["compare", str(FIXTURE)]), 0)
        self.assertIn("target >= 50 %", out.getvalue())
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self.assertEqual(main(["compare", "--json", str(FIXTURE)]), 0)
        parsed = {r["name"]: r for r in json.loads(out.getvalue())["ratios"]}
        self.assertAlmostEqual(parsed["cxlalloc / mimalloc, xmalloc"]["value"], 1.2, places=12)
        self.assertIsNone(parsed["recoverable / non-recoverable, xmalloc"]["value"])

    def test_without_kv_or_mimalloc_every_ratio_is_na(self):
        records = [r for r in fixture_records() if r["benchmark"] == "threadtest" and r["allocator"] == "cxlalloc"
                   and not r["allocator_settings"]]
        with tempfile.TemporaryDirectory() as d:
            _, runs, configs = load.load([write_records(d, records)])
        ratios = ratios_by_name(runs, configs)
        for name in ("cxlalloc / mimalloc, KV", "cxlalloc / mimalloc, threadtest", "HWcc share of PSS, KV, max"):
            self.assertIsNone(ratios[name].value, name)
            self.assertEqual(ratios[name].n, 0, name)


# Every configuration of the fixture that default cxlalloc or mimalloc ran, as (benchmark, params,
# P, T) -> (throughput ratio cell, its target cell, its mark), the numbers of make_fixture.py.
FIXTURE_ROWS = {
    ("crash", "kills=2", 3, 3): ("n/a (no mimalloc)", "-", "-"),
    ("memcached", "cluster=MC-12", 1, 2): ("100.0 %", ">= 100 %", "met"),
    ("threadtest", "size=8", 1, 2): ("80.0 %", ">= 100 %", "MISSED"),
    ("threadtest", "size=8", 1, 4): ("100.0 %", ">= 100 %", "met"),
    ("threadtest", "size=8", 2, 2): ("79.2 %", ">= 100 %", "MISSED"),  # against mimalloc at P=1 T=2
    ("threadtest", "size=64", 1, 2): ("125.0 %", ">= 100 %", "met"),
    ("xmalloc", "-", 1, 2): ("120.0 %", ">= 100 %", "met"),
    ("xmalloc", "-", 1, 4): ("120.0 %", ">= 100 %", "met"),
    ("xmalloc", "-", 2, 2): ("86.0 %", ">= 100 %", "MISSED"),  # against mimalloc at P=1 T=2
    ("ycsb", "workload=a", 1, 2): ("90.0 %", ">= 100 %", "MISSED"),
    ("ycsb", "workload=d", 2, 2): ("n/a (no mimalloc)", ">= 100 %", "-"),
    ("ycsb", "workload=load", 1, 2): ("110.0 %", ">= 100 %", "met"),
}


def printed_rows(text):
    """The per-configuration lines of `compare`'s text output, keyed like FIXTURE_ROWS."""
    out = {}
    for line in text.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) >= 7 and cells[2].isdigit() and cells[3].isdigit():
            out[(cells[0], cells[1], int(cells[2]), int(cells[3]))] = cells[4:]
    return out


class HeadlineRows(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        _, runs, configs = load.load([FIXTURE])
        cls.rows = {(r.benchmark, r.params or "-", r.processes, r.threads): r for r in compare.rows(configs)}
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            main(["compare", str(FIXTURE)])
        cls.text = out.getvalue()

    def test_every_configuration_is_printed_with_its_ratio_target_and_mark(self):
        printed = printed_rows(self.text)
        self.assertEqual(set(printed), set(FIXTURE_ROWS))
        for key, cells in FIXTURE_ROWS.items():
            self.assertEqual(tuple(printed[key][:3]), cells, key)

    def test_a_row_below_its_target_is_missed_though_its_geomean_is_met(self):
        row = self.rows[("threadtest", "size=8", 1, 2)]
        self.assertAlmostEqual(row.throughput.value, 0.80, places=12)
        self.assertFalse(row.met)
        geomean = {r.name: r for r in compare.headline(*load.load([FIXTURE])[1:])}
        self.assertTrue(geomean["cxlalloc / mimalloc, threadtest"].met)

    def test_a_kv_row_over_its_peak_pss_target_is_missed_though_its_throughput_is_met(self):
        row = self.rows[("ycsb", "workload=load", 1, 2)]
        self.assertTrue(row.throughput.met)
        self.assertAlmostEqual(row.pss.value, 1_100_000_000 / 990_000_000, places=12)
        self.assertEqual((row.pss.target, row.pss.met, row.met), (1.10, False, False))
        self.assertEqual(printed_rows(self.text)[("ycsb", "workload=load", 1, 2)][3:6],
                         ["111.1 %", "<= 110 %", "MISSED"])

    def test_only_kv_rows_have_a_peak_pss_target(self):
        with_pss = {key[0] for key, row in self.rows.items() if row.pss is not None}
        self.assertEqual(with_pss, {"ycsb", "memcached"})

    def test_the_summary_counts_the_missed_rows(self):
        # threadtest 8 T=2 at P=1 and P=2, xmalloc P=2, ycsb a, load, MC-12
        self.assertIn("6 of 12 rows MISSED", self.text)

    def test_json_lists_every_row(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self.assertEqual(main(["compare", "--json", str(FIXTURE)]), 0)
        parsed = json.loads(out.getvalue())["rows"]
        keys = {(r["benchmark"], r["params"] or "-", r["processes"], r["threads"]) for r in parsed}
        self.assertEqual(keys, set(FIXTURE_ROWS))
        row = next(r for r in parsed if (r["benchmark"], r["params"], r["threads"]) == ("ycsb", "workload=a", 2))
        self.assertAlmostEqual(row["throughput"]["value"], 0.9, places=12)
        self.assertEqual((row["throughput"]["target"], row["met"]), (1.0, False))

    def test_a_cross_process_row_is_judged_against_mimalloc_at_one_process_with_as_many_threads(self):
        row = self.rows[("threadtest", "size=8", 2, 2)]
        self.assertEqual((row.against, row.missing), ((1, 2), None))
        self.assertAlmostEqual(row.throughput.value, 95 / 120, places=12)  # median 95 M / 120 M
        self.assertFalse(row.met)

    def test_a_row_judged_at_another_shape_says_which_in_text_and_json(self):
        line = next(t for t in self.text.splitlines() if t.startswith("xmalloc") and "  2  2  " in t)
        self.assertTrue(line.endswith("vs mimalloc P=1 T=2"), line)
        same = next(t for t in self.text.splitlines() if t.startswith("xmalloc") and "  1  2  " in t)
        self.assertNotIn("vs mimalloc", same)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            main(["compare", "--json", str(FIXTURE)])
        parsed = {(r["benchmark"], r["processes"], r["threads"]): r for r in json.loads(out.getvalue())["rows"]}
        self.assertEqual(parsed[("xmalloc", 2, 2)]["against"], {"processes": 1, "threads": 2})
        self.assertIsNone(parsed[("xmalloc", 1, 2)]["against"])

    def test_a_cross_process_row_without_mimalloc_at_one_process_stays_na(self):
        row = self.rows[("ycsb", "workload=d", 2, 2)]  # mimalloc ran no ycsb d at all
        self.assertEqual((row.missing, row.against, row.throughput.value), ("no mimalloc", None, None))

    def test_a_one_process_row_mimalloc_lacks_is_not_judged_against_another_thread_count(self):
        records = [r for r in fixture_records() if r["allocator"] == "cxlalloc" or r["threads"] != 4]
        with tempfile.TemporaryDirectory() as d:
            _, runs, configs = load.load([write_records(d, records)])
        rows = {(r.benchmark, r.params, r.processes, r.threads): r for r in compare.rows(configs)}
        self.assertEqual((rows[("xmalloc", "", 1, 4)].missing, rows[("xmalloc", "", 1, 4)].against),
                         ("no mimalloc", None))

    def test_a_kv_row_of_two_processes_is_judged_on_throughput_and_summed_peak_pss(self):
        # MC-12 at P=2 T=2 (one thread each): 5.0 M ops/s over mimalloc's 4 M at P=1 T=2; peak
        # PSS (100 + 110 MB) * 1.1 summed over the two processes over mimalloc's 180 MB * 1.1.
        extra = []
        for repeat, per_process in enumerate([[2.5e6, 2.5e6], [2.4e6, 2.6e6]]):
            extra += make_fixture.lines_of_run("memcached", {"cluster": "MC-12"}, "cxlalloc", {}, 2, 2,
                                               repeat, per_process, total=[100_000_000, 110_000_000])
        with tempfile.TemporaryDirectory() as d:
            _, runs, configs = load.load([write_records(d, fixture_records() + extra)])
        rows = {(r.benchmark, r.params, r.processes, r.threads): r for r in compare.rows(configs)}
        row = rows[("memcached", "cluster=MC-12", 2, 2)]
        self.assertEqual(row.against, (1, 2))
        self.assertAlmostEqual(row.throughput.value, 5.0 / 4.0, places=9)
        self.assertAlmostEqual(row.pss.value, 210 / 180, places=2)
        self.assertEqual((row.throughput.met, row.pss.met, row.met), (True, False, False))

    def test_a_configuration_mimalloc_lacks_keeps_its_row(self):
        records = [r for r in fixture_records() if r["allocator"] == "cxlalloc" or r["threads"] != 4]
        with tempfile.TemporaryDirectory() as d:
            _, runs, configs = load.load([write_records(d, records)])
        rows = {(r.benchmark, r.params, r.threads): r for r in compare.rows(configs)}
        row = rows[("xmalloc", "", 4)]
        self.assertEqual(row.missing, "no mimalloc")
        self.assertIsNone(row.throughput.value)
        self.assertIsNone(row.met)

    def test_a_configuration_cxlalloc_lacks_keeps_its_row(self):
        records = [r for r in fixture_records() if r["allocator"] == "mimalloc" or r["threads"] != 4]
        with tempfile.TemporaryDirectory() as d:
            _, runs, configs = load.load([write_records(d, records)])
        rows = {(r.benchmark, r.params, r.threads): r for r in compare.rows(configs)}
        row = rows[("xmalloc", "", 4)]
        self.assertEqual(row.missing, "no cxlalloc")
        self.assertIsNone(row.throughput.value)
        self.assertEqual(row.throughput.target, 1.0)


HUGE_ROOT = {"run_root": "/tmp/cxlbench-huge.1", "mount_point": "/tmp/cxlbench-huge.1", "fs": "tmpfs",
             "huge": "within_size", "huge_pages": True, "requested": True, "fallback": ""}


class RunRoots(unittest.TestCase):
    """Rows per run root (the record's `backing`, docs/design.md §12.1) and the huge-block rows."""

    def test_a_record_without_backing_and_a_fallback_are_labelled(self):
        self.assertEqual(load.backing_label({}), "-")
        self.assertEqual(load.backing_label(HUGE_ROOT), "huge=within_size")
        self.assertEqual(load.backing_label({"requested": True, "huge": "never", "fallback": "mount: EPERM"}),
                         "no huge pages (fallback)")

    def test_cxlalloc_on_each_run_root_is_its_own_row_against_the_same_mimalloc_row(self):
        records = fixture_records() + variant(
            fixture_records(),
            lambda r: r["benchmark"] == "threadtest" and r["allocator"] == "cxlalloc"
            and not r["allocator_settings"] and r["params"] == {"size": 8} and r["processes"] == 1
            and r["threads"] == 2,
            "hugeroot", backing=HUGE_ROOT, throughput=180 * M)
        rows = compare.rows(configs_of(records))
        mine = {r.backing: r for r in rows if (r.benchmark, r.params, r.processes, r.threads)
                == ("threadtest", "size=8", 1, 2)}
        self.assertEqual(set(mine), {"-", "huge=within_size"})
        self.assertAlmostEqual(mine["-"].throughput.value, 0.80, places=12)
        self.assertAlmostEqual(mine["huge=within_size"].throughput.value, 1.50, places=12)
        out = compare.render_rows(rows)
        self.assertTrue(any(line.rstrip().endswith("huge=within_size") and "150.0 %" in line
                            for line in out.splitlines()), out)

    def huge(self):
        records = fixture_records()
        out = variant(records, plain_xmalloc("cxlalloc", threads=2), "huge", benchmark="huge",
                      params={"mode": "xmalloc", "size_mib": 16})
        out += variant(records, plain_xmalloc("cxlalloc", threads=2), "huge-root", benchmark="huge",
                       params={"mode": "xmalloc", "size_mib": 16}, backing=HUGE_ROOT, throughput=90 * M)
        out += variant(records, plain_xmalloc("mimalloc", threads=2), "huge-mi", benchmark="huge",
                       params={"mode": "xmalloc", "size_mib": 16})
        out += variant(records, plain_xmalloc("mimalloc", threads=2), "huge-je", benchmark="huge",
                       params={"mode": "xmalloc", "size_mib": 16}, allocator="jemalloc",
                       allocator_label="jemalloc", throughput=75 * M)
        out += variant(records, lambda r: plain_xmalloc("cxlalloc", threads=2)(r) and r["processes"] == 2,
                       "huge-boost", benchmark="huge", params={"mode": "xmalloc", "size_mib": 16},
                       allocator="boost", allocator_label="boost", throughput=10 * M)
        return {(r.processes, r.backing): r for r in compare.huge_rows(configs_of(out))}

    def test_at_one_process_cxlalloc_on_any_root_is_held_to_the_best_process_local_allocator(self):
        rows = self.huge()
        # jemalloc (75 M) beats mimalloc (median 50 M); cxlalloc: 60 M on /dev/shm, 90 M on the huge root.
        self.assertEqual(rows[(1, "-")].reference, "jemalloc")
        self.assertAlmostEqual(rows[(1, "-")].throughput.value, 0.80, places=12)
        self.assertFalse(rows[(1, "-")].throughput.met)
        self.assertEqual(rows[(1, "huge=within_size")].reference, "jemalloc")
        self.assertAlmostEqual(rows[(1, "huge=within_size")].throughput.value, 1.20, places=12)
        self.assertTrue(rows[(1, "huge=within_size")].throughput.met)

    def test_at_two_processes_cxlalloc_is_held_to_boost_on_the_same_root_only(self):
        rows = self.huge()
        # cxlalloc 20+22 / 21+23 M (median 43 M) against Boost 10+10 M on /dev/shm.
        self.assertEqual(rows[(2, "-")].reference, "boost")
        self.assertAlmostEqual(rows[(2, "-")].throughput.value, 43 / 20, places=12)
        self.assertIsNone(rows[(2, "huge=within_size")].throughput.value)
        self.assertEqual(rows[(2, "huge=within_size")].reference, "no Boost on this root")

    def test_the_headline_prints_the_huge_rows_with_their_root(self):
        records = fixture_records() + variant(
            fixture_records(), plain_xmalloc("cxlalloc", threads=2), "huge-root", benchmark="huge",
            params={"mode": "xmalloc", "size_mib": 16}, backing=HUGE_ROOT)
        with tempfile.TemporaryDirectory() as d:
            path = write_records(d, records)
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                self.assertEqual(main(["compare", str(path)]), 0)
            text = out.getvalue()
            self.assertIn("huge blocks (docs/design.md §15)", text)
            line = next(ln for ln in text.splitlines() if ln.startswith("mode=xmalloc size_mib=16  1"))
            self.assertIn("huge=within_size", line)
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                self.assertEqual(main(["compare", "--json", str(path)]), 0)
            huge = json.loads(out.getvalue())["huge"]
            self.assertEqual({(h["processes"], h["backing"]) for h in huge}, {(1, "huge=within_size"), (2, "huge=within_size")})


class Figures(unittest.TestCase):
    def write(self, records):
        with tempfile.TemporaryDirectory() as d:
            lines, _, configs = load.load([write_records(d, records)])
            written, skipped = figures.write_all(lines, configs, Path(d) / "out")
            names = sorted(p.name for p in written)
            for p in written:
                self.assertGreater(p.stat().st_size, 1000, p)
        return names, skipped

    def test_the_fixture_gives_every_figure_but_huge(self):
        names, skipped = self.write(fixture_records())
        expected = sorted(f"{fig}.{ext}" for fig in ("fig7-recovery", "fig8-kv", "fig9-micro", "fig12-coherence")
                          for ext in ("png", "pdf"))
        self.assertEqual(names, expected)
        self.assertEqual(list(skipped), ["fig10-huge"])

    def test_huge_runs_give_figure_10(self):
        huge = []
        for r in fixture_records():
            if r["benchmark"] == "xmalloc" and r["allocator"] == "cxlalloc" and not r["allocator_settings"]:
                r = {**r, "benchmark": "huge", "params": {"mode": "xmalloc"},
                     "config_id": "huge-" + r["config_id"], "run_id": "huge-" + r["run_id"]}
                huge.append(r)
        names, skipped = self.write(huge)
        self.assertEqual(names, ["fig10-huge.pdf", "fig10-huge.png"])
        self.assertEqual(set(skipped), {"fig7-recovery", "fig8-kv", "fig9-micro", "fig12-coherence"})

    def test_missing_data_skips_the_figure_and_says_why(self):
        records = [r for r in fixture_records() if r["allocator"] == "mimalloc"]
        names, skipped = self.write(records)
        self.assertEqual(names, ["fig8-kv.pdf", "fig8-kv.png", "fig9-micro.pdf", "fig9-micro.png"])
        self.assertIn("crash", skipped["fig7-recovery"])
        self.assertIn("huge", skipped["fig10-huge"])
        self.assertIn("cxlalloc", skipped["fig12-coherence"])

    def test_a_malformed_timeline_names_its_line(self):
        records = fixture_records()
        crash = next(i for i, r in enumerate(records) if r["benchmark"] == "crash")
        records[crash]["extra"]["timeline"] = [[0.0, 1.0, 2.0]]
        with self.assertRaisesRegex(load.LoadError, rf":{crash + 1}: extra.timeline"):
            self.write(records)


def variant(records, keep, tag, **changes):
    """Copies of the records for which `keep(record)` holds, with `changes` applied and their run
    and config ids prefixed by `tag`, so that they form runs of their own."""
    out = []
    for r in records:
        if keep(r):
            r = json.loads(json.dumps(r))
            r.update(changes)
            r["config_id"] = f"{tag}-{r['config_id']}"
            r["run_id"] = f"{tag}-{r['run_id']}"
            out.append(r)
    return out


def plain_xmalloc(allocator, threads=None):
    return lambda r: (r["benchmark"] == "xmalloc" and r["allocator"] == allocator and not r["allocator_settings"]
                      and threads in (None, r["threads"]))


def huge_records(size_mib=16, allocators=("cxlalloc", "boost")):
    """Figure 10's data: the fixture's plain xmalloc runs at T=2 as huge runs of `size_mib` MiB objects
    (None: the parameter left out), for cxlalloc and the other allocators named, which are made
    from mimalloc's runs (boost sorts before cxlalloc, as in the mini job)."""
    params = {"mode": "xmalloc"} if size_mib is None else {"mode": "xmalloc", "size_mib": size_mib}
    records = fixture_records()
    out = variant(records, plain_xmalloc("cxlalloc", threads=2), "huge", benchmark="huge", params=params)
    for name in allocators:
        if name != "cxlalloc":
            out += variant(records, plain_xmalloc("mimalloc", threads=2), f"huge-{name}", benchmark="huge",
                           params=params, allocator=name, allocator_label=name)
    return out


def micro_records_with_long_parameters():
    """Eight micro panels, three a row, with parameter lists as long as the mini job's."""
    records = fixture_records()
    out = [r for r in records if r["benchmark"] == "xmalloc"]
    for size in (8, 64, 256, 1024):
        out += variant(records, lambda r: r["benchmark"] == "threadtest" and r["params"].get("size") == 8,
                       f"tt{size}", params={"size": size, "total_pairs": 400_000})
    out += variant(records, lambda r: r["benchmark"] == "xmalloc", "larson", benchmark="larson",
                   params={"slots": 500, "ops": 200_000, "rounds": 4})
    out += variant(records, lambda r: r["benchmark"] == "xmalloc", "mstress", benchmark="mstress",
                   params={"iterations": 50, "objects_per_iter": 200, "transfer_slots": 256})
    out += variant(records, lambda r: r["benchmark"] == "xmalloc", "mstress2", benchmark="mstress",
                   params={"iterations": 500, "objects_per_iter": 2000, "transfer_slots": 256})
    return out


def configs_of(records):
    with tempfile.TemporaryDirectory() as d:
        return load.load([write_records(d, records)])[2]


def line_colors(fig):
    """Series label -> colour (hex) of every line drawn in `fig`'s panels."""
    return {line.get_label(): matplotlib.colors.to_hex(line.get_color())
            for ax in fig.axes for line in ax.get_lines() if not line.get_label().startswith("_")}


def bar_colors(fig):
    """Series label -> colour (hex) of every labelled bar series in `fig`'s panels."""
    return {c.get_label(): matplotlib.colors.to_hex(c.patches[0].get_facecolor())
            for ax in fig.axes for c in ax.containers if not c.get_label().startswith("_")}


def panels(fig):
    return [ax for ax in fig.axes if ax.get_visible()]


def title(ax):
    """A panel's title on one line (long ones are wrapped)."""
    return " ".join(ax.get_title().split())


class FigureStyle(unittest.TestCase):
    """What every figure shares: colours, count axes, log-scale labels, titles from the data."""

    def tearDown(self):
        plt.close("all")

    def test_an_allocator_has_the_same_colour_in_figures_8_9_and_10(self):
        configs = configs_of(fixture_records() + huge_records())
        fig8 = bar_colors(figures.fig8_kv(configs))
        fig9 = line_colors(figures.fig9_micro(configs))
        fig10 = line_colors(figures.fig10_huge(configs))
        self.assertEqual({fig8["cxlalloc"], fig9["cxlalloc"], fig10["cxlalloc"]}, {fig8["cxlalloc"]})
        self.assertEqual(fig8["mimalloc"], fig9["mimalloc"])
        self.assertNotEqual(fig10["boost"], fig10["cxlalloc"])

    def test_the_palette_gives_each_label_its_own_colour(self):
        configs = configs_of(fixture_records() + huge_records())
        colors = figures.palette(configs)
        self.assertEqual(set(colors), set(configs["allocator_label"]))
        self.assertEqual(len(set(colors.values())), len(colors))
        self.assertEqual(colors["cxlalloc"], figures.ALLOCATOR_COLORS["cxlalloc"])
        self.assertEqual(colors["boost"], figures.ALLOCATOR_COLORS["boost"])

    def test_a_multi_process_series_keeps_its_allocators_colour(self):
        configs = configs_of(fixture_records())
        fig9 = line_colors(figures.fig9_micro(configs))
        self.assertEqual(fig9["cxlalloc (multi-process)"], fig9["cxlalloc"])
        fig8 = bar_colors(figures.fig8_kv(configs))
        self.assertEqual(fig8["cxlalloc (multi-process)"], fig8["cxlalloc"])

    def test_figure_10_names_the_object_size_of_its_runs(self):
        fig = figures.fig10_huge(configs_of(huge_records(size_mib=16)))
        titles = [fig.get_suptitle()] + [ax.get_title() for ax in panels(fig)]
        self.assertTrue(all("16 MiB" in t for t in titles), titles)
        self.assertFalse(any("GiB" in t for t in titles), titles)

    def test_figure_10_without_a_size_parameter_says_the_harness_default_of_1_gib(self):
        fig = figures.fig10_huge(configs_of(huge_records(size_mib=None)))
        self.assertIn("1 GiB", fig.get_suptitle())

    def test_the_thread_axis_has_a_tick_at_each_thread_count_of_the_data_and_nowhere_else(self):
        # The fixture's threadtest size=8 runs have T=2 and T=4; size=64 and larson only T=2.
        fig = figures.fig9_micro(configs_of(fixture_records()))
        ticks = {title(ax): (list(ax.get_xticks()), [t.get_text() for t in ax.get_xticklabels()])
                 for ax in panels(fig)}
        self.assertEqual(ticks["threadtest size=8"], ([2, 4], ["2", "4"]))
        self.assertEqual(ticks["threadtest size=64"], ([2], ["2"]))

    def test_the_process_axis_of_figure_10_has_a_tick_at_each_process_count(self):
        fig = figures.fig10_huge(configs_of(huge_records()))
        for ax in panels(fig):
            self.assertEqual(list(ax.get_xticks()), [1, 2])
            self.assertEqual([t.get_text() for t in ax.get_xticklabels()], ["1", "2"])

    def test_a_log_scale_panel_says_log_in_its_axis_label(self):
        # A boost 100x slower than cxlalloc on xmalloc: that panel goes log, threadtest stays linear.
        records = fixture_records() + variant(
            fixture_records(), plain_xmalloc("mimalloc"), "slow", allocator="boost", allocator_label="boost",
            throughput=0.4e6)
        fig = figures.fig9_micro(configs_of(records))
        scales = {title(ax): (ax.get_yscale(), ax.get_ylabel()) for ax in panels(fig)}
        self.assertEqual(scales["xmalloc"], ("log", "throughput (Mops/s) (log)"))
        self.assertEqual(scales["threadtest size=8"], ("linear", "throughput (Mops/s)"))

    def test_panel_titles_do_not_overlap(self):
        fig = figures.fig9_micro(configs_of(micro_records_with_long_parameters()))
        fig.canvas.draw()
        boxes = [(ax.get_title(), ax.title.get_window_extent()) for ax in panels(fig)]
        self.assertGreaterEqual(len(boxes), 7)
        for i, (a, box_a) in enumerate(boxes):
            for b, box_b in boxes[i + 1:]:
                self.assertFalse(box_a.overlaps(box_b), f"{a!r} overlaps {b!r}")


class Coherence(unittest.TestCase):
    """Figure 12's numbers: each model over full HWcc, and each model's HWcc memory."""

    @classmethod
    def setUpClass(cls):
        _, _, cls.configs = load.load([FIXTURE])
        cls.ratio, cls.hwcc = figures.coherence_tables(cls.configs)

    def test_each_model_is_normalized_to_full_at_the_same_point(self):
        self.assertEqual(list(self.ratio.columns), ["full", "limited", "none"])
        tt = self.ratio.loc[("threadtest", "size=8", 1, 2)]
        self.assertAlmostEqual(tt["full"], 1.0)
        self.assertAlmostEqual(tt["limited"], 0.95)
        self.assertAlmostEqual(tt["none"], 0.90)
        xm = self.ratio.loc[("xmalloc", "", 1, 2)]
        self.assertAlmostEqual(xm["limited"], 0.50)
        self.assertAlmostEqual(xm["none"], 0.25)

    def test_only_points_with_full_and_another_model_are_kept_in_figure_9_order(self):
        self.assertEqual(list(self.ratio.index), [("threadtest", "size=8", 1, 2), ("xmalloc", "", 1, 2)])

    def test_hwcc_memory_is_reported_per_model(self):
        self.assertEqual(list(self.hwcc.loc[("threadtest", "size=8", 1, 2)]), [4096, 4096, 12288])
        self.assertEqual(list(self.hwcc.loc[("xmalloc", "", 1, 2)]), [8192, 8192, 16384])

    def test_the_figure_has_a_memory_row_only_when_runs_recorded_hwcc_memory(self):
        fig = figures.fig12_coherence(self.configs)
        self.assertEqual([ax.get_ylabel() for ax in fig.axes if ax.get_visible()],
                         ["throughput / full HWcc"] * 2 + ["HWcc PSS at end (KiB)"] * 2)
        no_memory = self.configs.assign(hwcc_bytes=0)
        fig = figures.fig12_coherence(no_memory)
        self.assertEqual([ax.get_ylabel() for ax in fig.axes], ["throughput / full HWcc"] * 2)

    def test_without_a_reduced_model_there_is_nothing_to_draw(self):
        full_only = self.configs[self.configs["coherence"].isin(["full", None])]
        self.assertIn("other than full", figures.coherence_tables(full_only))


class Table(unittest.TestCase):
    def test_one_row_per_configuration_with_medians(self):
        _, _, configs = load.load([FIXTURE])
        text = table.render(configs)
        lines = text.splitlines()
        self.assertEqual(len(lines), 2 + len(configs))
        cells = [r for r in table.rows(configs) if r[:5] == ["threadtest", "size=8", "mimalloc", "1", "2"]]
        self.assertEqual(len(cells), 1)
        self.assertEqual(cells[0][5:], ["120.000", "64.0", "0.000 %", "3", "-"])  # Mops/s PSS HWcc repeats root
        self.assertIn("threadtest  size=8 ", text)


if __name__ == "__main__":
    unittest.main()
