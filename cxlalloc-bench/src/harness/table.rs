//! The results table: one row per configuration, medians over repeats, each allocator's
//! throughput also as a ratio to mimalloc in the same configuration.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::record::Record;
use super::workload::scalar_text;

/// One configuration's aggregated result.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Benchmark and parameters.
    pub what: String,
    /// Allocator label.
    pub allocator: String,
    /// Processes.
    pub processes: usize,
    /// Threads.
    pub threads: usize,
    /// The run root's pages ([`super::backing::Backing::label`]): `huge=within_size`, a
    /// fallback note, or `-` on an ordinary root.
    pub root: String,
    /// Median over repeats of the run throughput (Σ over processes), operations per second.
    pub throughput: f64,
    /// Median over repeats of the run's end-of-run PSS (Σ over processes), bytes.
    pub pss_bytes: f64,
    /// Median HWcc share of that PSS.
    pub hwcc_share: f64,
    /// Complete runs aggregated.
    pub runs: usize,
}

/// Aggregates records into rows (first-seen configuration order); a run counts once all its
/// processes' lines are present.
pub fn rows(records: &[Record]) -> Vec<Row> {
    let mut runs: BTreeMap<&str, Vec<&Record>> = BTreeMap::new();
    for r in records {
        runs.entry(r.run_id.as_str()).or_default().push(r);
    }
    let mut order: Vec<&str> = Vec::new();
    let mut by_config: BTreeMap<&str, Vec<(f64, f64, f64)>> = BTreeMap::new();
    let mut first: BTreeMap<&str, &Record> = BTreeMap::new();
    for r in records {
        if !first.contains_key(r.config_id.as_str()) {
            first.insert(&r.config_id, r);
            order.push(&r.config_id);
        }
    }
    for lines in runs.values() {
        let head = lines[0];
        if lines.len() != head.processes {
            continue;
        }
        let throughput = lines.iter().map(|l| l.throughput).sum();
        let pss: u64 = lines.iter().map(|l| l.memory.end.total_bytes).sum();
        let hwcc: u64 = lines.iter().map(|l| l.memory.end.hwcc_bytes).sum();
        let share = if pss == 0 { 0.0 } else { hwcc as f64 / pss as f64 };
        by_config.entry(&head.config_id).or_default().push((throughput, pss as f64, share));
    }
    order
        .into_iter()
        .filter_map(|id| {
            let runs = by_config.get(id)?;
            let r = first[id];
            let params: Vec<String> = r.params.iter().map(|(k, v)| format!("{k}={}", scalar_text(v))).collect();
            Some(Row {
                what: format!("{} {}", r.benchmark, params.join(" ")).trim().to_owned(),
                allocator: r.allocator_label.clone(),
                processes: r.processes,
                threads: r.threads,
                root: r.backing.label(),
                throughput: median(runs.iter().map(|x| x.0)),
                pss_bytes: median(runs.iter().map(|x| x.1)),
                hwcc_share: median(runs.iter().map(|x| x.2)),
                runs: runs.len(),
            })
        })
        .collect()
}

fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.collect();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The table as text.
pub fn render(rows: &[Row]) -> String {
    let mimalloc: BTreeMap<(&str, usize, usize), f64> = rows
        .iter()
        .filter(|r| r.allocator == "mimalloc")
        .map(|r| ((r.what.as_str(), r.processes, r.threads), r.throughput))
        .collect();
    let what_width = rows.iter().map(|r| r.what.len()).max().unwrap_or(9).max(9);
    let alloc_width = rows.iter().map(|r| r.allocator.len()).max().unwrap_or(9).max(9);
    let root_width = rows.iter().map(|r| r.root.len()).max().unwrap_or(4).max(4);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<what_width$}  {:<alloc_width$}  {:>2} {:>3}  {:<root_width$}  {:>10}  {:>11}  {:>10}  {:>8}  {:>4}",
        "benchmark", "allocator", "P", "T", "root", "ops/s", "/ mimalloc", "PSS MiB", "HWcc %", "runs"
    );
    for r in rows {
        let ratio = mimalloc
            .get(&(r.what.as_str(), r.processes, r.threads))
            .filter(|&&m| m > 0.0)
            .map_or("-".to_owned(), |m| format!("{:.2}x", r.throughput / m));
        let _ = writeln!(
            out,
            "{:<what_width$}  {:<alloc_width$}  {:>2} {:>3}  {:<root_width$}  {:>10}  {:>11}  {:>10.1}  {:>8.4}  {:>4}",
            r.what,
            r.allocator,
            r.processes,
            r.threads,
            r.root,
            rate(r.throughput),
            ratio,
            r.pss_bytes / (1 << 20) as f64,
            r.hwcc_share * 100.0,
            r.runs
        );
    }
    out
}

