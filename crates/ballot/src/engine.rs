//! The engine: real [`tenure_core::node::Node`]s, a network that delivers only what the
//! person says, durable state that survives crashes, small applications that campaign and
//! write through fencing, and the bully model beside them.
//!
//! Every input to a node is followed by the driver's loop that the core prescribes (take
//! `ready()`, persist, `advance()`, queue the messages), so the nodes behave exactly as
//! they do in the server and the simulator; only time and delivery are in the person's
//! hands. Nothing reads a clock or a random source: a seed and a step list give the same
//! state and the same log every time.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use tenure_core::config::Config;
use tenure_core::message::{Body, Message};
use tenure_core::node::{Node, Role, Status};
use tenure_core::sm::{Command, Response, SessionId, SmError};
use tenure_core::storage::{MemStorage, Storage};
use tenure_core::types::{Index, NodeId, Payload, Term};

use crate::bully::{list, Bully};
use crate::scenarios::Scenario;
use crate::step::{encode_steps, parse_steps, Refusal, Result, Step, StepError, STEPS_MAX};

mod explain;
mod start;

pub use start::Start;

/// The election the applications campaign in.
pub const ELECTION: &str = "billing";
/// The fenced key the applications write.
pub const KEY: &str = "books";
/// The TTL of an application's session, in ticks (the election timeout is 15 ticks).
pub const SESSION_TTL_TICKS: u64 = 20;
/// Most rounds of `settle`: each round delivers everything in flight, so a quiet network
/// is reached long before this unless a leader is ticking (it is not, during settle).
pub const SETTLE_ROUNDS_MAX: usize = 100;
/// Most messages in flight; older ones are lost when more are sent (a bounded network).
pub const IN_FLIGHT_MAX: usize = 500;
/// Most lines kept in the ballot log.
pub const LOG_LINES_MAX: usize = 2_000;

/// A message in flight.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct InFlight {
    /// Its number, in sending order, for the page.
    pub id: u64,
    /// Sender.
    pub from: NodeId,
    /// Receiver.
    pub to: NodeId,
    /// Sender's term.
    pub term: Term,
    /// Kind (`PreVote`, `RequestVote`, …).
    pub kind: String,
    /// What it says, in words.
    pub text: String,
    /// Why `deliver` does not apply to it now, if it does not (the page disables the button
    /// and shows this as its tooltip). Filled in by [`Engine::view`].
    pub deliver_refused: Option<Refusal>,
    /// Why `drop` does not apply to it now, if it does not.
    pub drop_refused: Option<Refusal>,
    #[serde(skip)]
    msg: Message,
}

/// What an application on a node is doing.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct App {
    /// Its session, once granted.
    pub session: Option<SessionId>,
    /// The fencing token it believes it holds for `billing`.
    pub token: Option<u64>,
    /// In words.
    pub doing: String,
}

/// One node as the page shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodeView {
    /// Id.
    pub id: NodeId,
    /// `up`, `paused` or `crashed`.
    pub state: String,
    /// Role (as last seen, for a crashed node).
    pub role: String,
    /// Term.
    pub term: Term,
    /// Its vote in `term`.
    pub vote: Option<NodeId>,
    /// The leader it follows.
    pub leader: Option<NodeId>,
    /// Commit index.
    pub commit: Index,
    /// The log, one `index@term what` string per entry.
    pub log: Vec<String>,
    /// Ticks on its own clock.
    pub now_tick: u64,
    /// The leader it last heard from (`None`: nothing since it started), which is what
    /// makes it refuse votes for a while: see `vote_lease_until_tick`.
    pub heard_from: Option<NodeId>,
    /// The tick of its own clock at which it last heard from that leader (or started).
    pub heard_tick: u64,
    /// While its clock is below this tick, it refuses every vote and pre-vote (it keeps
    /// the leader's lease, Raft's check-quorum rule). `None` once that has run out, and for
    /// a leader, which refuses them anyway.
    pub vote_lease_until_tick: Option<u64>,
    /// The tick of its own clock at which its election timer fires if it hears nothing
    /// until then (`None` for a leader, or a node that is not running).
    pub times_out_at_tick: Option<u64>,
    /// Its application.
    pub app: App,
    /// The buttons of its card, each with the reason it does not apply now, if it does not.
    pub actions: Vec<Action>,
}

/// One button of a node's card: a step, and why it cannot be taken now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Action {
    /// The button's label.
    pub label: String,
    /// The step it takes, in the share link's form.
    pub step: String,
    /// What it does, in words (the tooltip of an enabled button).
    pub does: String,
    /// Why it does not apply now and what would make it possible (the page disables it).
    pub refused: Option<Refusal>,
}

/// Where a loaded prepared scenario stands, for the page's "next step" and "run to end".
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PlanView {
    /// The scenario's name.
    pub name: String,
    /// What it shows.
    pub title: String,
    /// Steps taken so far (the share link's step list is exactly these).
    pub at: usize,
    /// Steps in the whole scenario.
    pub total: usize,
    /// The next step in the share link's form, if any is left.
    pub next: Option<String>,
    /// What the next step will do, in words.
    pub next_does: Option<String>,
}

