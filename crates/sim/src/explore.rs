//! A bounded model checker over the real core: every interleaving of a small cluster, not a
//! sample of them.
//!
//! Three voters and two clients, each node driven by the very [`Pipeline`] the server runs,
//! over a disk that loses whatever was not synced when its node crashes. From a start where
//! a leader is elected (reached by a fixed prefix), breadth-first search takes, at every
//! state, every choice the world has:
//!
//! - **time**: one tick of every node's clock (the clocks agree: drift is the simulator's
//!   business, interleavings are this one's);
//! - **the network**: deliver any message in flight (its copy stays when a duplication is
//!   left in the budget); a message never delivered is a message lost;
//! - **a leader's fsync** when its AppendEntries left before it (pipelined persistence), and
//!   acknowledgements it counts meanwhile;
//! - **crashes** that lose unsynced writes, and restarts from what the disk kept;
//! - **clients**: grant a session, campaign, renew it, write with the token it holds, to any
//!   node; give up on an unanswered request and retry it with the same request id;
//! - **operators**: one leadership transfer and one membership change (node 3 removed);
//! - **fast election** (on in every node, as by default): a node's connection to a peer
//!   closes, whether the peer's process is down or not (a forged reset); a node dials a
//!   peer that is down and the refusal, stamped with the node's follow epoch as the dial
//!   starts, waits to be handed to it (now, or after anything else has happened).
//!
//! Sessions expire on their own: their TTL is a few ticks. States are merged by a
//! fingerprint of everything that decides the future (nodes, disks, the messages in flight,
//! clients, budgets); the depth bound counts choices.
//!
//! At every state it checks what the simulator's checkers check: the node's own invariants,
//! election safety, log matching and leader completeness against every entry ever seen
//! committed, state machine safety (one digest per applied index), fencing (no write accepted
//! with a token below one already handed out before it in the log), lease safety (while a
//! leader's lease holds, nobody leads a later term), holder safety (two clients never both
//! believe they lead, by the holder's own rule), exact outcomes (no definite failure for
//! an entry that commits), and fast election's premise (a node drops its vote refusal for a
//! leader only when the process that led that term is no longer running).
//!
//! Why not `stateright`: its checker wants `Hash` on the state, and the core's state is
//! hashed here by a fingerprint of its `Debug` form (the core derives no `Hash`, and should
//! not for this); the search itself is fifty lines, and keeping it here keeps the suite's
//! dependencies to what the product uses.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use tenure_core::config::Config;
use tenure_core::event::NodeEvent;
use tenure_core::message::Message;
use tenure_core::node::{Persist, Role};
use tenure_core::sm::{Command, RequestId, Response, SessionId};
use tenure_core::storage::{apply_to_image, Storage};
use tenure_core::types::{HardState, Index, NodeId, Recovered, Snapshot, Term};
use tenure_driver::{DriverBugs, Failure, KeepaliveOutcome, Outcome, Pipeline};

/// The election the clients contend for.
const ELECTION: &str = "e";
/// The session TTL, in ticks: short enough that a session expires within the bound.
const TTL: u64 = 4;
/// The holder's margin in ticks (no drift between the model's clocks; one tick of
/// scheduling allowance and one for the rounding of its own tick count).
const HOLDER_MARGIN: u64 = 2;
/// Microseconds per tick for the driver core's clock.
const TICK_US: u64 = 10_000;

/// How far to explore.
#[derive(Clone, Debug)]
pub struct Bounds {
    /// Most choices after the start.
    pub depth: usize,
    /// Crashes (each followed by a restart choice).
    pub crashes: u8,
    /// Client requests, keepalives and give-ups, all clients together.
    pub client_ops: u8,
    /// Duplicated deliveries.
    pub duplicates: u8,
    /// Lost messages.
    pub losses: u8,
    /// Leadership transfers.
    pub transfers: u8,
    /// Membership changes.
    pub membership_changes: u8,
    /// Connection closes (fast election), of a live peer's connection or a dead one's.
    pub closes: u8,
    /// Refused dials to a peer that is down (fast election).
    pub dials: u8,
    /// Stop after this many distinct states (the figures then say so).
    pub max_states: usize,
}

impl Bounds {
    /// The run in the test suite: well under two minutes in a debug build.
    pub fn suite() -> Bounds {
        Bounds {
            depth: 6,
            crashes: 1,
            client_ops: 4,
            duplicates: 0,
            losses: 1,
            transfers: 1,
            membership_changes: 1,
            closes: 0,
            dials: 0,
            max_states: 5_000_000,
        }
    }