/// A rate with an SI prefix and four significant digits: `183.5 M`, `12.06 k`, `9.512`.
pub fn rate(x: f64) -> String {
    let (v, unit) = if x >= 1e9 {
        (x / 1e9, " G")
    } else if x >= 1e6 {
        (x / 1e6, " M")
    } else if x >= 1e3 {
        (x / 1e3, " k")
    } else {
        (x, "")
    };
    let decimals = if v >= 100.0 {
        1
    } else if v >= 10.0 {
        2
    } else {
        3
    };
    format!("{v:.decimals$}{unit}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::record::{Memory, Pss, Rusage};
    use serde_json::Value;

    fn line(run: &str, config: &str, alloc: &str, process: usize, processes: usize, throughput: f64) -> Record {
        let end = Pss { hwcc_bytes: 10, swcc_bytes: 500, other_bytes: 490, total_bytes: 1000, ..Pss::default() };
        Record {
            schema: 1,
            run_id: run.into(),
            date: String::new(),
            workload: "t".into(),
            config_id: config.into(),
            repeat: 0,
            benchmark: "threadtest".into(),
            params: [("size".to_owned(), Value::from(8))].into_iter().collect(),
            allocator: alloc.into(),
            allocator_settings: Default::default(),
            allocator_label: alloc.into(),
            processes,
            threads: processes,
            process,
            seed: 1,
            per_thread: Vec::new(),
            ops: 0,
            throughput,
            allocated: 0,
            freed: 0,
            verified: 0,
            extra: Default::default(),
            memory: Memory { end, peak: end, samples: 1, ..Memory::default() },
            rusage: Rusage::default(),
            allocator_stats: Value::Null,
            heap_check: Value::Null,
            trace: Value::Null,
            host: Value::Null,
            backing: Default::default(),
        }
    }

    #[test]
    fn processes_sum_and_repeats_take_the_median() {
        let records = vec![
            line("a", "c1", "cxlalloc", 0, 2, 1e6),
            line("a", "c1", "cxlalloc", 1, 2, 2e6),
            line("b", "c1", "cxlalloc", 0, 2, 5e6),
            line("b", "c1", "cxlalloc", 1, 2, 5e6),
            line("c", "c1", "cxlalloc", 0, 2, 4e6),
            line("c", "c1", "cxlalloc", 1, 2, 0.0),
        ];
        let rows = rows(&records);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].throughput, 4e6);
        assert_eq!(rows[0].pss_bytes, 2000.0);
        assert!((rows[0].hwcc_share - 0.01).abs() < 1e-12);
        assert_eq!(rows[0].runs, 3);
    }

    #[test]
    fn rates_keep_four_significant_digits_whatever_their_size() {
        assert_eq!(rate(183_456_000.0), "183.5 M");
        assert_eq!(rate(12_060.0), "12.06 k");
        assert_eq!(rate(9.5123), "9.512");
    }

    #[test]
    fn incomplete_runs_are_left_out() {
        let rows = rows(&[line("a", "c1", "cxlalloc", 0, 2, 1e6)]);
        assert!(rows.is_empty());
    }

    #[test]
    fn the_table_shows_ratios_to_mimalloc() {
        let records = vec![line("a", "c1", "cxlalloc", 0, 1, 3e6), line("b", "c2", "mimalloc", 0, 1, 2e6)];
        let text = render(&rows(&records));
        assert!(text.contains("1.50x"), "{text}");
    }

    #[test]
    fn a_row_on_huge_pages_names_its_mount_and_is_still_compared_with_mimalloc() {
        let mut huge = line("a", "c1", "cxlalloc", 0, 1, 3e6);
        huge.backing.huge_pages = true;
        huge.backing.huge = "within_size".into();
        let mut asked = line("c", "c3", "cxlalloc", 0, 1, 1e6);
        asked.backing.requested = true;
        let text = render(&rows(&[huge, line("b", "c2", "mimalloc", 0, 1, 2e6), asked]));
        let row = text.lines().find(|l| l.contains("huge=within_size")).unwrap_or_else(|| panic!("{text}"));
        assert!(row.contains("1.50x"), "{text}");
        assert!(text.lines().any(|l| l.contains("no huge pages (fallback)") && l.contains("0.50x")), "{text}");
    }
}