/// What happened in one term.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TermView {
    /// The term.
    pub term: Term,
    /// Every node that was leader of this term (Election Safety: at most one).
    pub leaders: Vec<NodeId>,
    /// Candidates and who granted them their vote.
    pub candidates: BTreeMap<NodeId, Vec<NodeId>>,
    /// In words: "leader: node 2", "no leader (split vote)", …
    pub outcome: String,
}

/// The whole state, as the page's JSON API returns it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct View {
    /// Cluster size.
    pub n: u64,
    /// The seed.
    pub seed: u64,
    /// Where the cluster started: `fresh` (term 0) or `term41` (node 1 leads term 41).
    pub start: Start,
    /// The prepared scenario being stepped through, if one is loaded and not left.
    pub scenario: Option<PlanView>,
    /// Votes needed to win.
    pub quorum: usize,
    /// The steps taken, in the text form of a share link.
    pub steps: String,
    /// Every node.
    pub nodes: Vec<NodeView>,
    /// Messages in flight, oldest first.
    pub in_flight: Vec<InFlight>,
    /// The nodes on one side of a partition (empty when healed).
    pub partition: Vec<NodeId>,
    /// Terms seen, with their outcome.
    pub terms: Vec<TermView>,
    /// The ballot log in words.
    pub log: Vec<String>,
    /// The fenced key: value and highest token accepted.
    pub fence: Option<(String, u64)>,
    /// The bully model under the same steps.
    pub bully: crate::bully::Bully,
    /// Who the bully model calls coordinator now.
    pub bully_coordinators: Vec<NodeId>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pending {
    Grant { app: NodeId },
    Campaign { app: NodeId },
    Write { app: NodeId, token: u64 },
}

#[derive(Clone)]
struct Slot {
    config: Config,
    node: Option<Node>,
    disk: MemStorage,
    paused: bool,
    /// Ticks the rest of the cluster lived through while this node was paused: it ticks
    /// them first when it wakes ("time comes first", `tenure_core::node`).
    missed_ticks: u64,
    /// The status last seen, to describe changes (and to show a crashed node).
    seen: Status,
    /// When the node last heard from a leader, by its own clock: the core keeps this
    /// private, and the page needs it to say why the node refuses votes. Mirrors the core's
    /// rule: contact is an AppendEntries or InstallSnapshot from the leader it then follows,
    /// or a tick as leader; a node that just started counts as having heard one.
    heard: Heard,
    /// The tick at which the node last started a pre-vote round, to explain a pre-vote it
    /// refuses because its own fresh round goes first.
    pre_vote_round_tick: Option<u64>,
}

/// A node's last contact with a leader (see `Slot::heard`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Heard {
    /// The leader, or `None` for the node's own start.
    leader: Option<NodeId>,
    /// The node's own tick then.
    tick: u64,
}

/// A prepared scenario loaded to be stepped through: its steps, of which the engine's own
/// step list is a prefix for as long as the plan holds.
#[derive(Clone)]
struct Plan {
    scenario: &'static Scenario,
    steps: Vec<Step>,
}

#[derive(Clone, Debug, Default)]
struct TermRecord {
    leaders: BTreeSet<NodeId>,
    candidates: BTreeMap<NodeId, BTreeSet<NodeId>>,
    closed: bool,
}

/// The ballot: a hand-stepped cluster. See the module docs. A clone is a what-if: the
/// engine waits on one to tell how long a `wait` would take to elect a leader.
#[derive(Clone)]
pub struct Engine {
    n: u64,
    seed: u64,
    slots: BTreeMap<NodeId, Slot>,
    net: Vec<InFlight>,
    next_msg: u64,
    side: BTreeSet<NodeId>,
    log: Vec<String>,
    terms: BTreeMap<Term, TermRecord>,
    apps: BTreeMap<NodeId, App>,
    /// Proposals made for applications: (node proposed at, index) → what for.
    pending: BTreeMap<(NodeId, Index), (Term, Pending)>,
    next_tag: u64,
    steps: Vec<Step>,
    bully: Bully,
    start: Start,
    /// The scenario being stepped through; a step of one's own leaves it.
    plan: Option<Plan>,
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Follower => "follower",
        Role::PreCandidate => "pre-candidate",
        Role::Candidate => "candidate",
        Role::Leader => "leader",
    }
}

fn describe(m: &Message) -> String {
    let (f, t, term) = (m.from, m.to, m.term);
    match &m.body {
        Body::PreVote { .. } => {
            format!("node {f} asks node {t}: would you vote for me in term {term}? (pre-vote)")
        }
        Body::PreVoteResponse { granted: true } => {
            format!("node {f} to node {t}: yes, I would vote for you in term {term} (pre-vote)")
        }
        Body::PreVoteResponse { granted: false } => {
            format!("node {f} to node {t}: no pre-vote (my term is {term})")
        }
        Body::RequestVote { .. } => format!("node {f} asks node {t} for its vote in term {term}"),
        Body::RequestVoteResponse { granted: true } => {
            format!("node {f} votes for node {t} in term {term}")
        }
        Body::RequestVoteResponse { granted: false } => {
            format!("node {f} refuses its vote to node {t} in term {term}")
        }
        Body::AppendEntries { entries, .. } if entries.is_empty() => {
            format!("heartbeat from leader {f} of term {term}")
        }
        Body::AppendEntries { entries, .. } => format!(
            "leader {f} of term {term} sends {} entr{}",
            entries.len(),
            if entries.len() == 1 { "y" } else { "ies" }
        ),
        Body::AppendEntriesResponse { success, .. } => format!(
            "node {f} answers leader {t}: {} (term {term})",
            if *success { "stored" } else { "rejected" }
        ),
        Body::InstallSnapshot { .. } => format!("leader {f} sends a snapshot (term {term})"),
        Body::TimeoutNow => format!("leader {f} tells node {t} to campaign now"),
    }
}

