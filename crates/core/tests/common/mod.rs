//! A tiny in-memory cluster for the core's tests: perfect or lossy delivery, no clocks,
//! disks that keep exactly what the driver persisted.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

use tenure_core::bugs::InjectedBugs;
use tenure_core::config::Config;
use tenure_core::message::Message;
use tenure_core::node::{Applied, KeepaliveAck, Node, Role};
use tenure_core::sm::LeaderChange;
use tenure_core::types::{Entry, HardState, Index, NodeId, Payload, Recovered, Term};

/// No-op entries with the given terms, the first at `first`.
pub fn noops(first: Index, terms: &[Term]) -> Vec<Entry> {
    terms
        .iter()
        .enumerate()
        .map(|(k, t)| Entry {
            term: *t,
            index: first + k as Index,
            payload: Payload::Noop,
        })
        .collect()
}

/// A disk that holds `term`, `vote`, `commit` and `entries`, and no snapshot.
pub fn disk_with(
    term: Term,
    vote: Option<NodeId>,
    commit: Index,
    entries: Vec<Entry>,
) -> Recovered {
    Recovered {
        hard_state: HardState { term, vote, commit },
        snapshot: None,
        entries,
    }
}

/// What a node's disk holds.
#[derive(Clone, Debug, Default)]
pub struct Disk {
    pub recovered: Recovered,
}

impl Disk {
    /// Store what a `Ready` asks to persist, as a driver would before sending its messages.
    pub fn persist(&mut self, persist: &tenure_core::node::Persist) {
        let r = &mut self.recovered;
        if let Some(s) = &persist.snapshot {
            let keep: Vec<Entry> = match r.entries.iter().find(|e| e.index == s.index) {
                Some(e) if e.term == s.term => r
                    .entries
                    .iter()
                    .filter(|e| e.index > s.index)
                    .cloned()
                    .collect(),
                _ => Vec::new(),
            };
            r.entries = keep;
            r.snapshot = Some(s.clone());
        }
        if let Some(first) = persist.entries.first() {
            r.entries.retain(|e| e.index < first.index);
            r.entries.extend(persist.entries.iter().cloned());
        }
        if let Some(hs) = persist.hard_state {
            r.hard_state = hs;
        }
    }
}

pub struct Cluster {
    pub nodes: BTreeMap<NodeId, Node>,
    pub disks: BTreeMap<NodeId, Disk>,
    pub configs: BTreeMap<NodeId, Config>,
    pub inflight: Vec<Message>,
    /// Pairs (from, to) whose messages are dropped.
    pub cut: BTreeSet<(NodeId, NodeId)>,
    /// Messages this returns true for are lost in flight (a message-kind partition).
    pub lose: fn(&Message) -> bool,
    pub applied: BTreeMap<NodeId, Vec<Applied>>,
    pub acks: BTreeMap<NodeId, Vec<KeepaliveAck>>,
    pub changes: BTreeMap<NodeId, Vec<LeaderChange>>,
    pub reads: BTreeMap<NodeId, Vec<tenure_core::read::ReadResult>>,
    /// Background snapshots handed out (`Config::snapshot_in_background`) and not yet
    /// reported taken: see [`Cluster::take_snapshots`].
    pub images: BTreeMap<NodeId, Vec<tenure_core::node::SnapshotImage>>,
    /// Known bugs every node (and every restart) runs with.
    pub bugs: InjectedBugs,
}

impl Cluster {
    pub fn new(n: u64) -> Cluster {
        Cluster::with_config(n, |_| {})
    }

    pub fn with_config(n: u64, tweak: impl Fn(&mut Config)) -> Cluster {
        Cluster::with_bugs(n, InjectedBugs::default(), tweak)
    }

    /// A cluster whose nodes run with `bugs` switched on.
    pub fn with_bugs(n: u64, bugs: InjectedBugs, tweak: impl Fn(&mut Config)) -> Cluster {
        let ids: Vec<NodeId> = (1..=n).collect();
        let mut c = Cluster {
            nodes: BTreeMap::new(),
            disks: BTreeMap::new(),
            configs: BTreeMap::new(),
            inflight: Vec::new(),
            cut: BTreeSet::new(),
            lose: |_| false,
            applied: BTreeMap::new(),
            acks: BTreeMap::new(),
            changes: BTreeMap::new(),
            reads: BTreeMap::new(),
            images: BTreeMap::new(),
            bugs,
        };
        for id in &ids {
            let mut cfg = Config::new(*id, ids.clone());
            tweak(&mut cfg);
            c.add_node(cfg);
        }
        c
    }

