"""Tests of cxlplot's VCD reader and timing diagrams against the hand-written fixture.vcd.

Run from the repository root:  .venv/bin/python -m unittest discover -s plot/tests
"""

import contextlib
import io
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import matplotlib  # noqa: E402

matplotlib.use("Agg")

from cxlplot import vcd, waveform  # noqa: E402
from cxlplot.__main__ import main  # noqa: E402

FIXTURE = HERE / "fixture.vcd"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class Reading(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dump = vcd.load(FIXTURE)

    def test_timescale_with_number_and_unit_apart(self):
        self.assertAlmostEqual(self.dump.timescale, 10e-12)

    def test_names_follow_the_scopes(self):
        self.assertEqual(sorted(self.dump.signals), [
            "tb.clk", "tb.data", "tb.dut.bus[2]", "tb.dut.ready", "tb.dut.state", "tb.dut.valid",
            "tb.valid"])

    def test_widths_come_from_the_declarations(self):
        self.assertEqual(self.dump.signals["tb.data"].width, 8)
        self.assertEqual(self.dump.signals["tb.clk"].width, 1)

    def test_scalar_changes(self):
        clk = self.dump.signals["tb.clk"]
        self.assertEqual(clk.times, [0, 500, 1000, 1500, 2000])
        self.assertEqual(clk.values, ["0", "1", "0", "1", "0"])

    def test_vector_values_keep_their_digits(self):
        data = self.dump.signals["tb.data"]
        self.assertEqual(data.values, ["xxxxxxxx", "101010", "11111111"])
        self.assertEqual(data.value_at(499), "xxxxxxxx")
        self.assertEqual(data.value_at(500), "101010")
        self.assertEqual(data.value_at(10**6), "11111111")

    def test_value_before_the_first_change_is_unknown(self):
        self.assertEqual(self.dump.signals["tb.clk"].value_at(-1), "x")

    def test_one_identifier_feeds_every_variable_declared_with_it(self):
        self.assertEqual(self.dump.signals["tb.valid"].values, ["0", "1", "0"])
        self.assertEqual(self.dump.signals["tb.dut.valid"].values, ["0", "1", "0"])

    def test_a_repeated_timestamp_continues_the_same_step(self):
        ready = self.dump.signals["tb.dut.ready"]
        self.assertEqual(list(zip(ready.times, ready.values)), [(0, "z"), (500, "1"), (1500, "0")])

    def test_end_time_is_the_last_timestamp(self):
        self.assertEqual(self.dump.end_time, 2000)

    def test_find_by_unique_suffix(self):
        self.assertIs(self.dump.find("ready"), self.dump.signals["tb.dut.ready"])
        self.assertIs(self.dump.find("dut.valid"), self.dump.signals["tb.dut.valid"])
        self.assertIs(self.dump.find("tb.valid"), self.dump.signals["tb.valid"])

    def test_find_refuses_an_ambiguous_suffix(self):
        with self.assertRaisesRegex(vcd.VcdError, "ambiguous: tb.dut.valid, tb.valid"):
            self.dump.find("valid")

    def test_find_refuses_an_unknown_name(self):
        with self.assertRaisesRegex(vcd.VcdError, "no signal named 'nope'"):
            self.dump.find("nope")


class Malformed(unittest.TestCase):
    HEADER = "$timescale 1ns $end $scope module t $end $var wire 1 ! a $end $upscope $end\n"

    def parse(self, text):
        return vcd.parse(text, "bad.vcd")

    def test_change_of_an_undeclared_identifier_names_the_line(self):
        with self.assertRaisesRegex(vcd.VcdError, r"bad.vcd:4: change of undeclared identifier '\?'"):
            self.parse(self.HEADER + "$enddefinitions $end\n#0 0!\n1?\n")

    def test_missing_enddefinitions(self):
        with self.assertRaisesRegex(vcd.VcdError, "no \\$enddefinitions"):
            self.parse(self.HEADER)

    def test_unterminated_section(self):
        with self.assertRaisesRegex(vcd.VcdError, "missing \\$end"):
            self.parse("$timescale 1ns\n")

    def test_bad_timescale(self):
        with self.assertRaisesRegex(vcd.VcdError, "bad \\$timescale '3 ns'"):
            self.parse("$timescale 3 ns $end\n")

    def test_bad_timestamp(self):
        with self.assertRaisesRegex(vcd.VcdError, "bad timestamp '#1x'"):
            self.parse(self.HEADER + "$enddefinitions $end\n#1x\n")

    def test_vector_value_cut_off_at_the_end(self):
        with self.assertRaisesRegex(vcd.VcdError, "value without an identifier"):
            self.parse(self.HEADER + "$enddefinitions $end\n#0 b101\n")

    def test_without_a_timescale_times_stay_in_dump_units(self):
        dump = self.parse("$var wire 1 ! a $end $enddefinitions $end #3 1!\n")
        self.assertIsNone(dump.timescale)
        self.assertEqual(dump.signals["a"].times, [3])


class Drawing(unittest.TestCase):
    def test_bus_text_is_hex_or_unknown(self):
        self.assertEqual(waveform.bus_text("101010"), "2a")
        self.assertEqual(waveform.bus_text("1x0"), "x")
        self.assertEqual(waveform.bus_text("zz"), "z")
        self.assertEqual(waveform.bus_text("1.5"), "1.5")

    def test_one_row_per_signal_in_the_given_order(self):
        fig = waveform.draw(vcd.load(FIXTURE), ["clk", "data", "dut.valid", "state"], clock="clk")
        ax = fig.axes[0]
        labels = [t.get_text() for t in ax.get_yticklabels()]
        top_to_bottom = sorted(zip(ax.get_yticks(), labels), reverse=True)
        self.assertEqual([label for _, label in top_to_bottom], ["clk", "data", "dut.valid", "state"])
        # 2000 units of 10 ps span 20 ns.
        self.assertEqual(ax.get_xlabel(), "time (ns)")
        left, right = ax.get_xlim()
        self.assertAlmostEqual(left, 0.0)
        self.assertAlmostEqual(right, 20.0)
        bus_values = {t.get_text() for t in ax.texts}
        self.assertTrue({"2a", "ff"} <= bus_values, bus_values)

    def test_write_png(self):
        with tempfile.TemporaryDirectory() as d:
            out = waveform.write(vcd.load(FIXTURE), ["clk", "data"], Path(d) / "sub" / "w.png")
            self.assertEqual(out.read_bytes()[:8], PNG_MAGIC)

    def test_unknown_signal_draws_nothing(self):
        with self.assertRaisesRegex(vcd.VcdError, "no signal named 'nope'"):
            waveform.draw(vcd.load(FIXTURE), ["clk", "nope"])


class CommandLine(unittest.TestCase):
    def run_main(self, argv):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(argv)
        return status, out.getvalue(), err.getvalue()

    def test_vcd_writes_the_figure(self):
        with tempfile.TemporaryDirectory() as d:
            out = Path(d) / "fig.png"
            status, stdout, _ = self.run_main(
                ["vcd", str(FIXTURE), "--signals", "clk, data,ready", "--clock", "clk",
                 "--title", "fixture", "--out", str(out)])
            self.assertEqual(status, 0)
            self.assertEqual(stdout, f"wrote {out}\n")
            self.assertEqual(out.read_bytes()[:8], PNG_MAGIC)

    def test_vcd_ambiguous_signal_is_a_usage_error(self):
        with tempfile.TemporaryDirectory() as d:
            status, _, stderr = self.run_main(
                ["vcd", str(FIXTURE), "--signals", "valid", "--out", str(Path(d) / "f.png")])
        self.assertEqual(status, 2)
        self.assertIn("cxlplot: error: 'valid' is ambiguous", stderr)

    def test_vcd_missing_file_is_an_input_error(self):
        status, _, stderr = self.run_main(["vcd", "/nonexistent.vcd", "--signals", "a",
                                           "--out", "/tmp/x.png"])
        self.assertEqual(status, 2)
        self.assertIn("cxlplot: error:", stderr)


if __name__ == "__main__":
    unittest.main()