fn entry_text(payload: &Payload) -> String {
    let command = match payload {
        Payload::Noop => return "no-op (new leader)".to_string(),
        Payload::Membership(m) => return format!("membership {:?}", m.voters),
        Payload::Command(c) | Payload::Request { command: c, .. } => c.unsealed(),
    };
    match command {
        Command::Grant { ttl_ticks } => format!("grant session (ttl {ttl_ticks})"),
        Command::Expire { session } => format!("expire session {session}"),
        Command::Revoke { session } => format!("revoke session {session}"),
        Command::Checkpoint { .. } => "lease checkpoint".to_string(),
        Command::Campaign {
            election, session, ..
        } => format!("session {session} campaigns in {election}"),
        Command::FencedPut { key, token, .. } => format!("write {key} with token {token}"),
        _ => "command".to_string(),
    }
}

impl Engine {
    /// A fresh cluster of `n` (3 or 5) nodes, all followers in term 0.
    pub fn new(n: u64, seed: u64) -> Result<Engine> {
        Engine::starting(n, seed, Start::Fresh)
    }

    /// A cluster of `n` (3 or 5) nodes that starts as `start` says: fresh in term 0, or
    /// established with node 1 leading term 41. Either way the same `n`, `seed` and
    /// `start` give the same cluster.
    pub fn starting(n: u64, seed: u64, start: Start) -> Result<Engine> {
        let mut engine = Engine::fresh(n, seed)?;
        if start == Start::Term41 {
            engine.establish_term_41();
        }
        Ok(engine)
    }

    fn fresh(n: u64, seed: u64) -> Result<Engine> {
        if n != 3 && n != 5 {
            return Err(StepError::ClusterSize(n));
        }
        let ids: Vec<NodeId> = (1..=n).collect();
        let mut slots = BTreeMap::new();
        for &id in &ids {
            let mut config = Config::new(id, ids.clone());
            // Each node's election timeouts come from the scenario's seed, so another seed
            // is another race to time out first.
            config.seed = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ id;
            let node = Node::new(config.clone(), Default::default())
                .expect("the default configuration is valid");
            let seen = node.status();
            slots.insert(
                id,
                Slot {
                    config,
                    node: Some(node),
                    disk: MemStorage::new(),
                    paused: false,
                    missed_ticks: 0,
                    heard: Heard {
                        leader: None,
                        tick: seen.now_tick,
                    },
                    pre_vote_round_tick: None,
                    seen,
                },
            );
        }
        let mut engine = Engine {
            n,
            seed,
            slots,
            net: Vec::new(),
            next_msg: 1,
            side: BTreeSet::new(),
            log: Vec::new(),
            terms: BTreeMap::new(),
            apps: ids.iter().map(|&id| (id, App::default())).collect(),
            pending: BTreeMap::new(),
            next_tag: 1,
            steps: Vec::new(),
            bully: Bully::new(n),
            start: Start::Fresh,
            plan: None,
        };
        engine.say(format!(
            "{n} nodes start as followers in term 0; a leader needs {} of {n} votes",
            engine.quorum()
        ));
        engine.bully.round(&|_, _| true);
        Ok(engine)
    }

    /// Builds a fresh cluster and takes every step of `steps` (a share link's list).
    pub fn replay(n: u64, seed: u64, steps: &str) -> Result<Engine> {
        Engine::replay_from(n, seed, Start::Fresh, steps)
    }

    /// Builds the cluster as `start` says and takes every step of `steps`.
    pub fn replay_from(n: u64, seed: u64, start: Start, steps: &str) -> Result<Engine> {
        let steps = parse_steps(steps)?;
        let mut engine = Engine::starting(n, seed, start)?;
        engine.take_all(steps)?;
        Ok(engine)
    }

    /// Loads a prepared scenario to step through it: its cluster, with the first steps of
    /// its list already taken (`taken`, which must be a prefix of the list; `None`: all of
    /// them). [`Engine::next_step`] then takes the next one and [`Engine::run_to_end`] the
    /// rest; any other step leaves the scenario.
    pub fn scenario(scenario: &'static Scenario, taken: Option<&str>) -> Result<Engine> {
        let all = parse_steps(scenario.steps)?;
        let prefix = match taken {
            None => all.clone(),
            Some(text) => {
                let prefix = parse_steps(text)?;
                if !all.starts_with(&prefix) {
                    return Err(StepError::NotInScenario {
                        name: scenario.name.to_string(),
                        steps: encode_steps(&prefix),
                    });
                }
                prefix
            }
        };
        let mut engine = Engine::starting(scenario.n, scenario.seed, scenario.start)?;
        engine.take_all(prefix)?;
        engine.plan = Some(Plan {
            scenario,
            steps: all,
        });
        Ok(engine)
    }

