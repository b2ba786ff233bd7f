//! The bully algorithm (Garcia-Molina, 1982), as a foil for Raft: the highest live id that a
//! node can reach becomes coordinator. A node that cannot reach its coordinator starts an
//! election: it sends ELECTION to every higher id; any higher node that answers takes the
//! election over; a node that hears no answer from above declares itself coordinator and
//! sends COORDINATOR to everyone it reaches.
//!
//! It replays the same steps as the Raft cluster, seeing the same crashes, pauses and
//! partitions, and shows what Raft's terms and majorities prevent: under a partition each
//! side crowns its own coordinator, so two nodes act as coordinator at once, and nothing
//! like a term tells their writes apart.

use std::collections::BTreeMap;

use serde::Serialize;
use tenure_core::types::NodeId;

/// One node of the bully model.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BullyNode {
    /// Its id (the algorithm's rank).
    pub id: NodeId,
    /// Running and able to answer (not crashed, not paused).
    pub up: bool,
    /// The coordinator it believes in.
    pub coordinator: Option<NodeId>,
}

/// The bully model of the whole cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Bully {
    /// Every node, by id.
    pub nodes: BTreeMap<NodeId, BullyNode>,
    /// What happened, in words.
    pub log: Vec<String>,
}

impl Bully {
    /// `n` nodes, all up, none yet with a coordinator.
    pub fn new(n: u64) -> Bully {
        let nodes = (1..=n)
            .map(|id| {
                (
                    id,
                    BullyNode {
                        id,
                        up: true,
                        coordinator: None,
                    },
                )
            })
            .collect();
        Bully {
            nodes,
            log: Vec::new(),
        }
    }

    /// Nodes that believe they are coordinator (and are up to act on it).
    pub fn coordinators(&self) -> Vec<NodeId> {
        self.nodes
            .values()
            .filter(|n| n.up && n.coordinator == Some(n.id))
            .map(|n| n.id)
            .collect()
    }

    /// Marks a node up or down (crash, pause, restart, resume). A node that comes back
    /// forgets its coordinator and runs an election at the next round: that is how the
    /// bully takes over again.
    pub fn set_up(&mut self, id: NodeId, up: bool) {
        if let Some(n) = self.nodes.get_mut(&id) {
            if n.up != up {
                n.up = up;
                if up {
                    n.coordinator = None;
                }
            }
        }
    }

    /// One round of failure detection: every up node whose coordinator it cannot reach
    /// (or who has none) starts an election, lowest id first. `reach(a, b)` says whether a
    /// message from `a` gets to `b` now.
    pub fn round(&mut self, reach: &dyn Fn(NodeId, NodeId) -> bool) {
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        for id in ids {
            let node = &self.nodes[&id];
            if !node.up {
                continue;
            }
            let lost = match node.coordinator {
                None => true,
                Some(c) if c == id => false,
                Some(c) => !(self.nodes[&c].up && reach(id, c) && reach(c, id)),
            };
            if lost {
                self.elect(id, reach);
            }
        }
    }

    fn elect(&mut self, starter: NodeId, reach: &dyn Fn(NodeId, NodeId) -> bool) {
        let answers = |bully: &Bully, from: NodeId| -> Vec<NodeId> {
            bully
                .nodes
                .values()
                .filter(|n| n.id > from && n.up && reach(from, n.id) && reach(n.id, from))
                .map(|n| n.id)
                .collect()
        };
        let mut at = starter;
        loop {
            let higher = answers(self, at);
            match higher.last() {
                None => break,
                Some(&top) => {
                    self.log.push(format!(
                        "bully: node {at} sends ELECTION to {}; {} answer{} OK, node {top} takes over",
                        list(&higher),
                        list(&higher),
                        if higher.len() == 1 { "s" } else { "" }
                    ));
                    at = top;
                }
            }
        }
        let reached: Vec<NodeId> = self
            .nodes
            .values()
            .filter(|n| n.id != at && n.up && reach(at, n.id))
            .map(|n| n.id)
            .collect();
        self.log.push(format!(
            "bully: no higher node answers node {at}: it is coordinator and tells {}",
            if reached.is_empty() {
                "nobody (it reaches no one)".to_string()
            } else {
                list(&reached)
            }
        ));
        if let Some(n) = self.nodes.get_mut(&at) {
            n.coordinator = Some(at);
        }
        for id in reached {
            if let Some(n) = self.nodes.get_mut(&id) {
                n.coordinator = Some(at);
            }
        }
        let coordinators = self.coordinators();
        if coordinators.len() > 1 {
            self.log.push(format!(
                "bully: {} coordinators at once: nodes {}",
                coordinators.len(),
                list(&coordinators)
            ));
        }
    }
}

/// "1, 2 and 3".
pub(crate) fn list(ids: &[NodeId]) -> String {
    match ids {
        [] => "none".to_string(),
        [one] => one.to_string(),
        [init @ .., last] => {
            let init: Vec<String> = init.iter().map(|i| i.to_string()).collect();
            format!("{} and {last}", init.join(", "))
        }
    }
}