    /// Fast election's run in the test suite: crashes, restarts, a transfer, and the
    /// connection events around them (one close, one refused dial, delivered whenever),
    /// without clients, deep enough for a refusal to outlive the leadership it was dialed
    /// under and meet a later one.
    pub fn fast_election() -> Bounds {
        Bounds {
            depth: 7,
            crashes: 1,
            client_ops: 0,
            duplicates: 0,
            losses: 0,
            transfers: 1,
            membership_changes: 0,
            closes: 1,
            dials: 1,
            max_states: 5_000_000,
        }
    }
}

/// What a search found.
#[derive(Clone, Debug)]
pub struct Report {
    /// Distinct states reached (after merging by fingerprint).
    pub states: usize,
    /// Transitions taken.
    pub transitions: u64,
    /// The depth bound explored (every path of that many choices, unless truncated).
    pub depth: usize,
    /// Whether `max_states` cut the search short.
    pub truncated: bool,
    /// How long it took.
    pub took: Duration,
    /// The first violation, with the choices that lead to it.
    pub violation: Option<(String, Vec<String>)>,
}

/// A disk that keeps only what was synced when its node crashes.
#[derive(Clone, Debug, Default)]
struct Disk {
    durable: Recovered,
    unsynced: Vec<Persist>,
}

/// A disk never fails here.
#[derive(Debug, thiserror::Error)]
#[error("the model's disk does not fail")]
struct Never;

impl Storage for Disk {
    type Error = Never;

    fn recover(&mut self) -> Result<Recovered, Never> {
        Ok(self.durable.clone())
    }

    fn persist(
        &mut self,
        hard_state: Option<&HardState>,
        snapshot: Option<&Snapshot>,
        entries: &[tenure_core::types::Entry],
    ) -> Result<(), Never> {
        self.write(hard_state, snapshot, entries)?;
        self.sync()
    }

    fn write(
        &mut self,
        hard_state: Option<&HardState>,
        snapshot: Option<&Snapshot>,
        entries: &[tenure_core::types::Entry],
    ) -> Result<(), Never> {
        self.unsynced.push(Persist {
            hard_state: hard_state.copied(),
            must_sync: true,
            snapshot: snapshot.cloned(),
            entries: entries.to_vec(),
        });
        Ok(())
    }

    fn sync(&mut self) -> Result<(), Never> {
        for p in std::mem::take(&mut self.unsynced) {
            apply_to_image(
                &mut self.durable,
                p.hard_state.as_ref(),
                p.snapshot.as_ref(),
                &p.entries,
            );
        }
        Ok(())
    }
}

/// A proposal's reply handle: which client, which of its requests.
type Reply = (usize, u64);

#[derive(Clone, Debug)]
struct Slot {
    pipeline: Option<Pipeline<Reply, usize>>,
    disk: Disk,
    config: Config,
    /// The terms this process (since its last start) has led.
    led: BTreeSet<Term>,
}

/// A client's request in flight.
#[derive(Clone, Debug)]
struct Pending {
    /// The reply handle's number.
    req: u64,
    /// The global tick it was sent at.
    sent_at: u64,
    /// What it is: a command (with its request id, and where it landed in the log if it
    /// did), or a keepalive.
    what: Option<Sent>,
}

/// A command a client sent: with its request id, and where it landed in the log if it did.
type Sent = (Command, Option<RequestId>, Option<(Index, Term)>);

/// What a client is doing.
#[derive(Clone, Debug, Default)]
struct Client {
    session: Option<SessionId>,
    /// Its leadership's token, once a campaign said it leads.
    token: Option<u64>,
    /// The global tick its latest acknowledged grant or keepalive was sent at.
    renewed_from: Option<u64>,
    /// The request or keepalive waiting for an answer.
    pending: Option<Pending>,
    /// A request given up on, to retry with the same id.
    retry: Option<(Command, Option<RequestId>)>,
    next_req: u64,
    seq: u64,
}

impl Client {
    /// Until which global tick this client believes it leads (the holder's rule: send time
    /// of its last acknowledged renewal + TTL − margin).
    fn believes_until(&self) -> Option<u64> {
        self.token?;
        Some((self.renewed_from? + TTL).saturating_sub(HOLDER_MARGIN))
    }
}