    /// Takes each step in turn; the first refused one fails the whole list, naming its
    /// position.
    fn take_all(&mut self, steps: Vec<Step>) -> Result<()> {
        for (i, step) in steps.into_iter().enumerate() {
            let text = step.to_string();
            self.apply(step).map_err(|e| StepError::Replay {
                index: i + 1,
                step: text,
                error: Box::new(e),
            })?;
        }
        Ok(())
    }

    /// The loaded scenario's next step, if a scenario is loaded and a step is left.
    pub fn planned_next(&self) -> Option<&Step> {
        let plan = self.plan.as_ref()?;
        plan.steps.get(self.steps.len())
    }

    /// Takes the loaded scenario's next step.
    pub fn next_step(&mut self) -> Result<()> {
        let next = self.planned_next().cloned().ok_or_else(|| {
            StepError::NotNow(match &self.plan {
                Some(p) => Refusal::new(
                    format!(
                        "scenario {} has no step left (all {} taken)",
                        p.scenario.name,
                        p.steps.len()
                    ),
                    "load it again from the start, or take steps of your own",
                ),
                None => Refusal::new(
                    "no prepared scenario is loaded",
                    "load one with its step by step button",
                ),
            })
        })?;
        self.apply(next)
    }

    /// Takes every step left in the loaded scenario.
    pub fn run_to_end(&mut self) -> Result<()> {
        if self.plan.is_none() {
            return self.next_step();
        }
        while self.planned_next().is_some() {
            self.next_step()?;
        }
        Ok(())
    }

    /// Votes needed to win an election.
    pub fn quorum(&self) -> usize {
        self.n as usize / 2 + 1
    }

    /// The steps taken so far.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// Every node that has been leader of `term`.
    pub fn leaders_of(&self, term: Term) -> Vec<NodeId> {
        self.terms
            .get(&term)
            .map(|t| t.leaders.iter().copied().collect())
            .unwrap_or_default()
    }

    /// The ballot log.
    pub fn log(&self) -> &[String] {
        &self.log
    }

    /// The bully model.
    pub fn bully(&self) -> &Bully {
        &self.bully
    }

    fn say(&mut self, line: String) {
        if self.log.len() >= LOG_LINES_MAX {
            self.log.remove(0);
        }
        self.log.push(line);
    }

    fn check_node(&self, id: NodeId) -> Result<()> {
        if self.slots.contains_key(&id) {
            Ok(())
        } else {
            Err(StepError::UnknownNode {
                node: id,
                nodes: self.n,
            })
        }
    }

    fn running(&self, id: NodeId) -> bool {
        let s = &self.slots[&id];
        s.node.is_some() && !s.paused
    }

    /// Whether the network carries a message from `a` to `b` now (the partition only).
    fn linked(&self, a: NodeId, b: NodeId) -> bool {
        self.side.is_empty() || self.side.contains(&a) == self.side.contains(&b)
    }

    /// Why `step` cannot be taken now and what would make it possible, or `None` if it
    /// can. Changes nothing: the page asks this of every button it shows.
    pub fn refusal(&self, step: &Step) -> Option<StepError> {
        if self.steps.len() >= STEPS_MAX {
            return Some(StepError::TooMany(self.steps.len() + 1));
        }
        for id in step.nodes() {
            if let Err(e) = self.check_node(id) {
                return Some(e);
            }
        }
        self.check(step).err()
    }

