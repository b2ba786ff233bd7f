//! The Ready pipeline: a [`Node`], its [`DriverCore`], and the order in which each [`Ready`]
//! is written, sent, made durable, advanced and answered. The server's driver thread and the
//! simulator run this same code; they differ only in the storage and network under it and in
//! *when* a write's sync completes (at once on the server; at a scheduled event, or never
//! because of a crash, in the simulator). So a slip in the IO order — a vote that leaves
//! before its persist, an answer before its fsync, a compaction before its snapshot is
//! durable — is a slip the simulator runs into.
//!
//! One Ready goes through two calls:
//!
//! 1. [`Pipeline::write`] takes it, hands its [`Persist`] half to the storage *without* the
//!    fsync, and — when the Ready qualifies (a leader appending entries of its own term, see
//!    [`Node::early_appends`]) and the pipeline replicates early — sends the leader's
//!    AppendEntries at once, so that followers store the entries while this node's disk
//!    does. Everything else in the Ready waits.
//! 2. [`Pipeline::sync`] makes the write durable (when it needs it); then
//!    [`Pipeline::advance`] calls [`Node::advance`], sends the rest of the messages and lets
//!    the driver core decide the answers ([`Pipeline::drain`] hands them out). What is left
//!    for the driver (the snapshot to take in the background, the leader changes for
//!    watchers) comes back.
//!
//! Between the two, a driver whose sync runs asynchronously may step a leader's
//! acknowledgements and ticks ([`Pipeline::step_while_syncing`],
//! [`Pipeline::tick_while_syncing`]); a crash in between simply drops the pipeline, and the
//! storage decides what survived. Inputs otherwise go to the node and the core directly
//! ([`Pipeline::parts`]), followed by [`Pipeline::observe`].

use tenure_core::message::Message;
use tenure_core::node::{AfterPersist, Node, Persist, Ready, SnapshotImage, StepError};
use tenure_core::sm::LeaderChange;
use tenure_core::storage::{BackgroundSnapshots, Storage};
use tenure_core::types::{Index, Snapshot, Term};

use crate::{DriverBugs, DriverCore, Micros, Output};

/// A Ready written to storage whose sync and advance are still to come.
#[derive(Clone, Debug)]
struct Written {
    must_sync: bool,
    then: AfterPersist,
}

/// What [`Pipeline::write`] did with a Ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wrote {
    /// The write needs an fsync before the Ready may go on (false when only the commit
    /// index changed).
    pub must_sync: bool,
    /// A leader's AppendEntries already left, ahead of the sync.
    pub replicating: bool,
}

/// What is left of a Ready for the driver once the pipeline is done with it.
#[derive(Debug, Default)]
pub struct Finished {
    /// The snapshot the Ready persisted (a leader's that this node installed, or its own
    /// taken inside its step), as `(index, term)`.
    pub snapshot_persisted: Option<(Index, Term)>,
    /// A snapshot to encode and write in the background ([`Pipeline::finish_snapshot`]
    /// once written).
    pub snapshot_image: Option<SnapshotImage>,
    /// Leader changes applied, for watchers.
    pub leader_changes: Vec<LeaderChange>,
    /// What the Ready applied, for a driver that checks it (the simulator).
    pub applied: Vec<tenure_core::node::Applied>,
}

/// A node, its driver core and the Ready written but not yet durable; see the module docs.
#[derive(Clone, Debug)]
pub struct Pipeline<P, K> {
    node: Node,
    core: DriverCore<P, K>,
    /// Send a qualifying Ready's AppendEntries between its write and its sync.
    replicate_early: bool,
    written: Option<Written>,
    ticks: u64,
}

impl<P, K> Pipeline<P, K> {
    /// A pipeline around `node`, whose driver clock reads `now_us`.
    pub fn new(node: Node, now_us: Micros, replicate_early: bool, bugs: DriverBugs) -> Self {
        let core = DriverCore::new(&node.status(), now_us, bugs);
        Pipeline {
            node,
            core,
            replicate_early,
            written: None,
            ticks: 0,
        }
    }

    /// The node.
    pub fn node(&self) -> &Node {
        &self.node
    }

    /// The node and the driver core, for inputs ([`DriverCore::propose`] and its kind take
    /// both). Follow inputs with [`Pipeline::observe`].
    pub fn parts(&mut self) -> (&mut Node, &mut DriverCore<P, K>) {
        (&mut self.node, &mut self.core)
    }

    /// The answers and events decided so far ([`DriverCore::drain`]).
    pub fn drain(&mut self) -> Output<P, K> {
        self.core.drain()
    }

    /// Keepalives unanswered for too long are refused ([`DriverCore::expire_keepalives`]).
    pub fn expire_keepalives(&mut self, now_us: Micros) {
        self.core.expire_keepalives(now_us);
    }

    /// The node stops: whatever waits is answered indeterminate ([`DriverCore::stop`]).
    pub fn stop(&mut self) {
        self.core.stop();
    }

    /// Whether a written Ready awaits [`Pipeline::sync`] and [`Pipeline::advance`]: the node
    /// takes no input but [`Pipeline::step_while_syncing`] and
    /// [`Pipeline::tick_while_syncing`].
    pub fn syncing(&self) -> bool {
        self.written.is_some()
    }

    /// The node, for inputs (ticks, messages, transfers, membership changes); follow them
    /// with [`Pipeline::observe`]. Its Ready is the pipeline's to take.
    pub fn node_mut(&mut self) -> &mut Node {
        &mut self.node
    }