/// Everything recorded along a path, for the checks (not part of the fingerprint: it
/// follows from the states on the way).
#[derive(Clone, Debug, Default)]
struct History {
    /// Who led each term.
    leaders: BTreeMap<Term, NodeId>,
    /// Every entry seen committed: its term, and the lowest term of a node that saw it
    /// committed (the entry was committed in that term or before).
    committed: BTreeMap<Index, (Term, Term)>,
    /// The state machine's digest at each applied index.
    digests: BTreeMap<Index, u64>,
    /// Proposals answered with a definite failure: `(index, term)`.
    failed: BTreeSet<(Index, Term)>,
    /// Leader changes of the election seen applied: index → token.
    tokens: BTreeMap<Index, u64>,
    /// Fenced writes seen accepted: index → token.
    puts: BTreeMap<Index, u64>,
    /// Fast election's premise broken: a node dropped its vote refusal for a leader whose
    /// process, the one that led that term, still runs.
    gone_too_soon: Option<String>,
}

/// A refused dial waiting to be handed to the node that made it (fast election).
#[derive(Clone, Debug, Hash)]
struct Refusal {
    node: usize,
    peer: NodeId,
    /// The node's follow epoch when the dial started.
    stamp: u64,
}

#[derive(Clone, Debug)]
struct World {
    /// The core's bugs every node runs with (none, to check the product).
    bugs: crate::CoreBugs,
    nodes: Vec<Slot>,
    net: Vec<Message>,
    clients: Vec<Client>,
    now: u64,
    crashes: u8,
    client_ops: u8,
    duplicates: u8,
    losses: u8,
    transfers: u8,
    membership_changes: u8,
    closes: u8,
    dials: u8,
    /// Refused dials not yet handed to their node.
    refusals: Vec<Refusal>,
    history: History,
}

/// One choice.
#[derive(Clone, Debug)]
enum Choice {
    Tick,
    /// Every message in flight delivered, links in turn, fsyncs done, until nothing is in
    /// flight: a shortcut through choices that exist one by one, so that the bound reaches
    /// whole client requests and elections and still interleaves around them.
    Settle,
    /// An election timeout's worth of ticks with nothing delivered (a shortcut through as
    /// many `Tick`s): what a crash or a cut link looks like to the others.
    Wait,
    Deliver {
        index: usize,
        keep: bool,
    },
    Lose(usize),
    Fsync(usize),
    Crash(usize),
    Restart(usize),
    Request {
        client: usize,
        node: usize,
    },
    Keepalive {
        client: usize,
        node: usize,
    },
    GiveUp(usize),
    Transfer {
        node: usize,
        to: NodeId,
    },
    Remove3(usize),
    /// Node `node`'s connection to `peer` closes.
    Close {
        node: usize,
        peer: NodeId,
    },
    /// Node `node` dials `peer`, which is down: refused.
    Dial {
        node: usize,
        peer: NodeId,
    },
    /// The refused dial at this index reaches its node.
    Refused(usize),
}

fn config(id: NodeId) -> Config {
    let mut c = Config::new(id, vec![1, 2, 3]);
    c.election_timeout_ticks = 5;
    // The model's clocks agree exactly (drift is the simulator's to explore).
    c.clock_drift_max = tenure_core::drift::DriftPpm::ZERO;
    c.heartbeat_ticks = 1;
    c.lease_checkpoint_ticks = 3;
    c.limits.ttl_min_ticks = 1;
    c.snapshot_threshold_entries = 6;
    c.snapshot_grows_with_state = false;
    c.fast_election = true;
    c
}

impl World {
    fn new(bugs: crate::CoreBugs, bounds: &Bounds) -> World {
        let nodes = (1..=3)
            .map(|id| Slot {
                pipeline: None,
                disk: Disk::default(),
                config: config(id),
                led: BTreeSet::new(),
            })
            .collect();
        let mut w = World {
            bugs,
            nodes,
            net: Vec::new(),
            clients: vec![Client::default(), Client::default()],
            now: 0,
            crashes: bounds.crashes,
            client_ops: bounds.client_ops,
            duplicates: bounds.duplicates,
            losses: bounds.losses,
            transfers: bounds.transfers,
            membership_changes: bounds.membership_changes,
            closes: bounds.closes,
            dials: bounds.dials,
            refusals: Vec::new(),
            history: History::default(),
        };
        for i in 0..3 {
            w.start(i);
        }
        w
    }

    /// The fixed prefix: the clocks run and every message is delivered in order until one
    /// node leads and nothing is in flight (which node follows from the seeds of the
    /// configurations; the search starts from there).
    fn elect_a_leader(&mut self) -> Result<(), String> {
        for _ in 0..500 {
            let leads = self.nodes.iter().any(|s| {
                s.pipeline
                    .as_ref()
                    .is_some_and(|p| p.node().role() == Role::Leader)
            });
            if leads && self.net.is_empty() && !(0..3).any(|i| self.syncing(i)) {
                return Ok(());
            }
            let syncing = (0..3).find(|i| self.syncing(*i));
            let next = if let Some(i) = syncing {
                Choice::Fsync(i)
            } else if self.net.is_empty() {
                Choice::Tick
            } else {
                Choice::Deliver {
                    index: 0,
                    keep: false,
                }
            };
            self.apply(&next)?;
        }
        let roles: Vec<String> = self
            .nodes
            .iter()
            .map(|s| {
                s.pipeline.as_ref().map_or("down".into(), |p| {
                    let st = p.node().status();
                    format!("{:?} t{} c{}", st.role, st.term, st.commit)
                })
            })
            .collect();
        Err(format!(
            "the start never elected a leader ({roles:?}, {} in flight)",
            self.net.len()
        ))
    }