    /// Takes one step. A step that cannot be taken now changes nothing and says why. A
    /// step other than the loaded scenario's next one leaves the scenario.
    pub fn apply(&mut self, step: Step) -> Result<()> {
        if let Some(e) = self.refusal(&step) {
            return Err(e);
        }
        if self.planned_next() != Some(&step) {
            self.plan = None;
        }
        self.say(format!("— step {}: {step}", self.steps.len() + 1));
        self.steps.push(step.clone());
        match step {
            Step::Wait { ticks } => {
                for _ in 0..ticks {
                    self.tick_all();
                    self.deliver_all();
                }
                self.bully_round();
            }
            Step::Tick { node, ticks } => {
                for _ in 0..ticks {
                    self.tick(node);
                }
                self.bully_round();
            }
            Step::Timeout { node } => {
                // The timer fires within 2T of its last reset, so 2T + 1 ticks always suffice.
                let limit = 2 * self.slots[&node].config.election_timeout_ticks + 1;
                for _ in 0..limit {
                    let first_new = self.next_msg;
                    self.tick(node);
                    let campaigned = self.net.iter().any(|m| {
                        m.id >= first_new
                            && m.from == node
                            && matches!(m.msg.body, Body::PreVote { .. } | Body::RequestVote { .. })
                    });
                    if campaigned || self.slots[&node].seen.role == Role::Leader {
                        break;
                    }
                }
                self.forecast_pre_vote(node);
                self.bully_round();
            }
            Step::Deliver { from, to } => {
                let at = self.first(from, to).expect("checked");
                let m = self.net.remove(at);
                self.deliver(m);
            }
            Step::Drop { from, to } => {
                let at = self.first(from, to).expect("checked");
                let m = self.net.remove(at);
                self.say(format!("dropped: {}", m.text));
            }
            Step::Settle => {
                for _ in 0..SETTLE_ROUNDS_MAX {
                    if !self.deliver_all() {
                        break;
                    }
                }
            }
            Step::Pause { node } => {
                self.slots.get_mut(&node).expect("checked").paused = true;
                let what = if self.slots[&node].seen.role == Role::Leader {
                    "its heartbeats stop"
                } else {
                    "it sends and hears nothing"
                };
                self.say(format!("node {node} freezes (a long pause): {what}"));
                self.bully.set_up(node, false);
            }
            Step::Resume { node } => {
                let slot = self.slots.get_mut(&node).expect("checked");
                slot.paused = false;
                let missed = std::mem::take(&mut slot.missed_ticks);
                let app = &self.apps[&node];
                let belief = match app.token {
                    Some(t) => format!(
                        "; its application still believes it holds {ELECTION} with token {t}"
                    ),
                    None => String::new(),
                };
                self.say(format!(
                    "node {node} wakes after missing {missed} ticks and catches up with its clock first{belief}"
                ));
                for _ in 0..missed {
                    self.tick(node);
                }
                self.bully.set_up(node, true);
                self.bully_round();
            }
            Step::Partition { side } => {
                self.side = side.iter().copied().collect();
                let other: Vec<NodeId> = (1..=self.n).filter(|i| !self.side.contains(i)).collect();
                self.say(format!(
                    "the network splits: {{{}}} | {{{}}}",
                    list(&side),
                    list(&other)
                ));
            }
            Step::Heal => {
                self.side.clear();
                self.say("the network heals".to_string());
            }
            Step::Crash { node } => {
                let slot = self.slots.get_mut(&node).expect("checked");
                slot.node = None;
                slot.paused = false;
                slot.missed_ticks = 0;
                let disk = slot.disk.recover().expect("memory storage never fails");
                self.net.retain(|m| m.to != node);
                self.say(format!(
                    "node {node} crashes: it keeps only its disk (term {}, vote {}, {} log entries)",
                    disk.hard_state.term,
                    disk.hard_state.vote.map_or("none".to_string(), |v| format!("node {v}")),
                    disk.entries.len(),
                ));
                self.bully.set_up(node, false);
            }
            Step::Restart { node } => {
                let slot = self.slots.get_mut(&node).expect("checked");
                let recovered = slot.disk.recover().expect("memory storage never fails");
                let restarted = Node::new(slot.config.clone(), recovered)
                    .expect("a disk this engine wrote is consistent");
                slot.seen = restarted.status();
                // A node that starts refuses votes for an election timeout, as if it had
                // just heard from a leader.
                slot.heard = Heard {
                    leader: None,
                    tick: slot.seen.now_tick,
                };
                slot.pre_vote_round_tick = None;
                slot.node = Some(restarted);
                let s = self.slots[&node].seen.clone();
                self.say(format!(
                    "node {node} restarts from its disk as a follower in term {} (vote {})",
                    s.term,
                    s.vote.map_or("none".to_string(), |v| format!("node {v}"))
                ));
                self.drive(node);
                self.bully.set_up(node, true);
                self.bully_round();
            }
            Step::Hold { node } => {
                let leader = self.leader_for(node).expect("checked");
                self.propose(
                    leader,
                    Command::Grant {
                        ttl_ticks: SESSION_TTL_TICKS,
                    },
                    Pending::Grant { app: node },
                );
                self.app(node).doing = format!("asks leader {leader} for a session");
            }
            Step::Write { node } => {
                let leader = self.leader_for(node).expect("checked");
                let token = self.apps[&node].token.expect("checked");
                self.say(format!(
                    "node {node}'s application writes {KEY} with token {token} (through leader {leader})"
                ));
                self.propose(
                    leader,
                    Command::FencedPut {
                        key: KEY.to_string(),
                        value: format!("closed by node {node}").into_bytes(),
                        election: ELECTION.to_string(),
                        token,
                    },
                    Pending::Write { app: node, token },
                );
            }
        }
        Ok(())
    }

    fn app(&mut self, node: NodeId) -> &mut App {
        self.apps.get_mut(&node).expect("an app per node")
    }

    fn first(&self, from: NodeId, to: NodeId) -> Option<usize> {
        self.net.iter().position(|m| m.from == from && m.to == to)
    }

    fn tick_all(&mut self) {
        let ids: Vec<NodeId> = self.slots.keys().copied().collect();
        for id in ids {
            let slot = self.slots.get_mut(&id).expect("listed");
            if slot.node.is_none() {
                continue;
            }
            if slot.paused {
                slot.missed_ticks += 1;
                continue;
            }
            self.tick(id);
        }
        self.keepalives();
    }

