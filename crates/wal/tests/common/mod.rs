//! What several of the log's test files share.

use tenure_wal::WalOptions;

/// Limits small enough that rotation, compaction and split persists happen constantly.
pub fn tiny() -> WalOptions {
    WalOptions {
        segment_bytes_max: 2048,
        record_bytes_max: 16 * 1024,
        snapshot_bytes_max: 1 << 20,
        ..WalOptions::default()
    }
}
