//! A node's own background snapshot finishes after the node accepted a leader's snapshot at or
//! past its index, and before that snapshot's Ready was persisted: on the server's real
//! write-ahead log, the log recorded the own snapshot while the node dropped it, and the
//! driver thread died on "the log and the node disagree". Here three nodes run on
//! `FileStorage` directories, and the crossing is made on purpose: the follower steps the
//! leader's InstallSnapshot, then its own snapshot is finished, then the Ready is persisted —
//! the server's order (inputs, then finished snapshots, then the Ready).

use std::collections::{BTreeMap, BTreeSet};

use tenure_core::config::Config;
use tenure_core::message::{Body, Message};
use tenure_core::node::{Node, Role, SnapshotImage};
use tenure_core::sm::Command;
use tenure_core::storage::{BackgroundSnapshots, SnapshotWriter, Storage};
use tenure_core::types::NodeId;
use tenure_driver::finish_background_snapshot;
use tenure_wal::{FileSnapshotWriter, FileStorage, WalOptions};

const THRESHOLD: u64 = 20;

struct Cluster {
    dir: tempfile::TempDir,
    configs: BTreeMap<NodeId, Config>,
    nodes: BTreeMap<NodeId, Node>,
    disks: BTreeMap<NodeId, FileStorage>,
    inflight: Vec<Message>,
    isolated: BTreeSet<NodeId>,
    /// Nodes whose background snapshots are held back (written, not finished) by the test.
    held: BTreeSet<NodeId>,
    pending: BTreeMap<NodeId, (SnapshotImage, FileSnapshotWriter)>,
}

impl Cluster {
    fn new() -> Cluster {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let ids = vec![1, 2, 3];
        let mut c = Cluster {
            dir,
            configs: BTreeMap::new(),
            nodes: BTreeMap::new(),
            disks: BTreeMap::new(),
            inflight: Vec::new(),
            isolated: BTreeSet::new(),
            held: BTreeSet::new(),
            pending: BTreeMap::new(),
        };
        for id in &ids {
            let mut cfg = Config::new(*id, ids.clone());
            cfg.snapshot_in_background = true;
            cfg.snapshot_threshold_entries = THRESHOLD;
            cfg.snapshot_grows_with_state = false;
            c.configs.insert(*id, cfg);
            c.start(*id);
        }
        c
    }

    /// Open `id`'s directory and build its node from what it recovers.
    fn start(&mut self, id: NodeId) {
        let path = self.dir.path().join(format!("node-{id}"));
        std::fs::create_dir_all(&path).expect("the node's directory");
        let mut disk = FileStorage::open(&path, WalOptions::default()).expect("open the log");
        let recovered = disk.recover().expect("recover the log");
        let node = Node::new(self.configs[&id].clone(), recovered).expect("a valid node");
        self.nodes.insert(id, node);
        self.disks.insert(id, disk);
    }

    /// Crash `id` and start it again from its directory.
    fn restart(&mut self, id: NodeId) {
        self.nodes.remove(&id);
        self.pending.remove(&id);
        self.disks.remove(&id);
        self.start(id);
    }

    /// Persist, advance and collect every node's Ready; finish the background snapshots of
    /// nodes not held back, as the server's driver does.
    fn flush(&mut self) {
        for id in self.nodes.keys().copied().collect::<Vec<_>>() {
            self.flush_node(id);
        }
    }

    fn flush_node(&mut self, id: NodeId) {
        let node = self.nodes.get_mut(&id).expect("a node");
        let disk = self.disks.get_mut(&id).expect("a disk");
        while node.has_ready() {
            let mut ready = node.ready();
            disk.persist(
                ready.persist.hard_state.as_ref(),
                ready.persist.snapshot.as_ref(),
                &ready.persist.entries,
            )
            .expect("persist");
            node.advance();
            self.inflight.append(&mut ready.then.messages);
            if let Some(image) = ready.then.snapshot_image.take() {
                let writer = disk.snapshot_writer();
                self.pending.insert(id, (image, writer));
            }
        }
        if !self.held.contains(&id) {
            self.finish_snapshot(id);
        }
    }

