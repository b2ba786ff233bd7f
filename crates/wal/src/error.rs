//! The one error type of this crate.

use std::io;
use std::path::PathBuf;

use tenure_core::types::Index;

/// What this crate's fallible functions return.
pub type Result<T, E = WalError> = std::result::Result<T, E>;

/// Why the write-ahead log could not open, recover or persist.
///
/// Only [`WalError::EntryTooLarge`] and [`WalError::SnapshotTooLarge`] leave the storage
/// usable (nothing was written). Every other error from [`tenure_core::storage::Storage::persist`]
/// means the disk may hold less than was asked: the driver must stop the node and reopen the
/// directory, which recovers whatever is durable.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WalError {
    /// The options break a rule; nothing was touched.
    #[error("invalid WAL options: {0}")]
    Options(String),

    /// The operating system refused a file operation.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done ("fsync", "open", ...).
        op: &'static str,
        /// The file or directory it was done to.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },

    /// Another process (or another `FileStorage` in this one) has the directory open.
    #[error(
        "WAL directory {dir} is in use by another process{holder}; stop that process, or \
         give this one another directory (two writers would destroy the log)"
    )]
    Locked {
        /// The directory.
        dir: PathBuf,
        /// `" (pid N)"` when the lock file names its holder, or empty.
        holder: String,
    },

    /// The directory holds damaged data that is not a torn write at the end of the log, so
    /// recovering would lose or invent acknowledged data. Nothing was changed on disk.
    #[error(
        "corrupt WAL: {file} at byte {offset}: {why}. Refusing to start: repairing this would \
         lose data that was acknowledged. Keep the directory for inspection, then restore it \
         from a backup or remove it and let this node catch up from its peers"
    )]
    Corrupt {
        /// The damaged file.
        file: PathBuf,
        /// Where in the file the damage starts.
        offset: u64,
        /// What is wrong there.
        why: String,
    },

    /// A record with a valid checksum was written by a newer format version.
    #[error(
        "{file} at byte {offset} holds a record of WAL format version {version}, but this \
         build reads only version {supported}: run the tenure version that wrote it (or a newer one)"
    )]
    UnsupportedVersion {
        /// The file.
        file: PathBuf,
        /// Where the record starts.
        offset: u64,
        /// The version found.
        version: u8,
        /// The only version this build reads and writes.
        supported: u8,
    },

    /// One entry does not fit in a record; nothing was written.
    #[error(
        "entry at index {index} encodes to {bytes} bytes, more than one WAL record holds \
         ({max} bytes with record_bytes_max); nothing was written"
    )]
    EntryTooLarge {
        /// The entry's index.
        index: Index,
        /// Its encoded size.
        bytes: u64,
        /// The most an entry may take.
        max: u64,
    },

    /// The snapshot does not fit in a snapshot file; nothing was written.
    #[error(
        "snapshot at index {index} encodes to {bytes} bytes, more than snapshot_bytes_max \
         ({max}); nothing was written"
    )]
    SnapshotTooLarge {
        /// The snapshot's index.
        index: Index,
        /// Its encoded size.
        bytes: u64,
        /// The limit.
        max: u64,
    },

    /// A background snapshot was recorded although the stored snapshot is already at or past
    /// its index: its node cannot have adopted it (the caller broke the contract of
    /// `BackgroundSnapshots::record_snapshot`). Nothing was written.
    #[error(
        "a background snapshot at index {index} was recorded, but the log's snapshot is at \
         {stored}: only a snapshot the node adopted may be recorded; nothing was written"
    )]
    SnapshotNotNewer {
        /// The background snapshot's index.
        index: Index,
        /// The stored snapshot's index.
        stored: Index,
    },

    /// An earlier write or fsync failed, so what is on disk is unknown (after a failed fsync
    /// the kernel may have dropped the dirty pages); this handle refuses to go on.
    #[error(
        "the WAL refuses further writes after an earlier failure ({0}); stop the node and \
         reopen the directory to recover what is durable"
    )]
    Poisoned(String),
}

impl WalError {
    /// True for the errors that mean the directory's content is damaged (as opposed to an
    /// IO failure, a lock or bad input). An operator must act before the node can start.
    pub fn is_corruption(&self) -> bool {
        matches!(self, WalError::Corrupt { .. })
    }

    pub(crate) fn io(
        op: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(io::Error) -> WalError {
        let path = path.into();
        move |source| WalError::Io { op, path, source }
    }

    pub(crate) fn corrupt(
        file: impl Into<PathBuf>,
        offset: u64,
        why: impl Into<String>,
    ) -> WalError {
        WalError::Corrupt {
            file: file.into(),
            offset,
            why: why.into(),
        }
    }
}
