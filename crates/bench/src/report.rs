//! Results of one `tenure bench` invocation: raw samples, the markdown table (p50 / p99 /
//! p999 / max
//! and the ratio of tenure to each peer), TLS's cost (each system with TLS on next to the
//! same with TLS off), a CSV of every sample, and SVG plots of the failover distributions.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use plotters::prelude::*;

use crate::system::{Profile, System};

/// Whether a smaller or a larger value of a metric is the better one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Better {
    Lower,
    Higher,
}

/// One measured value.
#[derive(Clone, Debug)]
pub struct Sample {
    /// The scenario, e.g. `crash-failover`.
    pub scenario: String,
    /// What was measured within it, e.g. `fault → first acknowledged write`,
    /// `throughput, 16 clients`.
    pub metric: String,
    /// `ms`, `writes/s`, `renewals/s`, `MiB`, `% of a core`, `wake-ups`.
    pub unit: String,
    pub better: Better,
    pub system: System,
    pub profile: Profile,
    /// 0-based trial number within (scenario, metric, system, profile).
    pub trial: usize,
    pub value: f64,
}

/// Every sample and note of one invocation.
#[derive(Debug, Default)]
pub struct Report {
    pub samples: Vec<Sample>,
    /// (scenario, system, profile, text): why a cell is empty, caveats (e.g. "etcd rounds the
    /// TTL up to 2 s"), printed under the table.
    pub notes: Vec<(String, System, Profile, String)>,
}

impl Report {
    pub fn add(&mut self, s: Sample) {
        self.samples.push(s);
    }

    /// Add samples of `metric` (in `unit`, `better` telling which way is better) of
    /// `scenario`, measured on `system` under `profile`: one per `(trial, value)`.
    #[allow(clippy::too_many_arguments)]
    pub fn record(
        &mut self,
        scenario: &str,
        metric: &str,
        unit: &str,
        better: Better,
        system: System,
        profile: Profile,
        trials: impl IntoIterator<Item = (usize, f64)>,
    ) {
        for (trial, value) in trials {
            self.add(Sample {
                scenario: scenario.to_string(),
                metric: metric.to_string(),
                unit: unit.to_string(),
                better,
                system,
                profile,
                trial,
                value,
            });
        }
    }