    /// Write `id`'s background snapshot and hand it to the node and the log. Returns whether
    /// the node adopted it (`None`: none under way).
    fn finish_snapshot(&mut self, id: NodeId) -> Option<bool> {
        let (image, writer) = self.pending.remove(&id)?;
        let snapshot = image.encode();
        let written = writer.write(&snapshot).expect("write the snapshot file");
        let node = self.nodes.get_mut(&id).expect("a node");
        let disk = self.disks.get_mut(&id).expect("a disk");
        let adopted =
            finish_background_snapshot(node, disk, snapshot, written).expect("record or discard");
        Some(adopted)
    }

    fn deliver_all(&mut self) {
        for _ in 0..10_000 {
            self.flush();
            if self.inflight.is_empty() {
                return;
            }
            for m in std::mem::take(&mut self.inflight) {
                if self.isolated.contains(&m.from) || self.isolated.contains(&m.to) {
                    continue;
                }
                if let Some(node) = self.nodes.get_mut(&m.to) {
                    node.step(m).expect("a valid message");
                }
            }
        }
        panic!("the network never went quiet");
    }

    fn tick(&mut self) {
        for node in self.nodes.values_mut() {
            node.tick();
        }
        self.deliver_all();
    }

    fn elect(&mut self) -> NodeId {
        for _ in 0..1_000 {
            self.tick();
            let leaders: Vec<NodeId> = self
                .nodes
                .iter()
                .filter(|(_, n)| n.status().role == Role::Leader)
                .map(|(id, _)| *id)
                .collect();
            if let [leader] = leaders[..] {
                let st = self.nodes[&leader].status();
                if st.commit > 0 && st.applied >= st.commit {
                    return leader;
                }
            }
        }
        panic!("no leader elected");
    }

    fn grant(&mut self, leader: NodeId, n: u64) {
        for _ in 0..n {
            self.nodes
                .get_mut(&leader)
                .expect("the leader")
                .propose(Command::Grant { ttl_ticks: 100_000 })
                .expect("the leader accepts");
            self.deliver_all();
        }
    }
}

#[test]
fn an_own_snapshot_finishing_after_an_unpersisted_install_is_discarded_by_node_and_log() {
    let mut c = Cluster::new();
    let leader = c.elect();
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");
    c.held.insert(follower);
    c.grant(leader, THRESHOLD);
    let (own, _) = c
        .pending
        .get(&follower)
        .expect("the follower started a snapshot");
    let own_index = own.index();

    // Cut off, the follower falls behind a leader that compacts past its own snapshot.
    c.isolated.insert(follower);
    c.grant(leader, 3 * THRESHOLD);
    let leader_snapshot = c.nodes[&leader].snapshot_meta();
    assert!(
        leader_snapshot.0 > own_index,
        "{leader_snapshot:?} vs {own_index}"
    );

    // Back in touch: the follower steps the leader's InstallSnapshot and, before its Ready is
    // persisted, its own snapshot finishes.
    c.isolated.clear();
    let mut crossed = false;
    for _ in 0..200 {
        for node in c.nodes.values_mut() {
            node.tick();
        }
        for id in c.nodes.keys().copied().collect::<Vec<_>>() {
            if id != follower {
                c.flush_node(id);
            }
        }
        for m in std::mem::take(&mut c.inflight) {
            let install = matches!(m.body, Body::InstallSnapshot { .. }) && m.to == follower;
            c.nodes
                .get_mut(&m.to)
                .expect("a node")
                .step(m)
                .expect("valid");
            if install && !crossed {
                assert_eq!(c.nodes[&follower].snapshot_meta(), leader_snapshot);
                let adopted = c.finish_snapshot(follower).expect("still under way");
                assert!(!adopted, "the node drops a snapshot its install overtook");
                crossed = true;
            }
        }
        c.flush_node(follower);
        if crossed {
            break;
        }
    }
    assert!(crossed, "the leader never sent an InstallSnapshot");
    c.held.clear();
    c.deliver_all();
    let digest = c.nodes[&leader].state_machine().digest();
    assert_eq!(c.nodes[&follower].state_machine().digest(), digest);

    // What the log holds agrees: a restart finds the leader's snapshot, and the same state.
    c.restart(follower);
    assert_eq!(c.nodes[&follower].snapshot_meta(), leader_snapshot);
    c.deliver_all();
    assert_eq!(c.nodes[&follower].state_machine().digest(), digest);

    // The follower's next snapshot of its own is recorded as usual.
    c.grant(leader, 2 * THRESHOLD);
    assert!(
        c.nodes[&follower].snapshot_meta().0 > leader_snapshot.0,
        "the follower compacted past the install"
    );
}