    /// Every running application with a session renews it at the leader it reaches.
    fn keepalives(&mut self) {
        let holders: Vec<(NodeId, SessionId)> = self
            .apps
            .iter()
            .filter_map(|(id, a)| a.session.map(|s| (*id, s)))
            .filter(|(id, _)| self.running(*id))
            .collect();
        for (app, session) in holders {
            let Ok(leader) = self.leader_for(app) else {
                continue;
            };
            let tag = self.next_tag;
            self.next_tag += 1;
            let node = self.slots.get_mut(&leader).and_then(|s| s.node.as_mut());
            if let Some(node) = node {
                // A refused keepalive (a session already gone) changes nothing; the
                // application learns of it from the leader change it observes.
                let _ = node.keepalive(session, tag);
            }
            self.drive(leader);
        }
    }

    fn tick(&mut self, id: NodeId) {
        let slot = self.slots.get_mut(&id).expect("known node");
        if let Some(node) = slot.node.as_mut() {
            let led = node.role() == Role::Leader;
            node.tick();
            if led {
                // A leader's tick is contact with a leader (itself): after stepping down it
                // still refuses votes for an election timeout.
                slot.heard = Heard {
                    leader: Some(id),
                    tick: node.status().now_tick,
                };
            }
        }
        self.drive(id);
    }

    /// Delivers every message the network can now; true if any was delivered or lost.
    fn deliver_all(&mut self) -> bool {
        let mut any = false;
        let batch = std::mem::take(&mut self.net);
        let mut keep = Vec::new();
        for m in batch {
            if self.slots[&m.from].paused || self.slots[&m.to].paused {
                keep.push(m);
                continue;
            }
            any = true;
            self.deliver(m);
        }
        // Messages sent while delivering were appended to self.net; the held ones go first.
        keep.append(&mut self.net);
        self.net = keep;
        any
    }

    fn deliver(&mut self, m: InFlight) {
        if !self.linked(m.from, m.to) {
            if !matches!(
                m.msg.body,
                Body::AppendEntries { .. } | Body::AppendEntriesResponse { .. }
            ) {
                self.say(format!("lost in the partition: {}", m.text));
            }
            return;
        }
        if self.slots[&m.to].node.is_none() {
            return;
        }
        // A ballot the receiver may refuse: say why, once it has.
        let foreseen = self.ballot_refusal(&m);
        let first_new = self.next_msg;
        let (from, to, term) = (m.from, m.to, m.term);
        let ballot = match m.msg.body {
            Body::PreVote { .. } => Some(true),
            Body::RequestVote { .. } => Some(false),
            _ => None,
        };
        let contact = matches!(
            m.msg.body,
            Body::AppendEntries { .. } | Body::InstallSnapshot { .. }
        );
        match m.msg.body {
            Body::AppendEntries { .. } | Body::AppendEntriesResponse { .. } => {}
            Body::RequestVoteResponse { granted } => {
                if granted {
                    self.terms
                        .entry(m.term)
                        .or_default()
                        .candidates
                        .entry(m.to)
                        .or_default()
                        .insert(m.from);
                }
                self.say(format!("delivered: {}", m.text));
            }
            _ => self.say(format!("delivered: {}", m.text)),
        }
        let slot = self.slots.get_mut(&to).expect("known node");
        if let Some(node) = slot.node.as_mut() {
            // The core refuses malformed messages without changing; these came from peers.
            let _ = node.step(m.msg);
            let now = node.status();
            if contact && now.role == Role::Follower && now.leader == Some(from) && now.term == term
            {
                slot.heard = Heard {
                    leader: Some(from),
                    tick: now.now_tick,
                };
            }
        }
        self.drive(to);
        if let Some(pre_vote) = ballot {
            self.explain_answer(pre_vote, from, to, term, first_new, foreseen);
        }
    }

    fn propose(&mut self, at: NodeId, command: Command, why: Pending) {
        let node = self.slots.get_mut(&at).and_then(|s| s.node.as_mut());
        let Some(node) = node else { return };
        match node.propose(command) {
            Ok(p) => {
                self.pending.insert((at, p.index), (p.term, why));
            }
            Err(e) => self.say(format!("leader {at} refuses the proposal: {e}")),
        }
        self.drive(at);
    }

