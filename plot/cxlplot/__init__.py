"""cxlplot: figures, headline ratios and tables from cxlalloc-bench's NDJSON (docs/design.md §12.4).

Modules, each usable on its own:

- `load`    — NDJSON lines -> DataFrames of lines, runs (summed over processes) and configs
              (medians over repeats);
- `compare` — the headline of docs/design.md §15: every configuration's ratios, then the
              geometric means, each next to its target;
- `table`   — a plain-text table with one row per configuration;
- `figures` — Figures 7, 8, 9, 10 and 12 as PNG and PDF;
- `vcd`      — a reader for Value Change Dump files from the RTL simulations in fpga/;
- `waveform` — timing diagrams (like the paper's Figure 6) of chosen signals of a VCD dump.

The command line is `python -m cxlplot {figures,compare,table,vcd} ...` (see `__main__`).
"""