    pub fn add_node(&mut self, cfg: Config) {
        let id = cfg.id;
        let node = Node::with_injected_bugs(cfg.clone(), Recovered::default(), self.bugs)
            .expect("valid config");
        self.nodes.insert(id, node);
        self.disks.insert(id, Disk::default());
        self.configs.insert(id, cfg);
    }

    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[&id]
    }

    pub fn node_mut(&mut self, id: NodeId) -> &mut Node {
        self.nodes.get_mut(&id).expect("node exists")
    }

    /// Drive every node's ready loop, collecting messages.
    pub fn flush(&mut self) {
        for (id, node) in self.nodes.iter_mut() {
            while node.has_ready() {
                let mut ready = node.ready();
                self.disks
                    .get_mut(id)
                    .expect("disk")
                    .persist(&ready.persist);
                node.advance();
                if let Some(image) = ready.then.snapshot_image.take() {
                    self.images.entry(*id).or_default().push(image);
                }
                self.inflight.extend(ready.then.messages);
                self.applied
                    .entry(*id)
                    .or_default()
                    .extend(ready.then.applied);
                self.acks
                    .entry(*id)
                    .or_default()
                    .extend(ready.then.keepalive_acks);
                self.changes
                    .entry(*id)
                    .or_default()
                    .extend(ready.then.leader_changes);
                self.reads.entry(*id).or_default().extend(ready.then.reads);
                node.check_invariants();
            }
        }
    }

    /// Deliver messages until the network is quiet.
    pub fn deliver_all(&mut self) {
        for _ in 0..10_000 {
            self.flush();
            if self.inflight.is_empty() {
                return;
            }
            let msgs = std::mem::take(&mut self.inflight);
            for m in msgs {
                if self.cut.contains(&(m.from, m.to)) || (self.lose)(&m) {
                    continue;
                }
                if let Some(node) = self.nodes.get_mut(&m.to) {
                    node.step(m).expect("valid message");
                }
            }
        }
        panic!("network never went quiet");
    }

    /// Tick every node once, then deliver everything.
    pub fn tick(&mut self) {
        for node in self.nodes.values_mut() {
            node.tick();
        }
        self.deliver_all();
    }

    pub fn ticks(&mut self, n: u64) {
        for _ in 0..n {
            self.tick();
        }
    }

    pub fn leaders(&self) -> Vec<NodeId> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.status().role == Role::Leader)
            .map(|(id, _)| *id)
            .collect()
    }

    /// Tick until exactly one leader exists (bounded).
    pub fn elect(&mut self) -> NodeId {
        for _ in 0..500 {
            self.tick();
            let leaders = self.leaders();
            if leaders.len() == 1 {
                let l = leaders[0];
                let applied = self.node(l).status().applied;
                if applied >= self.node(l).status().commit && self.node(l).status().commit > 0 {
                    return l;
                }
            }
        }
        panic!(
            "no leader elected: {:?}",
            self.nodes.values().map(|n| n.status()).collect::<Vec<_>>()
        );
    }

    /// Isolate a node in both directions.
    pub fn isolate(&mut self, id: NodeId) {
        for other in self.nodes.keys().copied().collect::<Vec<_>>() {
            if other != id {
                self.cut.insert((id, other));
                self.cut.insert((other, id));
            }
        }
    }

    pub fn heal(&mut self) {
        self.cut.clear();
    }

    /// Finish `id`'s background snapshots as a driver does: encode each, record it on the
    /// disk (dropped if the disk's snapshot is already at or past it), report it to the node.
    /// Returns what the node answered for each.
    pub fn take_snapshots(&mut self, id: NodeId) -> Vec<bool> {
        let images = self.images.remove(&id).unwrap_or_default();
        let mut adopted = Vec::new();
        for image in images {
            let snapshot = image.encode();
            let disk = self.disks.get_mut(&id).expect("disk");
            let stored = disk.recovered.snapshot.as_ref().map_or(0, |s| s.index);
            let recorded = snapshot.index > stored;
            if recorded {
                disk.persist(&tenure_core::node::Persist {
                    snapshot: Some(snapshot.clone()),
                    ..Default::default()
                });
            }
            let taken = self.node_mut(id).snapshot_taken(Some(snapshot));
            assert_eq!(recorded, taken, "node {id}: disk and node disagree");
            adopted.push(taken);
        }
        self.flush();
        adopted
    }

    /// Crash a node and restart it from its disk.
    pub fn restart(&mut self, id: NodeId) {
        let cfg = self.configs[&id].clone();
        let recovered = self.disks[&id].recovered.clone();
        self.inflight.retain(|m| m.to != id && m.from != id);
        let node = Node::with_injected_bugs(cfg, recovered, self.bugs).expect("restart from disk");
        self.nodes.insert(id, node);
        // A snapshot being taken dies with the process.
        self.images.remove(&id);
    }
}