    /// The driver loop after any input to `id`: persist, advance, queue the messages, hand
    /// out results; then describe what changed.
    fn drive(&mut self, id: NodeId) {
        let mut follow_ups = Vec::new();
        let mut lines = Vec::new();
        loop {
            let slot = self.slots.get_mut(&id).expect("known node");
            let Some(node) = slot.node.as_mut() else {
                break;
            };
            if !node.has_ready() {
                break;
            }
            let ready = node.ready();
            slot.disk
                .persist(
                    ready.persist.hard_state.as_ref(),
                    ready.persist.snapshot.as_ref(),
                    &ready.persist.entries,
                )
                .expect("memory storage never fails");
            node.advance();
            for msg in ready.then.messages {
                if matches!(msg.body, Body::PreVote { .. }) {
                    slot.pre_vote_round_tick = Some(node.status().now_tick);
                }
                let kind = msg.body.kind().to_string();
                let text = describe(&msg);
                if self.net.len() >= IN_FLIGHT_MAX {
                    self.net.remove(0);
                }
                self.net.push(InFlight {
                    id: self.next_msg,
                    from: msg.from,
                    to: msg.to,
                    term: msg.term,
                    kind,
                    text,
                    deliver_refused: None,
                    drop_refused: None,
                    msg,
                });
                self.next_msg += 1;
            }
            for a in ready.then.applied {
                if let Command::Expire { session } = a.command.unsealed() {
                    if node.role() == Role::Leader {
                        lines.push(format!(
                            "leader {id} expires session {session}: no keepalive reached it for the session's TTL"
                        ));
                    }
                }
                if let Some((term, why)) = self.pending.remove(&(id, a.index)) {
                    if term == a.term {
                        follow_ups.push((why, a.response));
                    }
                }
            }
            for line in lines.drain(..) {
                self.say(line);
            }
            for change in ready.then.leader_changes {
                if change.election != ELECTION {
                    continue;
                }
                // Each application observes its own node's replica.
                let app = self.app(id);
                match &change.leader {
                    Some(l) if Some(l.session) == app.session => {
                        app.token = Some(l.token);
                        app.doing = format!("leads {ELECTION} with token {}", l.token);
                        let line = format!(
                            "node {id}'s application now leads {ELECTION}: fencing token {}",
                            l.token
                        );
                        self.say(line);
                    }
                    Some(l) if app.token.is_some() => {
                        app.token = None;
                        app.doing = format!("lost {ELECTION} (token {} is newer)", l.token);
                        let line = format!(
                            "node {id}'s application learns it no longer leads {ELECTION} (token {} took over)",
                            l.token
                        );
                        self.say(line);
                    }
                    _ => {}
                }
            }
        }
        self.observe(id);
        for (why, response) in follow_ups {
            self.follow_up(id, why, response);
        }
    }

    fn follow_up(&mut self, leader: NodeId, why: Pending, response: Response) {
        match (why, response) {
            (Pending::Grant { app }, Response::Granted { session, .. }) => {
                self.app(app).session = Some(session);
                self.app(app).doing = format!("campaigns in {ELECTION} with session {session}");
                self.say(format!(
                    "node {app}'s application gets session {session} (ttl {SESSION_TTL_TICKS} ticks) and campaigns in {ELECTION}"
                ));
                self.propose(
                    leader,
                    Command::Campaign {
                        election: ELECTION.to_string(),
                        session,
                        value: format!("node {app}").into_bytes(),
                    },
                    Pending::Campaign { app },
                );
            }
            (Pending::Campaign { app }, Response::Campaigned { position, .. }) if position > 0 => {
                self.app(app).doing = format!("waits in line for {ELECTION} (position {position})");
                self.say(format!(
                    "node {app}'s application waits in line for {ELECTION}: {position} ahead of it"
                ));
            }
            (Pending::Write { app, token }, Response::Put) => self.say(format!(
                "the fence accepts node {app}'s write of {KEY} with token {token}"
            )),
            (Pending::Write { app, token }, Response::Rejected(e)) => {
                let why = match e {
                    SmError::StaleToken { current, .. } => {
                        format!("{KEY} already took token {current}")
                    }
                    SmError::TokenSuperseded { current, .. } => {
                        format!("{ELECTION} has moved on to token {current}")
                    }
                    other => other.to_string(),
                };
                self.say(format!(
                    "the fence REJECTS node {app}'s late write with old token {token}: {why}"
                ));
            }
            (_, Response::Rejected(e)) => self.say(format!("the cluster refuses: {e}")),
            _ => {}
        }
    }

    /// Describes what changed on node `id` since it was last looked at.
    fn observe(&mut self, id: NodeId) {
        let Some(now) = self.slots[&id].node.as_ref().map(|n| n.status()) else {
            return;
        };
        let was = std::mem::replace(
            &mut self.slots.get_mut(&id).expect("known").seen,
            now.clone(),
        );
        let q = self.quorum();
        if now.role != was.role || now.term != was.term {
            match now.role {
                Role::PreCandidate => self.say(format!(
                    "node {id} timed out without hearing a leader: it asks for pre-votes for term {} (needs {q} of {}, its own included)",
                    now.term + 1,
                    self.n
                )),
                Role::Candidate => {
                    self.terms.entry(now.term).or_default().candidates.entry(id).or_default().insert(id);
                    self.say(format!(
                        "node {id} bumps its term to {} and votes for itself; it needs {q} of {} votes",
                        now.term, self.n
                    ))
                }
                Role::Leader => {
                    self.terms.entry(now.term).or_default().leaders.insert(id);
                    let voters = self.terms[&now.term]
                        .candidates
                        .get(&id)
                        .map(|v| v.iter().copied().collect::<Vec<_>>())
                        .unwrap_or_default();
                    self.say(format!(
                        "node {id} is LEADER of term {} with votes from {} ({q} needed)",
                        now.term,
                        list(&voters)
                    ))
                }
                Role::Follower if was.role == Role::Leader => self.say(format!(
                    "node {id} steps down: it is a follower in term {}",
                    now.term
                )),
                Role::Follower if was.role != Role::Follower => self.say(format!(
                    "node {id} gives up its campaign and follows (term {})",
                    now.term
                )),
                Role::Follower => self.say(format!("node {id} moves to term {}", now.term)),
            }
        }
        if now.vote != was.vote || now.term != was.term {
            if let Some(v) = now.vote {
                if v != id {
                    self.say(format!("node {id} voted for node {v} in term {}", now.term));
                }
            }
        }
        if let (Role::Follower, Some(leader)) = (now.role, now.leader) {
            if now.leader != was.leader {
                self.say(format!(
                    "node {id} follows leader {leader} in term {}",
                    now.term
                ));
            }
        }
        self.close_terms(now.term);
    }

