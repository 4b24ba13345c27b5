//! Workload files: parsing and expansion into configurations.
//!
//! A workload file has a `[run]` table of defaults, one `[[benchmark]]` table per benchmark, and
//! optional `[[skip]]` tables:
//!
//! ```toml
//! [run]
//! repeats = 3                      # runs per configuration
//! processes = [1, 2]               # worker processes
//! threads = [1, 2]                 # threads over all processes
//! allocators = ["cxlalloc", "mimalloc", { name = "cxlalloc", settings = { backend = "anon" } }]
//! seed = 1
//! timeout_s = 300                  # per run; a run past it is killed and reported as failed
//! huge_pages = false               # true: the run root is a huge-page tmpfs (backing.rs)
//!
//! [[benchmark]]
//! name = "threadtest"
//! size = [8, 64, 1024]             # any list-valued parameter is an axis
//! total_pairs = 2_000_000
//! threads = [1, 2, 4]              # run keys may be overridden per benchmark
//!
//! [[skip]]                         # configurations matching every key are not run
//! benchmark = "threadtest"
//! allocator = "system"
//! size = 1024
//! ```
//!
//! Each benchmark table expands to the Cartesian product of its list-valued fields (parameters,
//! processes, threads, allocators), in file order, each configuration run `repeats` times.
//! Configurations an allocator cannot run (a process-local allocator with several processes),
//! with fewer threads than processes, or matching a `[[skip]]` table are skipped with a reason.
//!
//! `huge_pages = true` (or the axis `[false, true]`) runs a configuration with its run root on
//! a tmpfs mounted `huge=advise` (docs/design.md §12.1; [`super::backing`]); it applies to
//! allocators whose shared memory lives there (cxlalloc's heap, Boost's segment), and is
//! skipped for the others (process-local allocators take anonymous memory wherever they run).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::allocator::{self, Spec};
use crate::Error;

/// Keys of a `[[benchmark]]` table that are not benchmark parameters.
const RUN_KEYS: [&str; 7] = ["processes", "threads", "allocators", "repeats", "seed", "timeout_s", "huge_pages"];

/// One configuration: everything a run depends on except the repeat index.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// Benchmark name.
    pub benchmark: String,
    /// Benchmark parameters (scalars).
    pub params: BTreeMap<String, Value>,
    /// The allocator.
    pub allocator: Spec,
    /// Worker processes.
    pub processes: usize,
    /// Threads over all processes.
    pub threads: usize,
    /// Seed.
    pub seed: u64,
    /// Seconds a run may take before it is killed.
    pub timeout_s: u64,
    /// Run with the run root on a huge-page tmpfs (left out of the JSON when false, so that
    /// configurations from before the key keep their ids).
    #[serde(default, skip_serializing_if = "is_false")]
    pub huge_pages: bool,
}

fn is_false(b: &bool) -> bool {
    !b
}

impl Config {
    /// Stable id of this configuration (FNV-1a of its canonical JSON): the resume key.
    pub fn id(&self) -> String {
        let text = serde_json::to_string(self).unwrap_or_default();
        let hash =
            text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
        format!("{hash:016x}")
    }

    /// A one-line description: benchmark, parameters, allocator, shape.
    pub fn describe(&self) -> String {
        let params: Vec<String> = self.params.iter().map(|(k, v)| format!("{k}={}", scalar_text(v))).collect();
        format!(
            "{} {} | {} | P={} T={}{}",
            self.benchmark,
            params.join(" "),
            self.allocator.label(),
            self.processes,
            self.threads,
            if self.huge_pages { " | huge pages" } else { "" }
        )
    }
}

/// A value as a table cell: strings without quotes.
pub fn scalar_text(v: &Value) -> String {
    v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string())
}

/// A configuration the driver will not run, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Skipped {
    /// The configuration.
    pub config: Config,
    /// Why.
    pub reason: String,
}

/// A parsed and expanded workload.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    /// Configurations to run, in order.
    pub configs: Vec<Config>,
    /// Runs per configuration.
    pub repeats: u32,
    /// Configurations not run.
    pub skipped: Vec<Skipped>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    run: toml::Table,
    #[serde(default)]
    benchmark: Vec<toml::Table>,
    #[serde(default)]
    skip: Vec<toml::Table>,
    /// The demo program's table (`cxlalloc-bench/src/bin/demo.rs`), which the harness ignores.
    #[serde(default, rename = "demo")]
    _demo: Option<toml::Table>,
}