    /// The samples of one cell: one metric of one scenario, on one system under one profile.
    pub fn cell<'a>(
        &'a self,
        scenario: &'a str,
        metric: &'a str,
        system: System,
        profile: Profile,
    ) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| {
            s.scenario == scenario
                && s.metric == metric
                && s.system == system
                && s.profile == profile
        })
    }

    pub fn note(&mut self, scenario: &str, system: System, profile: Profile, text: String) {
        self.notes
            .push((scenario.to_string(), system, profile, text));
    }

    /// Number the trials of every cell 0, 1, 2, … in the order its samples were added, so
    /// that a later round's samples follow the earlier rounds' rather than repeat their
    /// numbers. (A single round's numbers are already so.)
    pub fn number_trials(&mut self) {
        let mut next: BTreeMap<(&str, &str, System, Profile), usize> = BTreeMap::new();
        let mut numbers = Vec::with_capacity(self.samples.len());
        for s in &self.samples {
            let n = next
                .entry((&s.scenario, &s.metric, s.system, s.profile))
                .or_insert(0);
            numbers.push(*n);
            *n += 1;
        }
        for (s, n) in self.samples.iter_mut().zip(numbers) {
            s.trial = n;
        }
    }

    /// The markdown table(s) and notes: one section per scenario, in the order the scenarios
    /// ran, so the output reads like the run; then TLS's cost, when a TLS variant ran.
    pub fn markdown(&self) -> String {
        let mut sections: Vec<String> = self
            .scenarios()
            .into_iter()
            .map(|scenario| self.scenario_section(scenario))
            .collect();
        if let Some(tls) = self.tls_section() {
            sections.push(tls);
        }
        sections.join("\n")
    }

    /// Every sample, one row each, so that any other statistic can be computed later without
    /// running the benchmark again.
    pub fn write_csv(&self, path: &Path) -> anyhow::Result<()> {
        create_parent_dir(path)?;
        let mut out = String::from("scenario,metric,unit,system,profile,trial,value\n");
        for s in &self.samples {
            let fields = [
                csv_field(&s.scenario),
                csv_field(&s.metric),
                csv_field(&s.unit),
                csv_field(s.system.name()),
                csv_field(s.profile.name()),
                s.trial.to_string(),
                s.value.to_string(),
            ];
            out.push_str(&fields.join(","));
            out.push('\n');
        }
        fs::write(path, out).with_context(|| format!("write {}", path.display()))
    }

    /// The samples of a CSV written by [`Report::write_csv`] (to draw its plots again);
    /// notes are not in the CSV. Whether more is better is inferred from the unit (rates
    /// are, everything else is not), as the scenarios set it.
    pub fn read_csv(path: &Path) -> anyhow::Result<Report> {
        let text = fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
        let mut report = Report::default();
        for (n, line) in text.lines().enumerate().skip(1) {
            let f = split_csv_line(line);
            let bad = || anyhow::anyhow!("{}:{}: malformed line {line:?}", path.display(), n + 1);
            if f.len() != 7 {
                return Err(bad());
            }
            let system = System::ALL
                .into_iter()
                .find(|s| s.name() == f[3])
                .ok_or_else(bad)?;
            let profile = [Profile::Defaults, Profile::Equalized]
                .into_iter()
                .find(|p| p.name() == f[4])
                .ok_or_else(bad)?;
            report.add(Sample {
                scenario: f[0].clone(),
                metric: f[1].clone(),
                better: if f[2].ends_with("/s") {
                    Better::Higher
                } else {
                    Better::Lower
                },
                unit: f[2].clone(),
                system,
                profile,
                trial: f[5].parse().map_err(|_| bad())?,
                value: f[6].parse().map_err(|_| bad())?,
            });
        }
        Ok(report)
    }

    /// SVG plots of the distributions of scenarios with many trials; returns the files.
    ///
    /// One file per (scenario, profile) with millisecond metrics of at least
    /// [`MIN_PLOTTED_TRIALS`] trials for some system: an empirical CDF per system shows the
    /// whole distribution (tail included), which a p50/p99 pair hides.
    pub fn plot(&self, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
        fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        let mut written = Vec::new();
        for scenario in self.scenarios() {
            for profile in self.profiles(scenario) {
                let plot = self.cdf_plot(scenario, profile);
                if plot.curves.is_empty() {
                    continue;
                }
                let path = dir.join(format!("{}-{}.svg", file_stem(scenario), profile.name()));
                draw_cdf_plot(&path, &plot).with_context(|| format!("plot {}", path.display()))?;
                written.push(path);
            }
        }
        Ok(written)
    }

    // --------------------------------------------------------------------------------------
    // Grouping.

    /// Scenarios in first-seen order (samples first, then notes: a scenario that produced
    /// only notes, e.g. because every system was skipped, still gets a section).
    fn scenarios(&self) -> Vec<&str> {
        let from_samples = self.samples.iter().map(|s| s.scenario.as_str());
        let from_notes = self.notes.iter().map(|n| n.0.as_str());
        first_seen(from_samples.chain(from_notes))
    }

    /// Metrics of `scenario` in first-seen order, with the unit and direction of their first
    /// sample.
    fn metrics(&self, scenario: &str) -> Vec<MetricInfo<'_>> {
        let mut metrics: Vec<MetricInfo<'_>> = Vec::new();
        for s in self.samples.iter().filter(|s| s.scenario == scenario) {
            if !metrics.iter().any(|m| m.name == s.metric) {
                metrics.push(MetricInfo {
                    name: &s.metric,
                    unit: &s.unit,
                    better: s.better,
                });
            }
        }
        metrics
    }

    /// Profiles with samples in `scenario`, in the order of [`Profile`] (defaults first), so
    /// that every table lists them the same way.
    fn profiles(&self, scenario: &str) -> Vec<Profile> {
        let mut profiles: Vec<Profile> = self
            .samples
            .iter()
            .filter(|s| s.scenario == scenario)
            .map(|s| s.profile)
            .collect();
        profiles.sort();
        profiles.dedup();
        profiles
    }

    /// Systems that took part in `scenario` (a sample or a note), in the order of
    /// [`System::ALL`]. A system that took part but has no sample for some metric still gets
    /// a row there, with n = 0, so the gap is visible next to its note.
    fn systems(&self, scenario: &str) -> Vec<System> {
        System::ALL
            .into_iter()
            .filter(|&system| {
                self.samples
                    .iter()
                    .any(|s| s.scenario == scenario && s.system == system)
                    || self.notes.iter().any(|n| n.0 == scenario && n.1 == system)
            })
            .collect()
    }

    /// The values of one cell, sorted ascending.
    fn sorted_values(
        &self,
        scenario: &str,
        metric: &str,
        system: System,
        profile: Profile,
    ) -> Vec<f64> {
        let mut values: Vec<f64> = self
            .cell(scenario, metric, system, profile)
            .map(|s| s.value)
            .collect();
        values.sort_by(f64::total_cmp);
        values
    }

    // --------------------------------------------------------------------------------------
    // Markdown.

    fn scenario_section(&self, scenario: &str) -> String {
        let mut out = format!("### {}\n\n", escape_cell(scenario));
        let table = self.scenario_table(scenario);
        if table.is_empty() {
            out.push_str("No samples.\n");
        } else {
            out.push_str(&table);
        }
        let notes = self.scenario_notes(scenario);
        if !notes.is_empty() {
            out.push('\n');
            out.push_str(&notes);
        }
        out
    }

    /// The table of one scenario, or an empty string when it has no samples.
    fn scenario_table(&self, scenario: &str) -> String {
        let systems = self.systems(scenario);
        let mut rows = Vec::new();
        for metric in self.metrics(scenario) {
            for profile in self.profiles(scenario) {
                if !self.samples.iter().any(|s| {
                    s.scenario == scenario && s.metric == metric.name && s.profile == profile
                }) {
                    continue;
                }
                rows.extend(self.group_rows(scenario, &metric, profile, &systems));
            }
        }
        if rows.is_empty() {
            return String::new();
        }
        let mut out = String::from(
            "| metric | profile | system | n | p50 | p99 | p999 | max | vs etcd | vs zookeeper |\n\
             |---|---|---|--:|--:|--:|--:|--:|--:|--:|\n",
        );
        for row in rows {
            out.push_str(&row);
            out.push('\n');
        }
        if systems.contains(&System::TenureTls) {
            out.push_str("\ntenure-tls is compared with etcd-tls (both with TLS on).\n");
        }
        out
    }

    // --------------------------------------------------------------------------------------
    // TLS's cost.

    /// Each system with TLS on next to itself with TLS off, and tenure next to etcd both with
    /// TLS on, for every metric that a TLS variant was measured in; `None` when none was.
    fn tls_section(&self) -> Option<String> {
        let mut rows = Vec::new();
        for scenario in self.scenarios() {
            for metric in self.metrics(scenario) {
                for profile in self.profiles(scenario) {
                    let values =
                        |system| self.sorted_values(scenario, metric.name, system, profile);
                    let cells: Vec<(System, Vec<f64>)> = TLS_COLUMNS
                        .into_iter()
                        .map(|system| (system, values(system)))
                        .collect();
                    if !cells.iter().any(|(s, v)| s.tls() && !v.is_empty()) {
                        continue;
                    }
                    // p99 too where every measured cell is a distribution of many requests.
                    let distribution = cells
                        .iter()
                        .filter(|(_, v)| !v.is_empty())
                        .all(|(_, v)| v.len() >= MIN_TAIL_SAMPLES);
                    let stats: &[(&str, f64)] = if distribution {
                        &[(", p50", 50.0), (", p99", 99.0)]
                    } else {
                        &[("", 50.0)]
                    };
                    for &(stat, pct) in stats {
                        let at = |system: System| {
                            cells
                                .iter()
                                .find(|(s, _)| *s == system)
                                .and_then(|(_, v)| nearest_rank(v, pct))
                        };
                        let ratio = |num: System, den: System| format_ratio(at(num), at(den));
                        let cells = [
                            format!(
                                "{}: {}{stat}",
                                escape_cell(scenario),
                                escape_cell(&metric.label())
                            ),
                            profile.name().to_string(),
                            format_cell(at(System::Tenure), metric.unit),
                            format_cell(at(System::TenureTls), metric.unit),
                            ratio(System::TenureTls, System::Tenure),
                            format_cell(at(System::Etcd), metric.unit),
                            format_cell(at(System::EtcdTls), metric.unit),
                            ratio(System::EtcdTls, System::Etcd),
                            ratio(System::TenureTls, System::EtcdTls),
                        ];
                        rows.push(format!("| {} |", cells.join(" | ")));
                    }
                }
            }
        }
        if rows.is_empty() {
            return None;
        }
        let mut out = String::from(
            "### TLS's cost\n\n\
             Each value is the p50 (or the p99 where so marked) of the same cell in the tables \
             above; a value measured once per round is the median round's. A ratio divides the \
             two values as they stand: for a latency above 1 means slower, for a rate below 1 \
             means fewer.\n\n\
             | metric | profile | tenure | tenure-tls | tenure-tls / tenure | etcd | etcd-tls | etcd-tls / etcd | tenure-tls / etcd-tls |\n\
             |---|---|--:|--:|--:|--:|--:|--:|--:|\n",
        );
        for row in rows {
            out.push_str(&row);
            out.push('\n');
        }
        Some(out)
    }

    /// The rows of one (metric, profile) group, one per system.
    fn group_rows(
        &self,
        scenario: &str,
        metric: &MetricInfo<'_>,
        profile: Profile,
        systems: &[System],
    ) -> Vec<String> {
        let summaries: Vec<(System, Summary)> = systems
            .iter()
            .map(|&system| {
                let values = self.sorted_values(scenario, metric.name, system, profile);
                (system, Summary::of(&values))
            })
            .collect();
        let p50_of = |peer: System| {
            summaries
                .iter()
                .find(|(system, _)| *system == peer)
                .and_then(|(_, summary)| summary.p50)
        };
        summaries
            .iter()
            .map(|(system, summary)| {
                let vs = |peer: Option<System>| match peer {
                    Some(peer) => {
                        format_advantage(advantage(summary.p50, p50_of(peer), metric.better))
                    }
                    None => DASH.to_string(),
                };
                // tenure against each peer; tenure with TLS against etcd with TLS (ZooKeeper
                // runs without).
                let (vs_etcd, vs_zookeeper) = match system {
                    System::Tenure => (vs(Some(System::Etcd)), vs(Some(System::Zookeeper))),
                    System::TenureTls => (vs(Some(System::EtcdTls)), vs(None)),
                    System::TenureTimeout => (vs(Some(System::Etcd)), vs(Some(System::Zookeeper))),
                    _ => (String::new(), String::new()),
                };
                let cells = [
                    escape_cell(&metric.label()),
                    profile.name().to_string(),
                    system.name().to_string(),
                    summary.n.to_string(),
                    format_cell(summary.p50, metric.unit),
                    format_cell(summary.p99, metric.unit),
                    format_cell(summary.p999, metric.unit),
                    format_cell(summary.max, metric.unit),
                    vs_etcd,
                    vs_zookeeper,
                ];
                format!("| {} |", cells.join(" | "))
            })
            .collect()
    }

    /// The notes of one scenario as a bullet list, in the order they were taken.
    fn scenario_notes(&self, scenario: &str) -> String {
        self.notes
            .iter()
            .filter(|n| n.0 == scenario)
            .map(|(_, system, profile, text)| format!("- {system}, {profile}: {text}\n"))
            .collect()
    }

    // --------------------------------------------------------------------------------------
    // Plots.

    /// The CDF curves of one (scenario, profile): every millisecond metric with enough trials
    /// for some system, one curve per system that has samples of it.
    fn cdf_plot(&self, scenario: &str, profile: Profile) -> CdfPlot {
        let plotted: Vec<MetricInfo<'_>> = self
            .metrics(scenario)
            .into_iter()
            .filter(|m| m.unit == "ms")
            .filter(|m| {
                System::ALL.into_iter().any(|system| {
                    self.sorted_values(scenario, m.name, system, profile).len()
                        >= MIN_PLOTTED_TRIALS
                })
            })
            .collect();
        let several_metrics = plotted.len() > 1;
        let mut curves = Vec::new();
        for (index, metric) in plotted.iter().enumerate() {
            for system in System::ALL {
                let sorted = self.sorted_values(scenario, metric.name, system, profile);
                if sorted.is_empty() {
                    continue;
                }
                let label = if several_metrics {
                    format!("{system}: {}", metric.name)
                } else {
                    system.name().to_string()
                };
                curves.push(Curve {
                    label,
                    system,
                    dashed: index > 0,
                    sorted,
                });
            }
        }
        let x_label = match plotted.as_slice() {
            [only] => format!("{} (ms)", only.name),
            _ => "milliseconds".to_string(),
        };
        CdfPlot {
            caption: format!("{scenario}, {profile} profile"),
            x_label,
            curves,
        }
    }
}

