//! One event per change of a slot, as JSON Lines appended to a file (`tenure cron --events
//! FILE`), for a log pipeline or an alert to read: every line is one object, written once
//! the ledger holds what it says (a record the store refused is an event of its own).
//!
//! ```text
//! {"at":"…","election":"nightly","event":"claimed","run":{"attempt":1,"holder":"r1","run_id":"nightly/…","slot":"…","slots":1,"start":"…","state":"running","token":7}}
//! {"at":"…","election":"nightly","event":"decided","run":{…,"end":"…","exit":0,…,"state":"completed",…}}
//! {"at":"…","election":"nightly","event":"stopped","run":{…,"stopped":"lost leadership",…}}
//! {"at":"…","election":"nightly","event":"refused","holder":"r1","token":7,"why":"stale token: …"}
//! ```
//!
//! `claimed`: a slot's command is about to start (its `run` is the open claim);
//! `decided`: a slot (or, for `missed`, a range of slots) was recorded with its final
//! state — `completed`, `failed`, `timed-out`, `interrupted` or `missed`; `stopped`: the
//! holder's command was stopped without an outcome and it noted that on the claim, which
//! the next leader takes up; `refused`: the store refused this holder's record (it had
//! been replaced). `run` is the ledger's own record of the slot (docs/CRON.md, "The
//! ledger"); `at` is when the runner wrote the line.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use chrono::Utc;
use serde_json::json;

use super::ledger::{rfc3339, Ledger};

/// What a ledger write did to a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Claimed the open slot: its command is about to start.
    Claimed,
    /// Decided a slot (or a range, `missed`): the last of the ledger's runs.
    Decided,
    /// Noted on the open claim that its command was stopped without an outcome.
    Stopped,
}

impl Change {
    fn name(self) -> &'static str {
        match self {
            Change::Claimed => "claimed",
            Change::Decided => "decided",
            Change::Stopped => "stopped",
        }
    }
}

/// Where one runner's events go: a file opened for appending, or nowhere.
#[derive(Debug)]
pub struct Events {
    election: String,
    out: Option<(PathBuf, std::fs::File)>,
}

impl Events {
    /// Events of `election`, appended to `file` when given (created if absent).
    pub fn open(election: &str, file: Option<&Path>) -> std::io::Result<Events> {
        let out = match file {
            Some(path) => {
                let f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)?;
                Some((path.to_path_buf(), f))
            }
            None => None,
        };
        Ok(Events {
            election: election.to_string(),
            out,
        })
    }

    /// `ledger`, as the store now holds it, made `change` to a slot.
    pub fn slot(&mut self, change: Change, ledger: &Ledger) {
        let run = match change {
            Change::Claimed | Change::Stopped => ledger.open.as_ref(),
            Change::Decided => ledger.runs.last(),
        };
        if let Some(run) = run {
            self.write(json!({
                "event": change.name(),
                "election": self.election,
                "at": rfc3339(Utc::now()),
                "run": run,
            }));
        }
    }

    /// The store refused a record of this runner, which led as `holder` with `token`.
    pub fn refused(&mut self, holder: &str, token: u64, why: &str) {
        self.write(json!({
            "event": "refused",
            "election": self.election,
            "at": rfc3339(Utc::now()),
            "holder": holder,
            "token": token,
            "why": why,
        }));
    }

    /// One line, written whole with one `write` (O_APPEND: lines of several runners sharing
    /// a file never interleave). A failure is said once on stderr and the file dropped: the
    /// schedule goes on without it.
    fn write(&mut self, event: serde_json::Value) {
        let Some((path, file)) = &mut self.out else {
            return;
        };
        let mut line = event.to_string();
        line.push('\n');
        if let Err(e) = file.write_all(line.as_bytes()) {
            eprintln!(
                "tenure cron: cannot write events to {}: {e}; no more events will be written",
                path.display()
            );
            self.out = None;
        }
    }
}