/// Reads and expands the workload file at `path`.
pub fn load(path: &Path) -> Result<Workload, Error> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    parse(&text).map_err(|e| format!("{}: {e}", path.display()).into())
}

/// Parses and expands workload text.
pub fn parse(text: &str) -> Result<Workload, Error> {
    let file: File = toml::from_str(text)?;
    if let Some(k) = file.run.keys().find(|k| !RUN_KEYS.contains(&k.as_str())) {
        return Err(format!("[run]: unknown key {k:?} (known: {})", RUN_KEYS.join(", ")).into());
    }
    let run = to_json(file.run)?;
    let repeats = match run.get("repeats") {
        None => 1,
        Some(v) => v.as_u64().filter(|&r| r >= 1).ok_or("[run] repeats must be a positive integer")? as u32,
    };
    if file.benchmark.is_empty() {
        return Err("no [[benchmark]] tables".into());
    }
    let skips: Vec<BTreeMap<String, Value>> = file.skip.into_iter().map(to_json).collect::<Result<_, _>>()?;
    let mut workload = Workload { configs: Vec::new(), repeats, skipped: Vec::new() };
    for (i, table) in file.benchmark.into_iter().enumerate() {
        let mut fields = run.clone();
        fields.remove("repeats");
        let table = to_json(table)?;
        if table.contains_key("repeats") {
            return Err(format!("[[benchmark]] #{}: repeats belongs in [run]", i + 1).into());
        }
        fields.extend(table);
        for config in expand(&fields).map_err(|e| format!("[[benchmark]] #{}: {e}", i + 1))? {
            match skip_reason(&config, &skips)? {
                Some(reason) => workload.skipped.push(Skipped { config, reason }),
                None => workload.configs.push(config),
            }
        }
    }
    Ok(workload)
}

fn to_json(table: toml::Table) -> Result<BTreeMap<String, Value>, Error> {
    match serde_json::to_value(table)? {
        Value::Object(map) => Ok(map.into_iter().collect()),
        _ => Err("expected a table".into()),
    }
}

/// The Cartesian product of one benchmark table's list-valued fields.
fn expand(fields: &BTreeMap<String, Value>) -> Result<Vec<Config>, Error> {
    let name = fields.get("name").and_then(Value::as_str).ok_or("missing name")?.to_owned();
    // Axes in a fixed order: allocators outermost so a table reads allocator by allocator,
    // then processes, threads and the parameters in name order.
    let mut axes: Vec<(String, Vec<Value>)> = Vec::new();
    let allocators = fields.get("allocators").ok_or("no allocators (set them in [run] or here)")?;
    axes.push(("allocators".into(), as_list(allocators)));
    for key in ["processes", "threads"] {
        axes.push((key.into(), as_list(fields.get(key).unwrap_or(&Value::from(1)))));
    }
    axes.push(("huge_pages".into(), as_list(fields.get("huge_pages").unwrap_or(&Value::from(false)))));
    for (k, v) in fields {
        if k != "name" && !RUN_KEYS.contains(&k.as_str()) {
            axes.push((k.clone(), as_list(v)));
        }
    }
    if let Some((k, _)) = axes.iter().find(|(_, values)| values.is_empty()) {
        return Err(format!("{k} is an empty list").into());
    }
    let seed = fields.get("seed").map_or(Some(1), Value::as_u64).ok_or("seed must be an unsigned integer")?;
    let timeout_s =
        fields.get("timeout_s").map_or(Some(600), Value::as_u64).ok_or("timeout_s must be an unsigned integer")?;
    let mut configs = Vec::new();
    let mut index = vec![0usize; axes.len()];
    loop {
        let mut config = Config {
            benchmark: name.clone(),
            params: BTreeMap::new(),
            allocator: Spec::default(),
            processes: 1,
            threads: 1,
            seed,
            timeout_s,
            huge_pages: false,
        };
        for ((key, values), &i) in axes.iter().zip(&index) {
            let v = &values[i];
            match key.as_str() {
                "allocators" => config.allocator = spec_of(v)?,
                "processes" => config.processes = positive(key, v)?,
                "threads" => config.threads = positive(key, v)?,
                "huge_pages" => {
                    config.huge_pages =
                        v.as_bool().ok_or_else(|| format!("huge_pages must be true or false, got {v}"))?
                }
                _ => {
                    config.params.insert(key.clone(), v.clone());
                }
            }
        }
        configs.push(config);
        // Odometer over the axes, last axis fastest.
        let mut axis = axes.len();
        loop {
            if axis == 0 {
                return Ok(configs);
            }
            axis -= 1;
            index[axis] += 1;
            if index[axis] < axes[axis].1.len() {
                break;
            }
            index[axis] = 0;
        }
    }
}