/// Below this many trials a CDF says little more than the table does.
pub const MIN_PLOTTED_TRIALS: usize = 5;

/// The systems of the TLS table's value columns.
const TLS_COLUMNS: [System; 4] = [
    System::Tenure,
    System::TenureTls,
    System::Etcd,
    System::EtcdTls,
];

/// The TLS table shows a p99 only where every cell has at least this many samples (below, a
/// p99 is the maximum of a few).
const MIN_TAIL_SAMPLES: usize = 100;

/// What the samples of one metric of a scenario share.
struct MetricInfo<'a> {
    name: &'a str,
    unit: &'a str,
    better: Better,
}

impl MetricInfo<'_> {
    /// The metric column: the unit goes here once rather than into every number.
    fn label(&self) -> String {
        if self.unit.is_empty() {
            self.name.to_string()
        } else {
            format!("{} ({})", self.name, self.unit)
        }
    }
}

/// The statistics of one cell. `p99` and `max` are absent for a single sample: they would
/// only repeat the p50 and suggest a distribution that was not measured. `p999` is absent
/// below [`MIN_P999_SAMPLES`] samples, where it would be the maximum under another name.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Summary {
    n: usize,
    p50: Option<f64>,
    p99: Option<f64>,
    p999: Option<f64>,
    max: Option<f64>,
}

