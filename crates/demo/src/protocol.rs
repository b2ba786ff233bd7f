//! What workers tell the controller, and what they write: the `EVENT` lines on a worker's
//! stdout and the rows of the fenced ledger. Both sides use these functions, so the format
//! lives in one place.
//!
//! An event line is `EVENT <kind> key=value key=value …`; values never contain spaces.
//! A ledger is UTF-8 text, one row per line: `report 7 by worker 2 token 3`.

use std::collections::BTreeMap;

/// The prefix of every machine-readable line a worker prints.
pub const EVENT_PREFIX: &str = "EVENT ";

/// One event from a worker, as parsed by the controller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// What happened: `session`, `leader`, `computing`, `write-ok`, `write-rejected`, …
    pub kind: String,
    /// The `key=value` fields.
    pub fields: BTreeMap<String, String>,
}

impl Event {
    /// Parse one stdout line; `None` for lines that are not events.
    pub fn parse(line: &str) -> Option<Event> {
        let rest = line.trim_end().strip_prefix(EVENT_PREFIX)?;
        let mut parts = rest.split_whitespace();
        let kind = parts.next()?.to_string();
        let fields = parts
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Some(Event { kind, fields })
    }

    /// A numeric field, or `None` if it is absent or not a number.
    pub fn num(&self, key: &str) -> Option<u64> {
        self.fields.get(key)?.parse().ok()
    }

    /// A text field ("" when absent).
    pub fn text(&self, key: &str) -> &str {
        self.fields.get(key).map(String::as_str).unwrap_or("")
    }
}

/// Format an event line (without the newline). Spaces in values become `_` so that the line
/// stays parseable.
pub fn event_line(kind: &str, fields: &[(&str, String)]) -> String {
    let mut line = format!("{EVENT_PREFIX}{kind}");
    for (k, v) in fields {
        line.push(' ');
        line.push_str(k);
        line.push('=');
        line.push_str(&v.replace(char::is_whitespace, "_"));
    }
    line
}

/// One row of the ledger.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    /// The report's number; each must appear once.
    pub report: u64,
    /// The worker that wrote it.
    pub worker: u64,
    /// The fencing token it was written with.
    pub token: u64,
}

impl Row {
    /// The row as stored, with its newline.
    pub fn line(&self) -> String {
        format!(
            "report {} by worker {} token {}\n",
            self.report, self.worker, self.token
        )
    }
}

/// Parse a ledger; lines that are not rows are returned as errors so that corruption shows.
pub fn parse_ledger(bytes: &[u8]) -> Result<Vec<Row>, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("ledger is not UTF-8: {e}"))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            match w.as_slice() {
                ["report", r, "by", "worker", k, "token", t] => Ok(Row {
                    report: r
                        .parse()
                        .map_err(|_| format!("bad report number in {l:?}"))?,
                    worker: k.parse().map_err(|_| format!("bad worker in {l:?}"))?,
                    token: t.parse().map_err(|_| format!("bad token in {l:?}"))?,
                }),
                _ => Err(format!("not a ledger row: {l:?}")),
            }
        })
        .collect()
}

/// The number the next report gets: one past the highest written.
pub fn next_report(rows: &[Row]) -> u64 {
    rows.iter().map(|r| r.report).max().unwrap_or(0) + 1
}

/// Rows whose report number already appeared earlier in the ledger.
pub fn duplicates(rows: &[Row]) -> usize {
    let mut seen = std::collections::BTreeSet::new();
    rows.iter().filter(|r| !seen.insert(r.report)).count()
}

/// Runs of consecutive rows written with the same token, as `(first report, last report,
/// worker, token)`, for a compact summary of who wrote what.
pub fn runs(rows: &[Row]) -> Vec<(u64, u64, u64, u64)> {
    let mut out: Vec<(u64, u64, u64, u64)> = Vec::new();
    for r in rows {
        match out.last_mut() {
            Some(last) if last.2 == r.worker && last.3 == r.token => last.1 = r.report,
            _ => out.push((r.report, r.report, r.worker, r.token)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_lines_round_trip() {
        let line = event_line(
            "write-rejected",
            &[("token", "2".into()), ("reason", "stale token".into())],
        );
        assert_eq!(line, "EVENT write-rejected token=2 reason=stale_token");
        let e = Event::parse(&line).expect("an event");
        assert_eq!(e.kind, "write-rejected");
        assert_eq!(e.num("token"), Some(2));
        assert_eq!(e.text("reason"), "stale_token");
        assert_eq!(Event::parse("worker 2 computing"), None);
    }

    #[test]
    fn ledger_rows_duplicates_and_runs() {
        let mut ledger = String::new();
        for (report, worker, token) in [(1, 1, 1), (2, 1, 1), (3, 2, 2), (3, 1, 1), (4, 2, 2)] {
            ledger.push_str(
                &Row {
                    report,
                    worker,
                    token,
                }
                .line(),
            );
        }
        let rows = parse_ledger(ledger.as_bytes()).expect("parses");
        assert_eq!(rows.len(), 5);
        assert_eq!(duplicates(&rows), 1);
        assert_eq!(next_report(&rows), 5);
        assert_eq!(
            runs(&rows),
            vec![(1, 2, 1, 1), (3, 3, 2, 2), (3, 3, 1, 1), (4, 4, 2, 2)]
        );
        assert!(parse_ledger(b"hello\n").is_err());
        assert_eq!(next_report(&[]), 1);
    }
}
