//! Limits of the on-disk log, each with a name and a reason.

use crate::error::{Result, WalError};
use crate::record::PART_OVERHEAD_BYTES_MAX;

/// Tuning and limits of a [`crate::FileStorage`]. Checked by [`WalOptions::validate`] when the
/// storage opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalOptions {
    /// Once the active segment holds at least this many bytes, the next persist starts a new
    /// segment. Smaller segments let compaction free space sooner; larger ones mean fewer
    /// files and directory fsyncs. A segment exceeds this by at most one persist.
    pub segment_bytes_max: u64,
    /// Largest record (header included) the log writes or accepts when reading. A persist
    /// larger than this is split into several records; one entry must fit in one. A length
    /// field above this on disk is treated as damage, so that an untrusted length never
    /// decides an allocation. Never lower it below the value that wrote an existing log.
    pub record_bytes_max: u32,
    /// Largest snapshot file the log writes or reads, for the same reason.
    pub snapshot_bytes_max: u32,
    /// Test the testers: the background snapshot path discards the entries a snapshot covers
    /// before [`BackgroundSnapshots::record_snapshot`]: the writer hands its file to the log
    /// as soon as it is durable, and the next persist refers to it. Only in builds with the
    /// `inject-bugs` feature; the conformance suite's background checks must catch it.
    ///
    /// [`BackgroundSnapshots::record_snapshot`]: tenure_core::storage::BackgroundSnapshots::record_snapshot
    #[cfg(feature = "inject-bugs")]
    #[doc(hidden)]
    pub bug_discard_before_record: bool,
    /// Test the testers: `record_snapshot` records a background snapshot although one at or
    /// past its index was persisted meanwhile (the stored snapshot goes back, the entries
    /// after it are lost). Only in builds with the `inject-bugs` feature.
    #[cfg(feature = "inject-bugs")]
    #[doc(hidden)]
    pub bug_record_stale_snapshot: bool,
    /// Test the testers: a background snapshot's file is recorded before it is durable (the
    /// writer skips the fsync of the file and of the directory), so a power loss after the
    /// record leaves the log referring to a missing or empty file. Only in builds with the
    /// `inject-bugs` feature; the simulator's recovery checker must catch it.
    #[cfg(feature = "inject-bugs")]
    #[doc(hidden)]
    pub bug_snapshot_file_not_durable: bool,
}

impl Default for WalOptions {
    fn default() -> WalOptions {
        WalOptions {
            segment_bytes_max: 64 << 20,
            record_bytes_max: 16 << 20,
            snapshot_bytes_max: 1 << 30,
            #[cfg(feature = "inject-bugs")]
            bug_discard_before_record: false,
            #[cfg(feature = "inject-bugs")]
            bug_record_stale_snapshot: false,
            #[cfg(feature = "inject-bugs")]
            bug_snapshot_file_not_durable: false,
        }
    }
}

/// Smallest `record_bytes_max` accepted: room for the record header, the persist overhead
/// and a useful entry.
pub const RECORD_BYTES_MIN: u32 = 1024;

impl WalOptions {
    /// Check the rules: every limit non-zero and large enough to hold its own headers.
    pub fn validate(&self) -> Result<()> {
        if self.segment_bytes_max == 0 {
            return Err(WalError::Options(
                "segment_bytes_max must be at least 1".into(),
            ));
        }
        if self.record_bytes_max < RECORD_BYTES_MIN {
            return Err(WalError::Options(format!(
                "record_bytes_max is {}, below the minimum of {RECORD_BYTES_MIN}",
                self.record_bytes_max
            )));
        }
        if self.snapshot_bytes_max < RECORD_BYTES_MIN {
            return Err(WalError::Options(format!(
                "snapshot_bytes_max is {}, below the minimum of {RECORD_BYTES_MIN}",
                self.snapshot_bytes_max
            )));
        }
        Ok(())
    }

    /// Whether this build has the test-the-testers switches (the `inject-bugs` feature).
    pub const BUGS_BUILT: bool = cfg!(feature = "inject-bugs");

    /// Switches on `bug_snapshot_file_not_durable` for the simulator's `--inject-bug
    /// snapshot-recorded-before-written`; returns false, changing nothing, in a build without
    /// the `inject-bugs` feature.
    #[doc(hidden)]
    pub fn inject_snapshot_file_not_durable(&mut self) -> bool {
        #[cfg(feature = "inject-bugs")]
        {
            self.bug_snapshot_file_not_durable = true;
        }
        Self::BUGS_BUILT
    }

    /// Whether a background snapshot's file is made durable before it is handed back (always,
    /// unless the injected bug above is on).
    pub(crate) fn snapshot_file_made_durable(&self) -> bool {
        #[cfg(feature = "inject-bugs")]
        {
            !self.bug_snapshot_file_not_durable
        }
        #[cfg(not(feature = "inject-bugs"))]
        {
            true
        }
    }

    /// The most one entry may take, encoded: a record minus its header and the fixed part of
    /// a persist record.
    pub fn entry_bytes_max(&self) -> u64 {
        u64::from(self.record_bytes_max) - PART_OVERHEAD_BYTES_MAX as u64
    }
}
