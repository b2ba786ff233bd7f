//! A background snapshot joins the node and its storage: one function for the server and the
//! simulator, so that both take the same decision in the same order.
//!
//! The node alone decides whether its own snapshot is still current: it may have accepted a
//! leader's snapshot at or past the same index in a step whose Ready is not yet persisted, so
//! that the storage cannot know of it. Asking the storage first let the two disagree (the
//! log recorded a snapshot the node had just dropped). The storage now follows the node's
//! answer: it records the snapshot the node adopted, and removes the one it did not.

use tenure_core::node::Node;
use tenure_core::storage::BackgroundSnapshots;
use tenure_core::types::Snapshot;

/// Hand a background snapshot, made durable by `storage`'s writer as `written`, to the node,
/// then record it in `storage` if the node adopted it, or discard it there if not. Returns
/// whether it was adopted. A storage error leaves the node ahead of its storage (it has
/// compacted its in-memory log): the caller must stop the node, as after any failed persist.
///
/// The node's in-memory compaction before the record is safe: the record happens in the same
/// call, before the driver handles any other input or Ready, and a crash in between finds
/// the storage as it was before the snapshot, with every entry it covers.
pub fn finish_background_snapshot<S: BackgroundSnapshots>(
    node: &mut Node,
    storage: &mut S,
    snapshot: Snapshot,
    written: S::Written,
) -> Result<bool, S::Error> {
    if node.snapshot_taken(Some(snapshot)) {
        storage.record_snapshot(written)?;
        Ok(true)
    } else {
        storage.discard_snapshot(written)?;
        Ok(false)
    }
}