    fn start(&mut self, i: usize) {
        let slot = &mut self.nodes[i];
        let recovered = slot.disk.durable.clone();
        let node = crate::new_node(slot.config.clone(), recovered, self.bugs)
            .expect("a node starts from its disk");
        slot.pipeline = Some(Pipeline::new(
            node,
            self.now * TICK_US,
            true,
            DriverBugs::default(),
        ));
    }

    fn up(&self, i: usize) -> bool {
        self.nodes[i].pipeline.is_some()
    }

    fn syncing(&self, i: usize) -> bool {
        self.nodes[i]
            .pipeline
            .as_ref()
            .is_some_and(Pipeline::syncing)
    }

    /// Every Ready of node `i`: written; synced and advanced at once unless a leader's
    /// appends left early (then an `Fsync` choice finishes it). Then answers.
    fn drive(&mut self, i: usize) -> Result<(), String> {
        let now_us = self.now * TICK_US;
        loop {
            let slot = &mut self.nodes[i];
            let Some(p) = slot.pipeline.as_mut() else {
                return Ok(());
            };
            if p.syncing() {
                break;
            }
            let mut sent = Vec::new();
            let wrote = p
                .write(&mut slot.disk, &mut |m| sent.push(m), |_, _| {})
                .map_err(|e| e.to_string())?;
            self.net.extend(sent);
            let Some(wrote) = wrote else { break };
            if wrote.replicating {
                break;
            }
            self.finish_ready(i)?;
        }
        if let Some(p) = self.nodes[i].pipeline.as_mut() {
            p.observe(now_us);
        }
        self.answers(i);
        Ok(())
    }

    fn finish_ready(&mut self, i: usize) -> Result<(), String> {
        let now_us = self.now * TICK_US;
        let slot = &mut self.nodes[i];
        let p = slot.pipeline.as_mut().expect("up");
        p.sync(&mut slot.disk).map_err(|e| e.to_string())?;
        let mut sent = Vec::new();
        let finished = p.advance(now_us, &mut |m| sent.push(m));
        self.net.extend(sent);
        for change in &finished.leader_changes {
            if let Some(leader) = &change.leader {
                self.history.tokens.insert(change.index, leader.token);
            }
        }
        for a in &finished.applied {
            if let (Command::FencedPut { token, .. }, Response::Put) =
                (a.command.unsealed(), &a.response)
            {
                self.history.puts.insert(a.index, *token);
            }
        }
        self.answers(i);
        Ok(())
    }

    /// Hands node `i`'s answers to the clients, and notes what its events say about fast
    /// election's premise (the terms it leads, the leaders it gave up as gone).
    fn answers(&mut self, i: usize) {
        let Some(p) = self.nodes[i].pipeline.as_mut() else {
            return;
        };
        let out = p.drain();
        if p.node().role() == Role::Leader {
            let term = p.node().status().term;
            self.nodes[i].led.insert(term);
        }
        for event in &out.events {
            if let tenure_driver::Event::Core(NodeEvent::LeaderGone { term, leader }) = event {
                let slot = &self.nodes[*leader as usize - 1];
                if slot.pipeline.is_some() && slot.led.contains(term) {
                    self.history.gone_too_soon.get_or_insert(format!(
                        "fast election: node {} dropped its vote refusal for node {leader}, \
                         leader of term {term}, whose process still runs",
                        i + 1
                    ));
                }
            }
        }
        for a in out.answers {
            let (c, req) = a.reply;
            let client = &mut self.clients[c];
            let Some(Pending {
                sent_at,
                what: Some((command, _, at)),
                ..
            }) = client.pending.clone().filter(|p| p.req == req)
            else {
                continue;
            };
            client.pending = None;
            match a.outcome {
                Outcome::Applied { response, .. } => {
                    client.retry = None;
                    match response {
                        Response::Granted { session, .. } => {
                            client.session = Some(session);
                            client.renewed_from = Some(sent_at);
                        }
                        Response::Campaigned {
                            leader_token: Some(token),
                            ..
                        } => client.token = Some(token),
                        Response::Rejected(_) if matches!(command, Command::FencedPut { .. }) => {
                            // Stale: this client no longer leads.
                            client.token = None;
                        }
                        _ => {}
                    }
                }
                Outcome::Failed(Failure::Superseded { .. }) => {
                    if let Some(at) = at {
                        self.history.failed.insert(at);
                    }
                }
                Outcome::Failed(Failure::Refused(_)) | Outcome::Indeterminate(_) => {}
            }
        }
        for k in out.keepalives {
            let client = &mut self.clients[k.reply];
            let Some(Pending {
                sent_at,
                what: None,
                ..
            }) = client.pending.clone()
            else {
                continue;
            };
            client.pending = None;
            if let KeepaliveOutcome::Acked { .. } = k.outcome {
                if client.session == Some(k.session) {
                    client.renewed_from = Some(sent_at);
                }
            }
        }
    }