fn as_list(v: &Value) -> Vec<Value> {
    match v {
        Value::Array(items) => items.clone(),
        other => vec![other.clone()],
    }
}

fn positive(key: &str, v: &Value) -> Result<usize, Error> {
    v.as_u64()
        .filter(|&n| n >= 1)
        .map(|n| n as usize)
        .ok_or_else(|| format!("{key} must be positive integers, got {v}").into())
}

fn spec_of(v: &Value) -> Result<Spec, Error> {
    let spec = match v {
        Value::String(name) => Spec::named(name),
        Value::Object(_) => serde_json::from_value(v.clone()).map_err(|e| format!("allocator {v}: {e}"))?,
        other => return Err(format!("an allocator is a name or {{ name, settings }}, got {other}").into()),
    };
    spec.kind()?;
    Ok(spec)
}

/// Why `config` is not run, if it is not.
fn skip_reason(config: &Config, skips: &[BTreeMap<String, Value>]) -> Result<Option<String>, Error> {
    if let Some(reason) = allocator::unsupported(&config.allocator, config.processes)? {
        return Ok(Some(reason));
    }
    if config.huge_pages && !allocator::shares_run_root(&config.allocator)? {
        return Ok(Some(format!(
            "{}'s memory is not on the run root: huge_pages changes nothing for it",
            config.allocator.label()
        )));
    }
    if config.threads < config.processes {
        return Ok(Some(format!("{} threads cannot fill {} processes", config.threads, config.processes)));
    }
    for (i, rule) in skips.iter().enumerate() {
        if rule.is_empty() {
            return Err(format!("[[skip]] #{} is empty (it would skip everything)", i + 1).into());
        }
        if rule.iter().all(|(k, v)| matches(config, k, v)) {
            return Ok(Some(format!("[[skip]] #{}", i + 1)));
        }
    }
    Ok(None)
}