/// A cell shows its p999 from this many samples up (at 1,000 it is the second largest).
const MIN_P999_SAMPLES: usize = 1_000;

impl Summary {
    /// `sorted` must be ascending.
    fn of(sorted: &[f64]) -> Summary {
        let tail = |pct| {
            if sorted.len() > 1 {
                nearest_rank(sorted, pct)
            } else {
                None
            }
        };
        Summary {
            n: sorted.len(),
            p50: nearest_rank(sorted, 50.0),
            p99: tail(99.0),
            p999: if sorted.len() >= MIN_P999_SAMPLES {
                nearest_rank(sorted, 99.9)
            } else {
                None
            },
            max: tail(100.0),
        }
    }
}

/// The nearest-rank percentile of ascending `sorted`: always one of the measured values,
/// never an interpolation between two trials.
pub(crate) fn nearest_rank(sorted: &[f64], pct: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    // The rank is a whole number whenever pct × n / 100 is one in exact arithmetic; the
    // float product can land just above it (0.999 × 1000 = 999.0000000000001), which `ceil`
    // would take one rank too high, so a rounding error's worth is taken off first.
    let exact = pct / 100.0 * sorted.len() as f64;
    let rank = (exact - exact.abs() * 1e-12).ceil() as usize;
    let index = rank.clamp(1, sorted.len()) - 1;
    Some(sorted[index])
}

/// How much better tenure's p50 is than a peer's, oriented so that > 1 always means tenure is
/// better whatever the direction of the metric. `None` when either side is missing or not
/// positive, where a ratio would be meaningless or infinite.
fn advantage(tenure: Option<f64>, peer: Option<f64>, better: Better) -> Option<f64> {
    let (tenure, peer) = (tenure?, peer?);
    let usable = |v: f64| v.is_finite() && v > 0.0;
    if !usable(tenure) || !usable(peer) {
        return None;
    }
    Some(match better {
        Better::Lower => peer / tenure,
        Better::Higher => tenure / peer,
    })
}

/// `2.31× better`, `0.45× (worse)`, or `1.00× (same)` when the difference does not show at
/// two decimals.
fn format_advantage(ratio: Option<f64>) -> String {
    let Some(ratio) = ratio else {
        return DASH.to_string();
    };
    let shown = format!("{ratio:.2}");
    match shown.as_str() {
        "1.00" => format!("{shown}× (same)"),
        _ if ratio > 1.0 => format!("{shown}× better"),
        _ => format!("{shown}× (worse)"),
    }
}

/// Shown where there is no value.
const DASH: &str = "–";

/// `num / den` as `1.12×`, or a dash when either is missing or not positive.
fn format_ratio(num: Option<f64>, den: Option<f64>) -> String {
    match (num, den) {
        (Some(n), Some(d)) if n.is_finite() && d.is_finite() && n > 0.0 && d > 0.0 => {
            format!("{:.2}×", n / d)
        }
        _ => DASH.to_string(),
    }
}

fn format_cell(value: Option<f64>, unit: &str) -> String {
    value.map_or_else(|| DASH.to_string(), |v| format_value(v, unit))
}