    /// Once any node has moved past a term, says how that term ended.
    fn close_terms(&mut self, current: Term) {
        let q = self.quorum();
        let mut lines = Vec::new();
        for (term, rec) in self.terms.range_mut(..current) {
            if rec.closed {
                continue;
            }
            rec.closed = true;
            if rec.leaders.is_empty() && !rec.candidates.is_empty() {
                let tally: Vec<String> = rec
                    .candidates
                    .iter()
                    .map(|(c, v)| format!("node {c} had {}", v.len()))
                    .collect();
                let split = if rec.candidates.len() > 1 {
                    "split vote: "
                } else {
                    ""
                };
                lines.push(format!(
                    "no leader in term {term}: {split}{} ({q} needed)",
                    tally.join(", ")
                ));
            }
        }
        for l in lines {
            self.say(l);
        }
    }

    fn bully_round(&mut self) {
        let side = self.side.clone();
        let reach =
            move |a: NodeId, b: NodeId| side.is_empty() || side.contains(&a) == side.contains(&b);
        self.bully.round(&reach);
    }

    /// The state as the page shows it.
    pub fn view(&self) -> View {
        let nodes = self
            .slots
            .iter()
            .map(|(id, s)| {
                let state = match (&s.node, s.paused) {
                    (None, _) => "crashed",
                    (Some(_), true) => "paused",
                    _ => "up",
                };
                let log = match &s.node {
                    Some(n) => n
                        .log_entries()
                        .iter()
                        .map(|e| format!("{}@{} {}", e.index, e.term, entry_text(&e.payload)))
                        .collect(),
                    None => Vec::new(),
                };
                NodeView {
                    id: *id,
                    state: state.to_string(),
                    role: role_name(s.seen.role).to_string(),
                    term: s.seen.term,
                    vote: s.seen.vote,
                    leader: s.seen.leader,
                    commit: s.seen.commit,
                    log,
                    now_tick: s.seen.now_tick,
                    heard_from: s.heard.leader,
                    heard_tick: s.heard.tick,
                    vote_lease_until_tick: self.vote_lease_until(*id),
                    times_out_at_tick: self.ticks_to_timeout(*id).map(|k| s.seen.now_tick + k),
                    app: self.apps[id].clone(),
                    actions: self.actions(*id),
                }
            })
            .collect();
        let q = self.quorum();
        let newest = self.slots.values().map(|s| s.seen.term).max().unwrap_or(0);
        let terms = self
            .terms
            .iter()
            .map(|(term, rec)| {
                let leaders: Vec<NodeId> = rec.leaders.iter().copied().collect();
                let outcome = match leaders.as_slice() {
                    [one] => format!("leader: node {one}"),
                    [] if *term < newest => {
                        if rec.candidates.len() > 1 {
                            "no leader (split vote)".to_string()
                        } else {
                            "no leader".to_string()
                        }
                    }
                    [] => format!("no leader yet ({q} votes needed)"),
                    many => format!("SAFETY VIOLATION: leaders {}", list(many)),
                };
                TermView {
                    term: *term,
                    leaders,
                    candidates: rec
                        .candidates
                        .iter()
                        .map(|(c, v)| (*c, v.iter().copied().collect()))
                        .collect(),
                    outcome,
                }
            })
            .collect();
        // The fenced key as the most advanced running replica has it.
        let fence = self
            .slots
            .values()
            .filter_map(|s| s.node.as_ref())
            .max_by_key(|n| n.status().applied)
            .and_then(|n| n.state_machine().fenced(KEY).cloned())
            .map(|f| (String::from_utf8_lossy(&f.value).into_owned(), f.token));
        let in_flight = self
            .net
            .iter()
            .map(|m| {
                let mut m = m.clone();
                let (deliver, drop) = self.in_flight_refusals(&m);
                m.deliver_refused = deliver;
                m.drop_refused = drop;
                m
            })
            .collect();
        let scenario = self.plan.as_ref().map(|p| {
            let next = self.planned_next();
            PlanView {
                name: p.scenario.name.to_string(),
                title: p.scenario.title.to_string(),
                at: self.steps.len(),
                total: p.steps.len(),
                next: next.map(|s| s.to_string()),
                next_does: next.map(|s| self.foresee(s)),
            }
        });
        View {
            n: self.n,
            seed: self.seed,
            start: self.start,
            scenario,
            quorum: q,
            steps: encode_steps(&self.steps),
            nodes,
            in_flight,
            partition: self.side.iter().copied().collect(),
            terms,
            log: self.log.clone(),
            fence,
            bully: self.bully.clone(),
            bully_coordinators: self.bully.coordinators(),
        }
    }
}