    fn choices(&self) -> Vec<Choice> {
        let mut out = vec![Choice::Tick, Choice::Wait];
        if !self.net.is_empty() || (0..3).any(|i| self.syncing(i)) {
            out.push(Choice::Settle);
        }
        // Links are FIFO, as the transport's TCP connections are: only each link's oldest
        // message may arrive next; it may also be lost (its connection reset) or arrive
        // twice (resent on a new connection), within their budgets.
        let mut links = HashSet::new();
        for (index, m) in self.net.iter().enumerate() {
            if !links.insert((m.from, m.to)) {
                continue;
            }
            out.push(Choice::Deliver { index, keep: false });
            if self.duplicates > 0 {
                out.push(Choice::Deliver { index, keep: true });
            }
            if self.losses > 0 {
                out.push(Choice::Lose(index));
            }
        }
        for i in 0..3 {
            if self.syncing(i) {
                out.push(Choice::Fsync(i));
            }
            if self.up(i) && self.crashes > 0 {
                out.push(Choice::Crash(i));
            }
            if !self.up(i) {
                out.push(Choice::Restart(i));
            }
            if !self.up(i) || self.syncing(i) {
                continue;
            }
            for peer in (1..=3).filter(|p| *p != i as NodeId + 1) {
                if self.closes > 0 {
                    out.push(Choice::Close { node: i, peer });
                }
                if self.dials > 0 && !self.up(peer as usize - 1) {
                    out.push(Choice::Dial { node: i, peer });
                }
            }
        }
        for (index, r) in self.refusals.iter().enumerate() {
            if !self.syncing(r.node) {
                out.push(Choice::Refused(index));
            }
        }
        if self.client_ops > 0 {
            for (c, client) in self.clients.iter().enumerate() {
                if client.pending.is_some() {
                    out.push(Choice::GiveUp(c));
                    continue;
                }
                // To every node that believes it leads (a stale leader included); a
                // follower would only refuse.
                for node in 0..3 {
                    let leads = self.nodes[node]
                        .pipeline
                        .as_ref()
                        .is_some_and(|p| p.node().role() == Role::Leader);
                    if leads && !self.syncing(node) {
                        out.push(Choice::Request { client: c, node });
                        if client.session.is_some() {
                            out.push(Choice::Keepalive { client: c, node });
                        }
                    }
                }
            }
        }
        for node in 0..3 {
            let leads = self.nodes[node]
                .pipeline
                .as_ref()
                .is_some_and(|p| p.node().role() == Role::Leader && !p.syncing());
            if !leads {
                continue;
            }
            if self.transfers > 0 {
                // To the next node (which may not be caught up).
                out.push(Choice::Transfer {
                    node,
                    to: (node as u64 + 1) % 3 + 1,
                });
            }
            if self.membership_changes > 0 {
                out.push(Choice::Remove3(node));
            }
        }
        out
    }