/// A value with the precision its unit deserves: tenths of a millisecond or MiB, whole
/// operations per second, hundredths of a percent; digits grouped by thousands.
fn format_value(value: f64, unit: &str) -> String {
    let decimals = match unit {
        "ms" | "MiB" => 1,
        u if u.contains('%') => 2,
        u if u.ends_with("/s") => 0,
        _ if value.fract() == 0.0 => 0,
        _ => 2,
    };
    group_thousands(&format!("{value:.decimals$}"))
}

/// `12345.6` → `12 345.6`; anything that is not a plain number is returned unchanged.
fn group_thousands(number: &str) -> String {
    let (sign, rest) = match number.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", number),
    };
    let (int, frac) = match rest.split_once('.') {
        Some((int, frac)) => (int, Some(frac)),
        None => (rest, None),
    };
    if int.len() < 4 || !int.bytes().all(|b| b.is_ascii_digit()) {
        return number.to_string();
    }
    let mut grouped = String::new();
    for (i, digit) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(' ');
        }
        grouped.push(digit);
    }
    match frac {
        Some(frac) => format!("{sign}{grouped}.{frac}"),
        None => format!("{sign}{grouped}"),
    }
}

/// A table cell: a `|` would end the cell and a newline the row.
fn escape_cell(text: &str) -> String {
    text.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// The fields of one CSV line as [`csv_field`] writes them (quotes doubled inside quoted
/// fields; no line breaks inside fields).
fn split_csv_line(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        let field = fields.last_mut().expect("never empty");
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(String::new()),
            (c, _) => field.push(c),
        }
    }
    fields
}

/// A CSV field, quoted (with doubled quotes) only when it has to be.
fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

fn create_parent_dir(path: &Path) -> anyhow::Result<()> {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => {
            fs::create_dir_all(parent).with_context(|| format!("create {}", parent.display()))
        }
        _ => Ok(()),
    }
}

/// A scenario name made safe for a file name.
fn file_stem(scenario: &str) -> String {
    scenario
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// One plot file.
struct CdfPlot {
    caption: String,
    x_label: String,
    curves: Vec<Curve>,
}

/// One empirical CDF.
struct Curve {
    label: String,
    system: System,
    /// The second and later metrics of a plot are dashed; the colour stays the system's.
    dashed: bool,
    /// Ascending.
    sorted: Vec<f64>,
}

/// The colour of a system in every plot, so plots can be compared at a glance.
fn system_colour(system: System) -> RGBColor {
    match system {
        System::Tenure => RGBColor(0x1f, 0x77, 0xb4),
        // The TLS variants in a lighter shade of their system's colour.
        System::TenureTls => RGBColor(0x7f, 0xb8, 0xe0),
        System::TenureTimeout => RGBColor(0x17, 0xbe, 0xcf),
        System::Etcd => RGBColor(0xd6, 0x27, 0x28),
        System::EtcdTls => RGBColor(0xf0, 0x8c, 0x8c),
        System::Zookeeper => RGBColor(0x2c, 0xa0, 0x2c),
        System::Postgres => RGBColor(0x94, 0x67, 0xbd),
        System::Memory => RGBColor(0x7f, 0x7f, 0x7f),
    }
}

/// The step function of the empirical CDF of ascending `sorted`: the fraction of trials at or
/// below x, rising by 1/n at each trial. Above [`CDF_STEPS_MAX`] trials only every k-th step
/// is drawn (and always the last), so that a curve of 10,000 reads has the points the plot's
/// pixels can show rather than a file of megabytes; a skipped step is less than a pixel.
fn cdf_steps(sorted: &[f64]) -> Vec<(f64, f64)> {
    let n = sorted.len() as f64;
    let every = sorted.len().div_ceil(CDF_STEPS_MAX).max(1);
    let mut points = Vec::with_capacity(2 * sorted.len().min(CDF_STEPS_MAX + 1));
    for (i, &x) in sorted.iter().enumerate() {
        if i % every != 0 && i + 1 != sorted.len() {
            continue;
        }
        points.push((x, i as f64 / n));
        points.push((x, (i + 1) as f64 / n));
    }
    points
}

/// Most steps drawn of one CDF curve (the plot is 480 pixels high).
const CDF_STEPS_MAX: usize = 2_000;

/// Tick labels with as many decimals as the axis range needs.
fn format_ms_tick(value: &f64, x_end: f64) -> String {
    if x_end < 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.0}")
    }
}