fn matches(config: &Config, key: &str, v: &Value) -> bool {
    match key {
        "benchmark" => v.as_str() == Some(config.benchmark.as_str()),
        "allocator" => v.as_str().is_some_and(|s| s == config.allocator.name || s == config.allocator.label()),
        "processes" => v.as_u64() == Some(config.processes as u64),
        "threads" => v.as_u64() == Some(config.threads as u64),
        "huge_pages" => v.as_bool() == Some(config.huge_pages),
        param => config.params.get(param) == Some(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
        [run]
        processes = [1, 2]
        threads = [1, 2]
        allocators = ["cxlalloc", "mimalloc"]
        repeats = 2
    "#;

    #[test]
    fn list_valued_fields_expand_to_their_cartesian_product() {
        let w = parse(&format!("{BASE}\n[[benchmark]]\nname = \"threadtest\"\nsize = [8, 64, 1024]\n")).unwrap();
        // 2 allocators × 2 processes × 2 threads × 3 sizes = 24, less skips.
        assert_eq!(w.configs.len() + w.skipped.len(), 24);
        assert_eq!(w.repeats, 2);
        let sizes: std::collections::BTreeSet<u64> =
            w.configs.iter().map(|c| c.params["size"].as_u64().unwrap()).collect();
        assert_eq!(sizes.into_iter().collect::<Vec<_>>(), [8, 64, 1024]);
    }

    #[test]
    fn process_local_allocators_and_too_few_threads_are_skipped_with_reasons() {
        let w = parse(&format!("{BASE}\n[[benchmark]]\nname = \"threadtest\"\n")).unwrap();
        // mimalloc at P=2 (2 configs) and cxlalloc P=2 T=1 (1 config) are skipped.
        assert_eq!(w.skipped.len(), 3, "{:?}", w.skipped);
        assert!(w.skipped.iter().any(|s| s.reason.contains("process-local")));
        assert!(w.skipped.iter().any(|s| s.reason.contains("cannot fill")));
        assert!(w.configs.iter().all(|c| c.threads >= c.processes));
    }

    #[test]
    fn skip_tables_remove_matching_configurations() {
        let text = format!(
            "{BASE}\n[[benchmark]]\nname = \"threadtest\"\nsize = [8, 64]\n[[skip]]\nallocator = \"mimalloc\"\nsize = 64\n"
        );
        let w = parse(&text).unwrap();
        assert!(!w.configs.iter().any(|c| c.allocator.name == "mimalloc" && c.params["size"] == 64));
        assert!(w.configs.iter().any(|c| c.allocator.name == "mimalloc" && c.params["size"] == 8));
        assert!(w.skipped.iter().any(|s| s.reason == "[[skip]] #1"));
    }

    #[test]
    fn benchmark_tables_override_run_defaults() {
        let w = parse(&format!("{BASE}\n[[benchmark]]\nname = \"xmalloc\"\nthreads = 4\nprocesses = 1\n")).unwrap();
        assert!(w.configs.iter().all(|c| c.threads == 4 && c.processes == 1));
    }

    #[test]
    fn allocator_settings_are_kept_and_labelled() {
        let text = r#"
            [run]
            allocators = [{ name = "cxlalloc", settings = { backend = "anon" } }]
            [[benchmark]]
            name = "threadtest"
        "#;
        let w = parse(text).unwrap();
        assert_eq!(w.configs[0].allocator.label(), "cxlalloc backend=anon");
    }

    #[test]
    fn config_ids_are_stable_and_distinguish_settings() {
        let w = parse(&format!("{BASE}\n[[benchmark]]\nname = \"threadtest\"\nsize = [8, 64]\n")).unwrap();
        let again = parse(&format!("{BASE}\n[[benchmark]]\nname = \"threadtest\"\nsize = [8, 64]\n")).unwrap();
        let ids: Vec<String> = w.configs.iter().map(Config::id).collect();
        assert_eq!(ids, again.configs.iter().map(Config::id).collect::<Vec<_>>());
        let unique: std::collections::BTreeSet<&String> = ids.iter().collect();
        assert_eq!(unique.len(), ids.len());
    }

    #[test]
    fn huge_pages_is_an_axis_skipped_for_allocators_whose_memory_is_not_on_the_run_root() {
        let text = r#"
            [run]
            allocators = ["cxlalloc", "mimalloc", "boost", { name = "cxlalloc", settings = { backend = "anon" } }]
            huge_pages = [false, true]
            [[benchmark]]
            name = "huge"
        "#;
        let w = parse(text).unwrap();
        let huge: Vec<String> = w.configs.iter().filter(|c| c.huge_pages).map(|c| c.allocator.label()).collect();
        assert_eq!(huge, ["cxlalloc", "boost"]);
        assert_eq!(w.configs.iter().filter(|c| !c.huge_pages).count(), 4);
        assert!(w.skipped.iter().all(|s| s.config.huge_pages && s.reason.contains("not on the run root")));
        assert_eq!(w.skipped.len(), 2);
        assert!(w.configs.iter().any(|c| c.huge_pages && c.describe().ends_with("| huge pages")));
        assert!(parse("[run]\nallocators=['cxlalloc']\nhuge_pages='yes'\n[[benchmark]]\nname='huge'\n").is_err());
    }

    #[test]
    fn a_configuration_without_huge_pages_keeps_the_id_it_had_before_the_key() {
        let w = parse(&format!("{BASE}\n[[benchmark]]\nname = \"threadtest\"\n")).unwrap();
        let c = &w.configs[0];
        assert!(!serde_json::to_string(c).unwrap().contains("huge_pages"));
        let on = Config { huge_pages: true, ..c.clone() };
        assert_ne!(on.id(), c.id());
    }

    #[test]
    fn mistakes_are_errors_that_say_where() {
        assert!(parse("[run]\nthread = 2\n[[benchmark]]\nname='x'\n").unwrap_err().to_string().contains("thread"));
        assert!(parse("[run]\nallocators=['tcmalloc']\n[[benchmark]]\nname='threadtest'\n")
            .unwrap_err()
            .to_string()
            .contains("tcmalloc"));
        assert!(parse("[run]\nallocators=['system']\n").is_err());
        let empty_skip = format!("{BASE}\n[[benchmark]]\nname='threadtest'\n[[skip]]\n");
        assert!(parse(&empty_skip).unwrap_err().to_string().contains("empty"));
    }
}