    fn apply(&mut self, choice: &Choice) -> Result<(), String> {
        match *choice {
            Choice::Tick => {
                self.now += 1;
                for i in 0..3 {
                    let Some(p) = self.nodes[i].pipeline.as_mut() else {
                        continue;
                    };
                    if p.syncing() {
                        let mut sent = Vec::new();
                        p.tick_while_syncing(&mut |m| sent.push(m));
                        self.net.extend(sent);
                    } else {
                        p.node_mut().tick();
                    }
                    self.drive(i)?;
                }
            }
            Choice::Wait => {
                let t = self.nodes[0].config.election_timeout_ticks;
                for _ in 0..t {
                    self.apply(&Choice::Tick)?;
                }
            }
            Choice::Settle => {
                for _ in 0..200 {
                    if let Some(i) = (0..3).find(|i| self.syncing(*i)) {
                        self.apply(&Choice::Fsync(i))?;
                    } else if self.net.is_empty() {
                        break;
                    } else {
                        self.apply(&Choice::Deliver {
                            index: 0,
                            keep: false,
                        })?;
                    }
                }
            }
            Choice::Deliver { index, keep } => {
                let m = if keep {
                    self.duplicates -= 1;
                    self.net[index].clone()
                } else {
                    self.net.remove(index)
                };
                let i = m.to as usize - 1;
                let Some(p) = self.nodes[i].pipeline.as_mut() else {
                    return Ok(());
                };
                if p.syncing() {
                    let mut sent = Vec::new();
                    if !p
                        .step_while_syncing(m.clone(), &mut |m| sent.push(m))
                        .unwrap_or(true)
                    {
                        // Held until the fsync: back at the head of its link.
                        self.net.insert(index.min(self.net.len()), m);
                    }
                    self.net.extend(sent);
                } else {
                    let _ = p.node_mut().step(m);
                }
                self.drive(i)?;
            }
            Choice::Lose(index) => {
                self.losses -= 1;
                self.net.remove(index);
            }
            Choice::Fsync(i) => {
                self.finish_ready(i)?;
                self.drive(i)?;
            }
            Choice::Crash(i) => {
                self.crashes -= 1;
                let slot = &mut self.nodes[i];
                slot.pipeline = None;
                slot.led.clear();
                slot.disk.unsynced.clear();
                // Its connections die with it: what it had sent is gone too, and so are
                // the refusals its transport had not handed over.
                self.net.retain(|m| m.from != i as u64 + 1);
                self.refusals.retain(|r| r.node != i);
            }
            Choice::Close { node, peer } => {
                self.closes -= 1;
                let p = self.nodes[node].pipeline.as_mut().expect("up");
                p.node_mut().peer_connection_closed(peer);
                self.drive(node)?;
            }
            Choice::Dial { node, peer } => {
                self.dials -= 1;
                let p = self.nodes[node].pipeline.as_ref().expect("up");
                let stamp = p.node().follow_epoch();
                self.refusals.push(Refusal { node, peer, stamp });
            }
            Choice::Refused(index) => {
                let r = self.refusals.remove(index);
                let p = self.nodes[r.node].pipeline.as_mut().expect("up");
                p.node_mut().peer_reconnect_refused(r.peer, r.stamp);
                self.drive(r.node)?;
            }
            Choice::Restart(i) => {
                self.start(i);
                self.drive(i)?;
            }
            Choice::Request { client, node } => {
                self.client_ops -= 1;
                let (command, request) = self.next_request(client);
                let c = &mut self.clients[client];
                c.next_req += 1;
                let req = c.next_req;
                let now_us = self.now * TICK_US;
                let (n, core) = self.nodes[node].pipeline.as_mut().expect("up").parts();
                let at = core.propose(n, now_us, request, command.clone(), (client, req));
                self.clients[client].pending = Some(Pending {
                    req,
                    sent_at: self.now,
                    what: Some((command, request, at)),
                });
                self.drive(node)?;
            }
            Choice::Keepalive { client, node } => {
                self.client_ops -= 1;
                let c = &mut self.clients[client];
                let session = c.session.expect("has a session");
                c.next_req += 1;
                c.pending = Some(Pending {
                    req: c.next_req,
                    sent_at: self.now,
                    what: None,
                });
                let now_us = self.now * TICK_US;
                let (n, core) = self.nodes[node].pipeline.as_mut().expect("up").parts();
                core.keepalive(n, now_us, session, client);
                self.drive(node)?;
            }
            Choice::GiveUp(client) => {
                self.client_ops -= 1;
                let c = &mut self.clients[client];
                if let Some(Pending {
                    what: Some((command, request, _)),
                    ..
                }) = c.pending.take()
                {
                    c.retry = Some((command, request));
                }
            }
            Choice::Transfer { node, to } => {
                self.transfers -= 1;
                let p = self.nodes[node].pipeline.as_mut().expect("up");
                let _ = p.node_mut().transfer_leadership(to);
                let now_us = self.now * TICK_US;
                p.observe(now_us);
                self.drive(node)?;
            }
            Choice::Remove3(node) => {
                self.membership_changes -= 1;
                let p = self.nodes[node].pipeline.as_mut().expect("up");
                let _ = p
                    .node_mut()
                    .change_membership([1, 2].into_iter().collect(), BTreeSet::new());
                self.drive(node)?;
            }
        }
        Ok(())
    }