fn draw_cdf_plot(path: &Path, plot: &CdfPlot) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, PLOT_SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let x_max = plot
        .curves
        .iter()
        .filter_map(|c| c.sorted.last().copied())
        .filter(|x| x.is_finite())
        .fold(0.0, f64::max);
    let x_min = plot
        .curves
        .iter()
        .filter_map(|c| c.sorted.iter().copied().find(|x| x.is_finite() && *x > 0.0))
        .fold(f64::INFINITY, f64::min);
    // A logarithmic axis: the systems differ by orders of magnitude (a 150 ms failover
    // next to a 10 s one), which a linear axis would squash into one corner.
    let x_end = if x_max > 0.0 { x_max * 1.2 } else { 1.0 };
    let x_start = if x_min.is_finite() {
        x_min / 1.2
    } else {
        x_end / 10.0
    };
    let mut chart = ChartBuilder::on(&root)
        .caption(&plot.caption, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(60)
        .build_cartesian_2d((x_start..x_end).log_scale(), 0.0..1.0)?;
    chart
        .configure_mesh()
        .x_desc(plot.x_label.as_str())
        .y_desc("fraction of trials")
        .x_label_formatter(&|v| format_ms_tick(v, x_end))
        .y_label_formatter(&|v| format!("{v:.1}"))
        .y_labels(11)
        // The bold grid at the labels is enough; a finer one only adds noise.
        .light_line_style(TRANSPARENT)
        .draw()?;
    for curve in &plot.curves {
        let colour = system_colour(curve.system);
        let style = colour.stroke_width(2);
        // A log axis has no zero: values at or below the axis start sit on it.
        let points: Vec<(f64, f64)> = cdf_steps(&curve.sorted)
            .into_iter()
            .map(|(x, y)| (x.max(x_start), y))
            .collect();
        let series = if curve.dashed {
            chart.draw_series(DashedLineSeries::new(points, 8, 5, style))?
        } else {
            chart.draw_series(LineSeries::new(points, style))?
        };
        series
            .label(curve.label.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], style));
    }
    // A latency CDF leaves the lower right (long times, few trials) empty.
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Width and height of every plot, in pixels.
const PLOT_SIZE: (u32, u32) = (800, 480);