    /// Ticks the node until it has ticked `due` times since the pipeline was built,
    /// observing after each tick: a driver ticks from a monotonic clock, and one that fell
    /// behind (or a process that was stopped) catches up on every tick it owes before it
    /// judges anything by its lease. Returns how many ticks it made.
    pub fn tick_to(&mut self, due: u64, now_us: Micros) -> u64 {
        let owed = due.saturating_sub(self.ticks);
        for _ in 0..owed {
            self.node.tick();
            self.core.observe(&self.node, now_us);
        }
        self.ticks = self.ticks.max(due);
        owed
    }

    /// After any input: let the driver core compare the node's status with the last one it
    /// saw (leadership events, proposals a lost leadership can no longer commit, …).
    pub fn observe(&mut self, now_us: Micros) {
        self.core.observe(&self.node, now_us);
    }

    /// Step 1: take the next Ready, if any, and write its persistent half without an fsync
    /// (`writing` sees it first, with the node as it was before). A qualifying leader's
    /// AppendEntries go to `send` now, when the pipeline replicates early; everything else
    /// waits for [`Pipeline::advance`]. `None` when there is no Ready.
    ///
    /// A storage error leaves the write in an unknown state: the driver must stop the node.
    pub fn write<S: Storage>(
        &mut self,
        storage: &mut S,
        send: &mut impl FnMut(Message),
        writing: impl FnOnce(&Node, &Persist),
    ) -> Result<Option<Wrote>, S::Error> {
        assert!(
            self.written.is_none(),
            "node {}: a Ready taken before the last one was made durable",
            self.node.id()
        );
        if !self.node.has_ready() {
            return Ok(None);
        }
        let mut ready = self.node.ready();
        let early = if self.replicate_early {
            self.node.early_appends(&mut ready)
        } else {
            None
        };
        let Ready { persist, then } = ready;
        writing(&self.node, &persist);
        let Persist {
            hard_state,
            must_sync,
            snapshot,
            entries,
        } = &persist;
        if !persist.is_empty() {
            storage.write(hard_state.as_ref(), snapshot.as_ref(), entries)?;
        }
        let replicating = early.is_some();
        for m in early.into_iter().flatten() {
            send(m);
        }
        self.written = Some(Written {
            must_sync: *must_sync,
            then,
        });
        Ok(Some(Wrote {
            must_sync: *must_sync,
            replicating,
        }))
    }

    /// Make the Ready written last durable: sync the storage if the write needs it. A
    /// storage error leaves the node un-advanced and nothing sent: the driver must stop it.
    pub fn sync<S: Storage>(&mut self, storage: &mut S) -> Result<(), S::Error> {
        let written = self.written.as_mut().expect("sync without a Ready written");
        if written.must_sync {
            storage.sync()?;
            written.must_sync = false;
        }
        Ok(())
    }

    /// Steps 2 to 4 of the Ready written and synced last: advance the node, send the
    /// Ready's messages and decide its answers (handed out by [`Pipeline::drain`]). Returns
    /// what is left for the driver.
    pub fn advance(&mut self, now_us: Micros, send: &mut impl FnMut(Message)) -> Finished {
        let written = self
            .written
            .take()
            .expect("advance without a Ready written");
        assert!(
            !written.must_sync,
            "node {}: advance before the Ready's sync",
            self.node.id()
        );
        let mut then = written.then;
        self.node.advance();
        for m in std::mem::take(&mut then.messages) {
            send(m);
        }
        let snapshot_image = then.snapshot_image.take();
        self.core.on_ready(&self.node, now_us, &then);
        Finished {
            snapshot_persisted: then.snapshot_installed,
            snapshot_image,
            leader_changes: then.leader_changes,
            applied: then.applied,
        }
    }

    /// While a write syncs: a leader counts its followers' acknowledgements now (and the
    /// AppendEntries they prompt leave now); `Ok(false)` for any other message, which the
    /// driver holds until the Ready is durable. See [`Node::step_while_persisting`].
    pub fn step_while_syncing(
        &mut self,
        message: Message,
        send: &mut impl FnMut(Message),
    ) -> Result<bool, StepError> {
        let stepped = self.node.step_while_persisting(message)?;
        for m in self.node.take_early_appends() {
            send(m);
        }
        Ok(stepped)
    }

    /// While a write syncs: one tick of the node's clock (a leader's AppendEntries it
    /// prompts leave now). See [`Node::tick_while_persisting`].
    pub fn tick_while_syncing(&mut self, send: &mut impl FnMut(Message)) {
        self.node.tick_while_persisting();
        self.ticks += 1;
        for m in self.node.take_early_appends() {
            send(m);
        }
    }

    /// A background snapshot from [`Finished::snapshot_image`], written by `storage`'s
    /// writer as `written`: the node decides whether it is still current, and the storage
    /// records or discards it accordingly ([`crate::finish_background_snapshot`]). Returns
    /// whether it was adopted. A storage error means the node must stop.
    pub fn finish_snapshot<S: BackgroundSnapshots>(
        &mut self,
        storage: &mut S,
        snapshot: Snapshot,
        written: S::Written,
        now_us: Micros,
    ) -> Result<bool, S::Error> {
        let adopted =
            crate::finish_background_snapshot(&mut self.node, storage, snapshot, written)?;
        self.core.observe(&self.node, now_us);
        Ok(adopted)
    }

    /// The background snapshot could not be written: the node takes another at its next
    /// snapshot point.
    pub fn snapshot_failed(&mut self) {
        self.node.snapshot_taken(None);
    }
}