    /// The client's next request: a retry if it gave one up, else grant, campaign, write.
    fn next_request(&mut self, client: usize) -> (Command, Option<RequestId>) {
        let c = &mut self.clients[client];
        if let Some(retry) = c.retry.take() {
            return retry;
        }
        match (c.session, c.token) {
            (None, _) => (
                Command::Grant { ttl_ticks: TTL },
                Some(RequestId::Grant {
                    nonce: 1000 + client as u64 * 100 + c.next_req,
                }),
            ),
            (Some(session), None) => {
                c.seq += 1;
                (
                    Command::Campaign {
                        election: ELECTION.into(),
                        session,
                        value: vec![client as u8],
                    },
                    Some(RequestId::Session {
                        session,
                        seq: c.seq,
                    }),
                )
            }
            (Some(session), Some(token)) => {
                c.seq += 1;
                (
                    Command::FencedPut {
                        key: "k".into(),
                        value: vec![client as u8],
                        election: ELECTION.into(),
                        token,
                    },
                    Some(RequestId::Session {
                        session,
                        seq: c.seq,
                    }),
                )
            }
        }
    }

    /// The checks, after every choice.
    fn check(&mut self) -> Result<(), String> {
        let now = self.now;
        if let Some(why) = &self.history.gone_too_soon {
            return Err(why.clone());
        }
        for (i, slot) in self.nodes.iter().enumerate() {
            let Some(p) = slot.pipeline.as_ref() else {
                continue;
            };
            let node = p.node();
            let id = i as NodeId + 1;
            catch_unwind(AssertUnwindSafe(|| node.check_invariants()))
                .map_err(|e| format!("node {id}'s invariants: {}", panic_text(&e)))?;
            let status = node.status();
            if status.role == Role::Leader {
                match self.history.leaders.insert(status.term, id) {
                    Some(other) if other != id => {
                        return Err(format!(
                            "election safety: nodes {other} and {id} both led term {}",
                            status.term
                        ))
                    }
                    _ => {}
                }
            }
            let (snap_index, _) = node.snapshot_meta();
            let entries = node.log_entries();
            for e in entries {
                if e.index <= status.commit {
                    let seen = self
                        .history
                        .committed
                        .entry(e.index)
                        .or_insert((e.term, status.term));
                    if seen.0 != e.term {
                        return Err(format!(
                            "log matching / state machine safety: index {} committed with \
                             term {} and term {} (node {id})",
                            e.index, seen.0, e.term
                        ));
                    }
                    seen.1 = seen.1.min(status.term);
                }
            }
            // A node's log never contradicts an entry committed anywhere.
            for e in entries {
                if let Some((t, _)) = self.history.committed.get(&e.index) {
                    if *t != e.term && e.index <= status.commit {
                        return Err(format!(
                            "node {id} commits index {} of term {} over committed term {t}",
                            e.index, e.term
                        ));
                    }
                }
            }
            if status.role == Role::Leader {
                let last = status.last_index;
                // Leader completeness: a leader of a term after the one an entry was
                // committed in holds it.
                for (index, (term, by)) in self.history.committed.range(snap_index + 1..) {
                    if *by >= status.term {
                        continue;
                    }
                    let held = entries.iter().find(|e| e.index == *index).map(|e| e.term);
                    if *index > last || held != Some(*term) {
                        return Err(format!(
                            "leader completeness: node {id}, leader of term {}, lacks \
                             committed entry {index} of term {term}",
                            status.term
                        ));
                    }
                }
                if let Some(until) = status.lease_until_tick {
                    if until > status.now_tick {
                        if let Some((term, other)) = self
                            .history
                            .leaders
                            .range(status.term + 1..)
                            .next()
                            .map(|(t, n)| (*t, *n))
                        {
                            return Err(format!(
                                "lease safety: node {id} holds its lease of term {} while \
                                 node {other} leads term {term}",
                                status.term
                            ));
                        }
                    }
                }
            }
            let sm = node.state_machine();
            let applied = sm.applied_index();
            let digest = sm.digest();
            match self.history.digests.insert(applied, digest) {
                Some(d) if d != digest => {
                    return Err(format!(
                        "state machine safety: two states at applied index {applied} (node {id})"
                    ))
                }
                _ => {}
            }
        }
        // Fencing: a write accepted at index i carries at least every token handed out
        // before i.
        for (put_index, put_token) in &self.history.puts {
            if let Some((lc_index, token)) = self
                .history
                .tokens
                .range(..*put_index)
                .map(|(i, t)| (*i, *t))
                .max_by_key(|(_, t)| *t)
            {
                if *put_token < token {
                    return Err(format!(
                        "fencing: a write with token {put_token} accepted at index {put_index} \
                         after token {token} was handed out at {lc_index}"
                    ));
                }
            }
        }
        // Exact outcomes.
        for (index, term) in &self.history.failed {
            if self.history.committed.get(index).map(|c| c.0) == Some(*term) {
                return Err(format!(
                    "exact outcomes: entry {index} of term {term} committed after a definite \
                     failure was answered for it"
                ));
            }
        }
        // Holders: two clients never both believe they lead.
        let believing: Vec<usize> = (0..self.clients.len())
            .filter(|c| self.clients[*c].believes_until().is_some_and(|u| now < u))
            .collect();
        if believing.len() > 1 {
            let tokens: Vec<Option<u64>> =
                believing.iter().map(|c| self.clients[*c].token).collect();
            return Err(format!(
                "holder safety: clients {believing:?} (tokens {tokens:?}) both believe they \
                 lead at tick {now}"
            ));
        }
        Ok(())
    }

