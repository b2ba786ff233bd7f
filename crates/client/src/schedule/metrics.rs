//! What one `tenure cron` runner did, in the Prometheus text format, written to a file
//! (`--metrics-file`, for node_exporter's textfile collector or any scraper that reads
//! files): no port is opened. The file is replaced whole (written beside it, then renamed)
//! after every change, so a reader never sees half of it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::State;

/// The counts of one runner since it started.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    election: String,
    file: Option<PathBuf>,
    /// Slots this runner decided, by state (completed, failed, timed-out, interrupted,
    /// missed).
    decided: [u64; 5],
    /// Attempts after the first that this runner started (it took up a claim).
    reruns: u64,
    /// Records of this runner the store refused (it had been replaced).
    refused: u64,
    leading: bool,
    lateness_sum: Duration,
    started: u64,
    last_lateness: Duration,
    last_slot_unix: i64,
}

const STATES: [(State, &str); 5] = [
    (State::Completed, "completed"),
    (State::Failed, "failed"),
    (State::TimedOut, "timed-out"),
    (State::Interrupted, "interrupted"),
    (State::Missed, "missed"),
];

impl Metrics {
    /// Counts for `election`, written to `file` when given.
    pub fn new(election: &str, file: Option<&Path>) -> Metrics {
        let m = Metrics {
            election: election.to_string(),
            file: file.map(Path::to_path_buf),
            ..Metrics::default()
        };
        m.flush();
        m
    }

    /// This runner leads now, or not.
    pub fn leading(&mut self, yes: bool) {
        self.leading = yes;
        self.flush();
    }

    /// A command started `lateness` after its slot (`unix`: the slot, in seconds); `rerun`
    /// when it took up an earlier holder's claim.
    pub fn started(&mut self, unix: i64, lateness: Duration, rerun: bool) {
        self.started += 1;
        self.lateness_sum += lateness;
        self.last_lateness = lateness;
        self.last_slot_unix = unix;
        self.reruns += u64::from(rerun);
        self.flush();
    }

    /// `n` slots decided `state`.
    pub fn decided(&mut self, state: State, n: u64) {
        if let Some(i) = STATES.iter().position(|(s, _)| *s == state) {
            self.decided[i] += n;
        }
        self.flush();
    }

    /// The store refused one of this runner's records.
    pub fn refused(&mut self) {
        self.refused += 1;
        self.flush();
    }

    /// The Prometheus text.
    pub fn render(&self) -> String {
        let e = escape(&self.election);
        let mut out = String::new();
        let mut family = |name: &str, kind: &str, help: &str, samples: Vec<(String, String)>| {
            out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
            for (labels, value) in samples {
                out.push_str(&format!("{name}{{election=\"{e}\"{labels}}} {value}\n"));
            }
        };
        family(
            "tenure_cron_slots_total",
            "counter",
            "Slots this runner decided, by state.",
            STATES
                .iter()
                .zip(self.decided)
                .map(|((_, s), n)| (format!(",state=\"{s}\""), n.to_string()))
                .collect(),
        );
        let one = |v: String| vec![(String::new(), v)];
        family(
            "tenure_cron_reruns_total",
            "counter",
            "Slots this runner ran again after an earlier holder's interrupted attempt.",
            one(self.reruns.to_string()),
        );
        family(
            "tenure_cron_records_refused_total",
            "counter",
            "Ledger records of this runner that the store refused (it had been replaced).",
            one(self.refused.to_string()),
        );
        family(
            "tenure_cron_leading",
            "gauge",
            "1 while this runner leads the election and runs its schedule.",
            one(u8::from(self.leading).to_string()),
        );
        family(
            "tenure_cron_start_lateness_seconds_sum",
            "counter",
            "Sum of the time from each slot to its command's start, for the commands this runner started.",
            one(format!("{:.6}", self.lateness_sum.as_secs_f64())),
        );
        family(
            "tenure_cron_start_lateness_seconds_count",
            "counter",
            "Commands this runner started.",
            one(self.started.to_string()),
        );
        family(
            "tenure_cron_last_start_lateness_seconds",
            "gauge",
            "The time from the last started slot to its command's start.",
            one(format!("{:.6}", self.last_lateness.as_secs_f64())),
        );
        family(
            "tenure_cron_last_slot_timestamp_seconds",
            "gauge",
            "The last slot this runner started, in Unix seconds.",
            one(self.last_slot_unix.to_string()),
        );
        out
    }

    /// Replaces the file (if any) with [`Metrics::render`]; a failure is left for the next
    /// write (the schedule never waits on its metrics).
    fn flush(&self) {
        let Some(path) = &self.file else { return };
        let mut tmp = path.clone().into_os_string();
        tmp.push(".tmp");
        if std::fs::write(&tmp, self.render()).is_ok() {
            let _ = std::fs::rename(&tmp, path);
        }
    }
}

/// A label value as the text format wants it.
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_render_and_land_in_the_file_whole() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("cron.prom");
        let mut m = Metrics::new("nightly \"close\"", Some(&file));
        m.leading(true);
        m.started(1_700_000_000, Duration::from_millis(250), false);
        m.decided(State::Completed, 1);
        m.started(1_700_000_001, Duration::from_millis(750), true);
        m.decided(State::Missed, 3);
        m.refused();
        let text = std::fs::read_to_string(&file).unwrap();
        assert_eq!(text, m.render());
        for line in [
            "tenure_cron_slots_total{election=\"nightly \\\"close\\\"\",state=\"completed\"} 1",
            "tenure_cron_slots_total{election=\"nightly \\\"close\\\"\",state=\"missed\"} 3",
            "tenure_cron_reruns_total{election=\"nightly \\\"close\\\"\"} 1",
            "tenure_cron_records_refused_total{election=\"nightly \\\"close\\\"\"} 1",
            "tenure_cron_leading{election=\"nightly \\\"close\\\"\"} 1",
            "tenure_cron_start_lateness_seconds_sum{election=\"nightly \\\"close\\\"\"} 1.000000",
            "tenure_cron_start_lateness_seconds_count{election=\"nightly \\\"close\\\"\"} 2",
            "tenure_cron_last_slot_timestamp_seconds{election=\"nightly \\\"close\\\"\"} 1700000001",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line}\n{text}");
        }
        assert!(!dir.path().join("cron.prom.tmp").exists());
    }
}