/// The distinct items of `items`, in the order they first appear.
fn first_seen<'a>(items: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut seen: Vec<&str> = Vec::new();
    for item in items {
        if !seen.contains(&item) {
            seen.push(item);
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_round_trip() {
        let mut r = Report::default();
        for v in [1.5, 2.5] {
            r.add(Sample {
                scenario: "write".into(),
                metric: "throughput, 16 \"clients\"".into(),
                unit: "writes/s".into(),
                better: Better::Higher,
                system: System::Etcd,
                profile: Profile::Equalized,
                trial: 3,
                value: v,
            });
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.csv");
        r.write_csv(&path).unwrap();
        let back = Report::read_csv(&path).unwrap();
        assert_eq!(back.samples.len(), 2);
        let s = &back.samples[1];
        assert_eq!(s.metric, "throughput, 16 \"clients\"");
        assert_eq!(
            (s.better, s.system, s.profile, s.trial, s.value),
            (Better::Higher, System::Etcd, Profile::Equalized, 3, 2.5)
        );
        std::fs::write(&path, "h\nwrite,m,ms,nosuch,defaults,0,1\n").unwrap();
        assert!(Report::read_csv(&path).is_err());
    }

    /// Trials 0, 1, … with `values`.
    fn trials(values: &[f64]) -> impl Iterator<Item = (usize, f64)> + '_ {
        values.iter().copied().enumerate()
    }

    /// Failover: tenure 10..=19 ms, etcd twice as slow, ZooKeeper 1 sample; throughput:
    /// tenure 1000 writes/s vs etcd 4000.
    fn small_report() -> Report {
        let mut report = Report::default();
        let tenure: Vec<f64> = (10..20).map(f64::from).collect();
        let etcd: Vec<f64> = tenure.iter().map(|v| v * 2.0).collect();
        for (system, values) in [
            (System::Tenure, &tenure[..]),
            (System::Etcd, &etcd),
            (System::Zookeeper, &[3000.0]),
        ] {
            report.record(
                "crash-failover",
                "fault → first write",
                "ms",
                Better::Lower,
                system,
                Profile::Equalized,
                trials(values),
            );
        }
        for (system, value) in [(System::Etcd, 4000.0), (System::Tenure, 1000.0)] {
            report.record(
                "write",
                "throughput, 16 clients",
                "writes/s",
                Better::Higher,
                system,
                Profile::Defaults,
                [(0, value)],
            );
        }
        report.note(
            "write",
            System::Zookeeper,
            Profile::Defaults,
            "not run".to_string(),
        );
        report
    }

    fn row<'a>(markdown: &'a str, metric: &str, system: &str) -> Vec<&'a str> {
        markdown
            .lines()
            .find(|l| l.starts_with(&format!("| {metric}")) && l.contains(&format!("| {system} |")))
            .unwrap_or_else(|| panic!("no row {metric}/{system} in\n{markdown}"))
            .trim_matches('|')
            .split(" | ")
            .map(str::trim)
            .collect()
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(nearest_rank(&v, 50.0), Some(5.0));
        assert_eq!(nearest_rank(&v, 99.0), Some(10.0));
        assert_eq!(nearest_rank(&v, 100.0), Some(10.0));
        assert_eq!(nearest_rank(&v, 0.0), Some(1.0));
        assert_eq!(nearest_rank(&[], 50.0), None);
        let one = Summary::of(&[7.0]);
        assert_eq!(
            (one.n, one.p50, one.p99, one.p999, one.max),
            (1, Some(7.0), None, None, None)
        );
        // A p999 from 1,000 samples up, and then never the maximum of more than 1,000.
        let below: Vec<f64> = (1..=999).map(f64::from).collect();
        assert_eq!(Summary::of(&below).p999, None);
        let thousand: Vec<f64> = (1..=1000).map(f64::from).collect();
        assert_eq!(Summary::of(&thousand).p999, Some(999.0));
        let many: Vec<f64> = (1..=10_000).map(f64::from).collect();
        let s = Summary::of(&many);
        assert_eq!(
            (s.p50, s.p99, s.p999, s.max),
            (Some(5000.0), Some(9900.0), Some(9990.0), Some(10_000.0))
        );
    }

    /// The read scenario's shape: 1,000 latencies of each kind per system, and a rate.
    #[test]
    fn p999_column_and_read_rows() {
        let mut report = Report::default();
        for (system, scale) in [
            (System::Tenure, 1.0),
            (System::Etcd, 4.0),
            (System::Zookeeper, 2.0),
        ] {
            for kind in ["leader read", "key read"] {
                let latencies: Vec<f64> =
                    (1..=1000).map(|v| f64::from(v) * scale / 100.0).collect();
                report.record(
                    "read",
                    &format!("{kind}: one client, latency"),
                    "ms",
                    Better::Lower,
                    system,
                    Profile::Defaults,
                    trials(&latencies),
                );
                report.record(
                    "read",
                    &format!("{kind}: throughput, 16 clients"),
                    "reads/s",
                    Better::Higher,
                    system,
                    Profile::Defaults,
                    [(0, 10_000.0 / scale)],
                );
            }
        }
        let md = report.markdown();
        assert!(
            md.contains("| metric | profile | system | n | p50 | p99 | p999 | max | vs etcd | vs zookeeper |"),
            "{md}"
        );
        assert_eq!(
            row(&md, "leader read: one client, latency (ms)", "tenure"),
            [
                "leader read: one client, latency (ms)",
                "defaults",
                "tenure",
                "1000",
                "5.0",
                "9.9",
                "10.0",
                "10.0",
                "4.00× better",
                "2.00× better"
            ]
        );
        assert_eq!(
            &row(&md, "key read: one client, latency (ms)", "etcd")[3..],
            ["1000", "20.0", "39.6", "40.0", "40.0", "", ""]
        );
        // One rate per cell: no tail, and more is better.
        assert_eq!(
            &row(&md, "key read: throughput, 16 clients (reads/s)", "tenure")[3..],
            ["1", "10 000", "–", "–", "–", "4.00× better", "2.00× better"]
        );
    }

    #[test]
    fn ratio_direction() {
        // Lower is better: tenure at 10 against 20 is twice as good.
        assert_eq!(advantage(Some(10.0), Some(20.0), Better::Lower), Some(2.0));
        // Higher is better: tenure at 1000 against 4000 is a quarter as good.
        assert_eq!(
            advantage(Some(1000.0), Some(4000.0), Better::Higher),
            Some(0.25)
        );
        assert_eq!(advantage(Some(0.0), Some(4.0), Better::Lower), None);
        assert_eq!(advantage(Some(1.0), None, Better::Lower), None);
        assert_eq!(format_advantage(Some(2.3149)), "2.31× better");
        assert_eq!(format_advantage(Some(0.45)), "0.45× (worse)");
        assert_eq!(format_advantage(Some(1.001)), "1.00× (same)");
        assert_eq!(format_advantage(None), "–");
    }

    #[test]
    fn markdown_table() {
        let md = small_report().markdown();
        assert!(md.starts_with("### crash-failover\n"), "{md}");
        assert!(md.find("### crash-failover").unwrap() < md.find("### write").unwrap());
        let metric = "fault → first write (ms)";
        let tenure = row(&md, metric, "tenure");
        assert_eq!(
            tenure,
            [
                "fault → first write (ms)",
                "equalized",
                "tenure",
                "10",
                "14.0",
                "19.0",
                "–",
                "19.0",
                "2.00× better",
                "214.29× better"
            ]
        );
        let zk = row(&md, metric, "zookeeper");
        assert_eq!(&zk[3..], ["1", "3 000.0", "–", "–", "–", "", ""]);
        let etcd_row = md.lines().position(|l| l.contains("| etcd |")).unwrap();
        let tenure_row = md.lines().position(|l| l.contains("| tenure |")).unwrap();
        assert!(tenure_row < etcd_row, "tenure first:\n{md}");

        let metric = "throughput, 16 clients (writes/s)";
        let tenure = row(&md, metric, "tenure");
        assert_eq!(
            &tenure[3..],
            ["1", "1 000", "–", "–", "–", "0.25× (worse)", "–"]
        );
        // ZooKeeper took part only through its note: a row with no samples.
        assert_eq!(
            &row(&md, metric, "zookeeper")[3..8],
            ["0", "–", "–", "–", "–"]
        );
        assert!(md.contains("\n- zookeeper, defaults: not run\n"), "{md}");
    }

    /// tenure and etcd with and without TLS: 100 latencies each (TLS adds 10 % to tenure and
    /// 50 % to etcd) and one throughput each.
    fn tls_report() -> Report {
        let mut report = Report::default();
        for (system, scale) in [
            (System::Tenure, 1.0),
            (System::TenureTls, 1.1),
            (System::Etcd, 2.0),
            (System::EtcdTls, 3.0),
        ] {
            let latencies: Vec<f64> = (1..=100).map(|v| f64::from(v) * scale).collect();
            for (metric, unit, better, values) in [
                ("one client, latency", "ms", Better::Lower, latencies),
                (
                    "throughput, 1 clients",
                    "writes/s",
                    Better::Higher,
                    vec![1000.0 / scale],
                ),
            ] {
                report.record(
                    "write",
                    metric,
                    unit,
                    better,
                    system,
                    Profile::Equalized,
                    trials(&values),
                );
            }
        }
        report
    }

    #[test]
    fn tls_cost_table() {
        let md = tls_report().markdown();
        let section = md.split("### TLS's cost\n").nth(1).expect("a TLS section");
        let line = |metric: &str| -> Vec<&str> {
            section
                .lines()
                .find(|l| l.starts_with(&format!("| {metric} |")))
                .unwrap_or_else(|| panic!("no row {metric} in\n{section}"))
                .trim_matches('|')
                .split(" | ")
                .map(str::trim)
                .collect()
        };
        assert_eq!(
            line("write: one client, latency (ms), p50"),
            [
                "write: one client, latency (ms), p50",
                "equalized",
                "50.0",
                "55.0",
                "1.10×",
                "100.0",
                "150.0",
                "1.50×",
                "0.37×"
            ]
        );
        assert_eq!(
            &line("write: one client, latency (ms), p99")[2..5],
            ["99.0", "108.9", "1.10×"]
        );
        // One value per cell: no p99 row, and the ratio is of rates.
        assert_eq!(
            &line("write: throughput, 1 clients (writes/s)")[2..],
            ["1 000", "909", "0.91×", "500", "333", "0.67×", "2.73×"]
        );
        assert!(!section.contains("throughput, 1 clients (writes/s), p99"));
        // The main table compares tenure-tls with etcd-tls, and tenure with etcd.
        let tls = row(&md, "one client, latency (ms)", "tenure-tls");
        assert_eq!(&tls[8..], ["2.73× better", "–"]);
        let plain = row(&md, "one client, latency (ms)", "tenure");
        assert_eq!(&plain[8..], ["2.00× better", "–"]);
        assert!(md.contains("tenure-tls is compared with etcd-tls"));
        // Without a TLS variant there is no such section.
        assert!(!small_report().markdown().contains("TLS's cost"));
    }

    #[test]
    fn rounds_continue_trial_numbers() {
        let mut report = Report::default();
        for _round in 0..2 {
            report.record(
                "write",
                "one client, latency",
                "ms",
                Better::Lower,
                System::TenureTls,
                Profile::Defaults,
                trials(&[1.0, 2.0, 3.0]),
            );
        }
        report.number_trials();
        let trials: Vec<usize> = report.samples.iter().map(|s| s.trial).collect();
        assert_eq!(trials, [0, 1, 2, 3, 4, 5]);
        // The TLS variants' names survive a CSV round trip.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.csv");
        report.write_csv(&path).unwrap();
        let back = Report::read_csv(&path).unwrap();
        assert!(back.samples.iter().all(|s| s.system == System::TenureTls));
    }

    #[test]
    fn value_formats() {
        assert_eq!(format_value(12345.0, "writes/s"), "12 345");
        assert_eq!(format_value(1234567.4, "renewals/s"), "1 234 567");
        assert_eq!(format_value(152.34, "ms"), "152.3");
        assert_eq!(format_value(61.25, "MiB"), "61.2");
        assert_eq!(format_value(2.345_67, "% of a core"), "2.35");
        assert_eq!(format_value(3.0, "wake-ups"), "3");
        assert_eq!(format_value(-1234.5, "ms"), "-1 234.5");
    }

    #[test]
    fn csv_quoting() {
        assert_eq!(csv_field("plain"), "plain");
        assert_eq!(csv_field("a, b"), "\"a, b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/out/samples.csv");
        small_report().write_csv(&path).unwrap();
        let csv = fs::read_to_string(&path).unwrap();
        let mut lines = csv.lines();
        assert_eq!(
            lines.next(),
            Some("scenario,metric,unit,system,profile,trial,value")
        );
        assert_eq!(
            lines.next(),
            Some("crash-failover,fault → first write,ms,tenure,equalized,0,10")
        );
        assert!(csv.contains("\nwrite,\"throughput, 16 clients\",writes/s,etcd,defaults,0,4000\n"));
        assert_eq!(csv.lines().count(), 1 + 10 + 10 + 1 + 2);
    }

    #[test]
    fn cdf_steps_thin_long_curves() {
        let short: Vec<f64> = (1..=4).map(f64::from).collect();
        assert_eq!(
            cdf_steps(&short),
            [
                (1.0, 0.0),
                (1.0, 0.25),
                (2.0, 0.25),
                (2.0, 0.5),
                (3.0, 0.5),
                (3.0, 0.75),
                (4.0, 0.75),
                (4.0, 1.0)
            ]
        );
        let long: Vec<f64> = (1..=10_001).map(f64::from).collect();
        let steps = cdf_steps(&long);
        assert!(steps.len() <= 2 * (CDF_STEPS_MAX + 1), "{}", steps.len());
        assert_eq!(steps.first(), Some(&(1.0, 0.0)));
        // The slowest trial and the curve's end at 1 are always drawn.
        assert_eq!(steps.last(), Some(&(10_001.0, 1.0)));
    }

    #[test]
    fn plot_writes_svg() {
        let dir = tempfile::tempdir().unwrap();
        let plots = dir.path().join("plots");
        let written = small_report().plot(&plots).unwrap();
        // Only the millisecond scenario with enough trials is plotted.
        assert_eq!(written, vec![plots.join("crash-failover-equalized.svg")]);
        let svg = fs::read_to_string(&written[0]).unwrap();
        assert!(svg.starts_with("<svg") || svg.starts_with("<?xml"), "{svg}");
        assert!(svg.trim_end().ends_with("</svg>"));
        for text in [
            "tenure",
            "etcd",
            "zookeeper",
            "crash-failover, equalized profile",
            "fraction of trials",
        ] {
            assert!(svg.contains(text), "{text} missing");
        }
    }
}