    /// A fingerprint of everything that decides the future.
    fn fingerprint(&self) -> u64 {
        // Each link's messages in order; the order between links does not matter.
        let mut net: BTreeMap<(NodeId, NodeId), Vec<u64>> = BTreeMap::new();
        for m in &self.net {
            net.entry((m.from, m.to)).or_default().push(fingerprint(m));
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        net.hash(&mut h);
        for slot in &self.nodes {
            format!("{:?}{:?}", slot.pipeline, slot.disk).hash(&mut h);
        }
        format!("{:?}", self.clients).hash(&mut h);
        for slot in &self.nodes {
            slot.led.hash(&mut h);
        }
        self.refusals.hash(&mut h);
        (
            self.crashes,
            self.client_ops,
            self.duplicates,
            self.losses,
            self.transfers,
            self.membership_changes,
            self.closes,
            self.dials,
        )
            .hash(&mut h);
        h.finish()
    }
}

fn fingerprint<T: std::fmt::Debug>(t: &T) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    format!("{t:?}").hash(&mut h);
    h.finish()
}

fn panic_text(e: &Box<dyn std::any::Any + Send>) -> String {
    e.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| e.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

/// Explore every interleaving within `bounds`, with the core's bug switches `bugs` (all
/// off to check the product).
pub fn explore(bounds: &Bounds, bugs: crate::CoreBugs) -> Report {
    let started = Instant::now();
    let mut start = World::new(bugs, bounds);
    let elected = start.elect_a_leader();
    // Panics in the search are findings, reported with their path: not printed.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let report = search(bounds, start, elected, started);
    std::panic::set_hook(hook);
    report
}

fn search(bounds: &Bounds, start: World, elected: Result<(), String>, started: Instant) -> Report {
    let mut report = Report {
        states: 0,
        transitions: 0,
        depth: 0,
        truncated: false,
        took: Duration::ZERO,
        violation: None,
    };
    if let Err(e) = elected {
        report.violation = Some((e, Vec::new()));
        return report;
    }
    // Depth-first, remembering each state's fingerprint with the most choices that were
    // left when it was reached: a state reached again with no more left is not explored
    // again. Memory is one entry per state and one world per level.
    let mut seen: HashMap<u64, usize> = HashMap::new();
    seen.insert(start.fingerprint(), bounds.depth);
    let mut path = Vec::new();
    dfs(
        &start,
        bounds.depth,
        bounds,
        &mut seen,
        &mut path,
        &mut report,
    );
    report.depth = bounds.depth;
    report.states = seen.len();
    report.took = started.elapsed();
    report
}

/// Every choice from `world` with `left` more to make.
fn dfs(
    world: &World,
    left: usize,
    bounds: &Bounds,
    seen: &mut HashMap<u64, usize>,
    path: &mut Vec<Choice>,
    report: &mut Report,
) {
    if left == 0 || report.violation.is_some() || report.truncated {
        return;
    }
    for choice in world.choices() {
        let mut w = world.clone();
        report.transitions += 1;
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            w.apply(&choice)?;
            w.check()
        }));
        let failure = match outcome {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e),
            Err(p) => Some(format!("a panic: {}", panic_text(&p))),
        };
        if let Some(why) = failure {
            let mut shown: Vec<String> = path.iter().map(|c| format!("{c:?}")).collect();
            shown.push(format!("{choice:?}"));
            report.violation = Some((why, shown));
            return;
        }
        let fp = w.fingerprint();
        match seen.get(&fp) {
            Some(had) if *had >= left - 1 => continue,
            _ => {
                seen.insert(fp, left - 1);
            }
        }
        if seen.len() >= bounds.max_states {
            report.truncated = true;
            return;
        }
        path.push(choice);
        dfs(&w, left - 1, bounds, seen, path, report);
        path.pop();
        if report.violation.is_some() || report.truncated {
            return;
        }
    }
}
