//! Why not, and what then: every step the engine refuses, every button the page disables
//! and every ballot a node refuses comes with the reason in words and what would make it
//! possible ("node 2 heard from leader 5 at tick 40 and keeps its lease until tick 55 …:
//! tick node 2 15 times before delivering, or wait 15 ticks").
//!
//! The reasons mirror the core's rules (`tenure_core::raft`): a node refuses every vote
//! and pre-vote for an election timeout T after it last heard from a leader (check-quorum,
//! which is what makes the leader's lease sound), votes once per term, and only for a log
//! at least as up to date as its own. The core keeps its timers private, so the engine
//! tracks the last contact itself (`Slot::heard`) and learns when a node's election timer
//! fires by ticking a copy of it; `tests/engine.rs` checks that every ballot refused in the
//! prepared scenarios gets a reason.

use tenure_core::message::Body;
use tenure_core::node::Role;
use tenure_core::types::{Index, NodeId, Term};

use super::{Action, Engine, InFlight, ELECTION};
use crate::bully::list;
use crate::step::{Refusal, Result, Step, StepError};

/// A ballot a node refuses or ignores: why, in its own words for the answer it sends (if
/// it sends one), and in full for the ballot log.
pub(super) struct BallotRefusal {
    /// The receiver's short reason, as the text of its answer ("I keep leader 5's lease
    /// until tick 55").
    short: String,
    /// Why, and what would make the ballot go the other way.
    refusal: Refusal,
}

/// What a node would do with a ballot delivered now.
enum Answer {
    Grant,
    Refuse(BallotRefusal),
}

fn refuse<T>(why: impl Into<String>, remedy: impl Into<String>) -> Result<T> {
    Err(StepError::NotNow(Refusal::new(why, remedy)))
}

/// `nodes 2, 3 and 4` or `node 2`.
fn nodes(ids: &[NodeId]) -> String {
    if ids.len() == 1 {
        format!("node {}", ids[0])
    } else {
        format!("nodes {}", list(ids))
    }
}

impl Engine {
    fn timeout_ticks(&self, id: NodeId) -> u64 {
        self.slots[&id].config.election_timeout_ticks
    }

    /// Why node `id` cannot take part now, if it is paused or crashed: `paused` and
    /// `crashed` say what that means for the step.
    fn down(&self, id: NodeId, paused: &str, crashed: &str) -> Option<Refusal> {
        let s = &self.slots[&id];
        if s.node.is_none() {
            Some(Refusal::new(
                format!("node {id} is crashed, so {crashed}"),
                format!("restart node {id} first"),
            ))
        } else if s.paused {
            Some(Refusal::new(
                format!("node {id} is paused, so {paused}"),
                format!("resume node {id} first"),
            ))
        } else {
            None
        }
    }

    /// Refuses a step that does not apply now, before anything changes, saying why and
    /// what would make it possible.
    pub(super) fn check(&self, step: &Step) -> Result<()> {
        let stopped = |node: NodeId, what: &str| -> Result<()> {
            match self.down(node, what, what) {
                Some(r) => Err(StepError::NotNow(r)),
                None => Ok(()),
            }
        };
        match step {
            Step::Tick { node, .. } => stopped(*node, "its clock cannot tick"),
            Step::Timeout { node } => {
                stopped(*node, "its election timer cannot run")?;
                let s = &self.slots[node].seen;
                if s.role == Role::Leader {
                    return refuse(
                        format!(
                            "node {node} leads term {} and a leader has no election timer (its own heartbeats keep the others following)",
                            s.term
                        ),
                        format!(
                            "stop its heartbeats (pause node {node}) or crash it, then time out a follower"
                        ),
                    );
                }
                Ok(())
            }
            Step::Deliver { from, to } | Step::Drop { from, to } => {
                if self.first(*from, *to).is_none() {
                    let others: Vec<NodeId> = self
                        .net
                        .iter()
                        .filter(|m| m.from == *from)
                        .map(|m| m.to)
                        .collect::<std::collections::BTreeSet<_>>()
                        .into_iter()
                        .collect();
                    let has = if others.is_empty() {
                        format!("node {from} has nothing in flight")
                    } else {
                        format!("node {from} has messages in flight to {}", nodes(&others))
                    };
                    return refuse(
                        format!("no message from node {from} to node {to} is in flight ({has})"),
                        format!(
                            "pick a message from the list, or let node {from} send one first (tick it, time it out, or deliver it a message)"
                        ),
                    );
                }
                if matches!(step, Step::Deliver { .. }) {
                    if let Some(mut r) =
                        self.down(*to, "it receives nothing", "nothing can reach it")
                    {
                        r.remedy = if self.slots[to].paused {
                            format!(
                                "resume node {to} first (the message waits in flight), or drop it"
                            )
                        } else {
                            format!("restart node {to} first, or drop the message")
                        };
                        return Err(StepError::NotNow(r));
                    }
                }
                Ok(())
            }
            Step::Pause { node } => {
                if self.slots[node].node.is_none() {
                    return refuse(
                        format!("node {node} is crashed, so there is no process to pause"),
                        format!("restart node {node} first"),
                    );
                }
                if self.slots[node].paused {
                    return refuse(
                        format!("node {node} is already paused"),
                        format!("resume node {node} first"),
                    );
                }
                Ok(())
            }
            Step::Resume { node } => {
                if self.slots[node].node.is_none() {
                    return refuse(
                        format!("node {node} is crashed, not paused"),
                        format!("restart node {node} instead"),
                    );
                }
                if !self.slots[node].paused {
                    return refuse(
                        format!("node {node} is running, not paused"),
                        format!("only a paused node resumes (pause node {node} first)"),
                    );
                }
                Ok(())
            }
            Step::Crash { node } if self.slots[node].node.is_none() => refuse(
                format!("node {node} is already crashed"),
                format!("restart node {node} first"),
            ),
            Step::Restart { node } if self.slots[node].node.is_some() => {
                if self.slots[node].paused {
                    refuse(
                        format!("node {node} is paused, not crashed"),
                        format!("resume node {node} instead, or crash it first"),
                    )
                } else {
                    refuse(
                        format!("node {node} is running"),
                        format!("only a crashed node restarts (crash node {node} first)"),
                    )
                }
            }
            Step::Partition { side } => {
                if side.is_empty() || side.len() as u64 >= self.n {
                    return refuse(
                        format!(
                            "a partition needs nodes on both sides, and this one names {} of the {} nodes",
                            side.len(),
                            self.n
                        ),
                        format!("name from 1 to {} nodes, as in partition-1.2", self.n - 1),
                    );
                }
                Ok(())
            }
            Step::Hold { node } => {
                if let Some(r) = self.down(
                    *node,
                    "its application is frozen with it",
                    "its application went down with it",
                ) {
                    return Err(StepError::NotNow(r));
                }
                let app = &self.apps[node];
                if app.session.is_some() || !app.doing.is_empty() {
                    return refuse(
                        format!(
                            "node {node}'s application already campaigns in {ELECTION} (it {})",
                            app.doing
                        ),
                        "each application campaigns once (campaign from another node's application)",
                    );
                }
                self.leader_for(*node).map(|_| ())
            }
            Step::Write { node } => {
                if let Some(r) = self.down(
                    *node,
                    "its application is frozen with it",
                    "its application went down with it",
                ) {
                    return Err(StepError::NotNow(r));
                }
                let app = &self.apps[node];
                if app.token.is_none() {
                    let (doing, remedy) = if app.doing.is_empty() {
                        (
                            "never campaigned".to_string(),
                            format!(
                                "campaign (app) on node {node} first, and write once it leads {ELECTION}"
                            ),
                        )
                    } else {
                        (
                            app.doing.clone(),
                            format!(
                                "only the holder of {ELECTION} writes (wait until node {node}'s application leads it)"
                            ),
                        )
                    };
                    return refuse(
                        format!(
                            "node {node}'s application holds no token for {ELECTION} (it {doing})"
                        ),
                        remedy,
                    );
                }
                self.leader_for(*node).map(|_| ())
            }
            _ => Ok(()),
        }
    }

    /// The leader an application on `node` reaches: the running leader of the highest term
    /// on its side of the network, as the client library finds it by following hints.
    pub(super) fn leader_for(&self, node: NodeId) -> Result<NodeId> {
        let leaders = |running: bool| {
            self.slots
                .iter()
                .filter(move |(id, s)| {
                    self.slots[id].node.is_some()
                        && self.running(**id) == running
                        && s.seen.role == Role::Leader
                })
                .max_by_key(|(id, s)| (s.seen.term, **id))
                .map(|(id, _)| *id)
        };
        if let Some(l) = self
            .slots
            .iter()
            .filter(|(id, s)| {
                self.running(**id) && s.seen.role == Role::Leader && self.linked(node, **id)
            })
            .max_by_key(|(id, s)| (s.seen.term, **id))
            .map(|(id, _)| *id)
        {
            return Ok(l);
        }
        let t = self.timeout_ticks(node);
        let (why, remedy) = if let Some(l) = leaders(true) {
            (
                format!("leader {l} is on the other side of the partition"),
                "heal the network, or wait until this side elects a leader (if it holds a majority)"
                    .to_string(),
            )
        } else if let Some(l) = leaders(false) {
            (
                format!("leader {l} is paused"),
                format!("resume node {l}, or wait until the others elect a new leader (wait {t} ticks or more)"),
            )
        } else {
            (
                "no node leads yet".to_string(),
                format!("let the cluster elect a leader first (wait {t} ticks or more)"),
            )
        };
        refuse(
            format!("node {node}'s application finds no leader it can reach ({why})"),
            remedy,
        )
    }

    /// The tick until which node `id` refuses every vote because it heard from a leader (or
    /// started) less than an election timeout ago; `None` once that has run out, and for a
    /// leader or a crashed node.
    pub(super) fn vote_lease_until(&self, id: NodeId) -> Option<u64> {
        let s = &self.slots[&id];
        if s.node.is_none() || s.seen.role == Role::Leader {
            return None;
        }
        let until = s.heard.tick + self.timeout_ticks(id);
        (s.seen.now_tick < until).then_some(until)
    }

    fn in_vote_lease(&self, id: NodeId) -> bool {
        self.slots[&id].seen.role == Role::Leader || self.vote_lease_until(id).is_some()
    }

    /// "heard from leader 5 at tick 40" or "started at tick 0".
    fn heard_words(&self, id: NodeId) -> String {
        let h = self.slots[&id].heard;
        match h.leader {
            Some(l) if l == id => format!("led until tick {}", h.tick),
            Some(l) => format!("heard from leader {l} at tick {}", h.tick),
            None => format!("started at tick {}", h.tick),
        }
    }

    /// How many ticks of its own clock node `id` needs until its election timer fires, if
    /// it hears nothing meanwhile; found by ticking a copy of the node (the core keeps the
    /// timer private). `None` for a leader and a node that is not running.
    pub(super) fn ticks_to_timeout(&self, id: NodeId) -> Option<u64> {
        let slot = &self.slots[&id];
        let node = slot.node.as_ref()?;
        if slot.paused || node.role() == Role::Leader {
            return None;
        }
        let mut probe = node.clone();
        // The timer fires within 2T of its last reset.
        for k in 1..=2 * slot.config.election_timeout_ticks + 1 {
            probe.tick();
            if !probe.has_ready() {
                continue;
            }
            let ready = probe.ready();
            if ready
                .then
                .messages
                .iter()
                .any(|m| matches!(m.body, Body::PreVote { .. } | Body::RequestVote { .. }))
            {
                return Some(k);
            }
            probe.advance();
        }
        None
    }

    /// The last entry of node `id`'s log as (index, term), if the engine can see it.
    fn last_entry(&self, id: NodeId) -> Option<(Index, Term)> {
        let node = self.slots[&id].node.as_ref()?;
        let last = node.status().last_index;
        match node.log_entries().last() {
            Some(e) => Some((e.index, e.term)),
            None if last == 0 => Some((0, 0)),
            // Compacted into a snapshot: the engine does not know the last term.
            None => None,
        }
    }

    /// The lease refusal of node `y`, with the ticks it has left.
    fn lease_refusal(&self, y: NodeId, x: NodeId, what: &str) -> BallotRefusal {
        let s = &self.slots[&y];
        let t = self.timeout_ticks(y);
        let until = s.heard.tick + t;
        let left = until.saturating_sub(s.seen.now_tick);
        let whose = match s.heard.leader {
            Some(l) => format!("leader {l}'s lease"),
            None => "the lease of whichever leader it may have".to_string(),
        };
        BallotRefusal {
            short: format!("I keep {whose} until tick {until}"),
            refusal: Refusal::new(
                format!(
                    "node {y} {} and keeps {whose} until tick {until} (T = {t} ticks), {what}",
                    self.heard_words(y)
                ),
                format!(
                    "tick node {y} {left} times before delivering (tick-{y}-{left}), or wait {left} ticks and time node {x} out again"
                ),
            ),
        }
    }

    /// What node `m.to` would do with the ballot `m` (a pre-vote or vote request) if it
    /// were delivered now, mirroring the core's rules in their order.
    fn answer(&self, m: &InFlight) -> Answer {
        let (x, y, term) = (m.from, m.to, m.term);
        let (pre_vote, x_last, transfer) = match m.msg.body {
            Body::PreVote {
                last_log_index,
                last_log_term,
            } => (true, (last_log_index, last_log_term), false),
            Body::RequestVote {
                last_log_index,
                last_log_term,
                transfer,
            } => (false, (last_log_index, last_log_term), transfer),
            _ => return Answer::Grant,
        };
        let Some(node) = self.slots[&y].node.as_ref() else {
            return Answer::Grant;
        };
        let s = node.status();
        let what = if pre_vote { "pre-vote" } else { "vote" };
        let refusal = |short: String, why: String, remedy: String| {
            Answer::Refuse(BallotRefusal {
                short,
                refusal: Refusal::new(why, remedy),
            })
        };
        if term < s.term || (pre_vote && term == s.term) {
            return refusal(
                format!("my term is {}", s.term),
                format!(
                    "node {y} is already in term {}, and node {x}'s {what} for term {term} is not for a newer one",
                    s.term
                ),
                format!(
                    "node {x} learns of term {} from node {y}'s messages; it can then time out again and ask for term {}",
                    s.term,
                    s.term + 1
                ),
            );
        }
        if s.role == Role::Leader && !(transfer && term > s.term) {
            let ignores = !pre_vote && term > s.term;
            return refusal(
                format!("I lead term {}", s.term),
                format!(
                    "node {y} leads term {} itself, and a leader {}",
                    s.term,
                    if ignores {
                        "ignores vote requests for a newer term without answering"
                    } else {
                        "grants no votes"
                    }
                ),
                format!(
                    "ask its followers; or stop node {y}'s heartbeats and let their lease run out"
                ),
            );
        }
        let vote = if term > s.term { None } else { s.vote };
        if !pre_vote && vote.is_some_and(|v| v != x) {
            let v = vote.expect("checked");
            let (whom, who) = if v == y {
                ("myself".to_string(), "itself (it campaigns)".to_string())
            } else {
                (format!("node {v}"), format!("node {v}"))
            };
            return refusal(
                format!("I already voted for {whom}"),
                format!(
                    "node {y} already voted for {who} in term {term}, and a node votes once per term"
                ),
                format!(
                    "node {x} can win only in a later term (time it out again, and deliver its requests before anyone else's)"
                ),
            );
        }
        let lease_applies = !transfer && (pre_vote || vote != Some(x));
        if lease_applies && self.in_vote_lease(y) {
            let what = if !pre_vote && term > s.term {
                "so until then it ignores vote requests for a newer term without answering"
            } else {
                "so until then it refuses every vote"
            };
            return Answer::Refuse(self.lease_refusal(y, x, what));
        }
        let mine = self.last_entry(y);
        let (xi, xt) = x_last;
        if let Some((i, t)) = mine {
            if xt < t || (xt == t && xi < i) {
                return refusal(
                    "your log is behind mine".to_string(),
                    format!(
                        "node {x}'s log ends at entry {xi}@{xt}, behind node {y}'s {i}@{t}, and a node votes only for a log at least as up to date as its own"
                    ),
                    "time out a node whose log is the newest instead".to_string(),
                );
            }
        }
        if pre_vote && s.role == Role::PreCandidate {
            let round = self.slots[&y].pre_vote_round_tick.unwrap_or(0);
            // The core's rule (`pre_vote_round_goes_first`): a round started this tick or
            // the one before gives way only to a better log, or an as good one and a
            // lower id.
            let as_good = mine == Some((xi, xt));
            if s.now_tick <= round + 1 && as_good && y < x {
                return refusal(
                    "my own pre-vote round goes first".to_string(),
                    format!(
                        "node {y} started its own pre-vote round at tick {round}, and a fresh round gives way only to a better log, or an as good one from a lower id"
                    ),
                    format!(
                        "tick node {y} twice so that its round is no longer fresh, or let its round finish first"
                    ),
                );
            }
        }
        Answer::Grant
    }

    /// Why node `m.to` would refuse the ballot `m` delivered now, if it would.
    pub(super) fn ballot_refusal(&self, m: &InFlight) -> Option<BallotRefusal> {
        match self.answer(m) {
            Answer::Grant => None,
            Answer::Refuse(r) => Some(r),
        }
    }

    /// After a pre-vote or vote request from `x` reached `y`: if `y` refused it or ignored
    /// it, says why in the ballot log and in the text of its answer.
    pub(super) fn explain_answer(
        &mut self,
        pre_vote: bool,
        x: NodeId,
        y: NodeId,
        term: Term,
        first_new: u64,
        foreseen: Option<BallotRefusal>,
    ) {
        let answer = self.net.iter_mut().find(|a| {
            a.id >= first_new
                && a.from == y
                && a.to == x
                && matches!(
                    a.msg.body,
                    Body::PreVoteResponse { .. } | Body::RequestVoteResponse { .. }
                )
        });
        let refused = match &answer {
            Some(a) => matches!(
                a.msg.body,
                Body::PreVoteResponse { granted: false }
                    | Body::RequestVoteResponse { granted: false }
            ),
            // No answer at all: a vote request the receiver ignores.
            None => !pre_vote && self.slots[&y].node.is_some(),
        };
        if !refused {
            return;
        }
        let what = if pre_vote { "pre-vote" } else { "vote" };
        let verb = if answer.is_some() {
            "refuses"
        } else {
            "ignores (no answer)"
        };
        let line = match foreseen {
            Some(r) => {
                if let Some(a) = answer {
                    let base = a.text.split(" (").next().unwrap_or(&a.text).to_string();
                    a.text = format!("{base} ({})", r.short);
                }
                format!(
                    "node {y} {verb} node {x}'s {what} request for term {term}, because {}",
                    r.refusal
                )
            }
            None => format!(
                "node {y} {verb} node {x}'s {what} request for term {term} (for a reason this page cannot see)"
            ),
        };
        self.say(line);
    }

    /// Right after node `x` timed out: if the pre-votes it asks for cannot win now, says
    /// who will refuse them and what would make them succeed. This is the path a person
    /// takes first (stop the leader's heartbeats, time out a follower), and the followers
    /// still keep the old leader's lease.
    pub(super) fn forecast_pre_vote(&mut self, x: NodeId) {
        let sent: Vec<&InFlight> = self
            .net
            .iter()
            .filter(|m| m.from == x && matches!(m.msg.body, Body::PreVote { .. }))
            .collect();
        if self.slots[&x].seen.role != Role::PreCandidate || sent.is_empty() {
            return;
        }
        let q = self.quorum();
        let mut grants = 1;
        let mut leases: Vec<NodeId> = Vec::new();
        let mut stopped: Vec<String> = Vec::new();
        let mut other: Vec<String> = Vec::new();
        // Waking the nodes that are down, if waiting alone elects nobody.
        let mut wake: Vec<String> = Vec::new();
        // The newest request to each voter (a node that timed out twice has two).
        let mut latest: std::collections::BTreeMap<NodeId, &InFlight> = Default::default();
        for m in sent {
            latest.insert(m.to, m);
        }
        for (y, m) in latest {
            if let Some(r) = self.down(y, "it answers nothing", "it answers nothing") {
                stopped.push(r.why);
                // A paused or crashed leader would not grant a vote once back.
                if self.slots[&y].seen.role != Role::Leader {
                    wake.push(r.remedy);
                }
            } else if !self.linked(x, y) {
                stopped.push(format!("node {y} is on the other side of the partition"));
                wake.push("heal the network".to_string());
            } else {
                match self.answer(m) {
                    Answer::Grant => grants += 1,
                    Answer::Refuse(_) if self.vote_lease_until(y).is_some() => leases.push(y),
                    Answer::Refuse(r) => other.push(r.refusal.why),
                }
            }
        }
        if grants >= q {
            return;
        }
        let mut why = Vec::new();
        let mut ticks = Vec::new();
        if !leases.is_empty() {
            // Group the nodes that heard the same leader at the same tick.
            let mut groups: std::collections::BTreeMap<(Option<NodeId>, u64), Vec<NodeId>> =
                Default::default();
            for &y in &leases {
                let h = self.slots[&y].heard;
                groups.entry((h.leader, h.tick)).or_default().push(y);
                let until = h.tick + self.timeout_ticks(y);
                ticks.push((y, until.saturating_sub(self.slots[&y].seen.now_tick)));
            }
            for ((leader, tick), ys) in groups {
                let until = tick + self.timeout_ticks(ys[0]);
                let heard = match leader {
                    Some(l) if ys == [l] => format!("led until tick {tick}"),
                    Some(l) => format!("heard from leader {l} at tick {tick}"),
                    None => format!("started at tick {tick}"),
                };
                let verb = if ys.len() == 1 { "refuses" } else { "refuse" };
                why.push(format!(
                    "{} {heard} and {verb} every vote until tick {until} (T = {} ticks)",
                    nodes(&ys),
                    self.timeout_ticks(ys[0])
                ));
            }
        }
        why.extend(stopped);
        why.extend(other);
        let mut remedies: Vec<String> = Vec::new();
        let newest = self.slots.values().map(|s| s.seen.term).max().unwrap_or(0);
        match self.wait_for_leader(newest) {
            Some((k, winner, term)) => remedies.push(format!(
                "wait {k} ticks (by then node {winner} times out and wins term {term})"
            )),
            None => remedies.append(&mut wake),
        }
        if !ticks.is_empty() {
            let each = ticks.iter().all(|(_, k)| *k == ticks[0].1);
            let how = if each {
                let ids: Vec<NodeId> = ticks.iter().map(|(y, _)| *y).collect();
                let k = ticks[0].1;
                let suffix = if ids.len() == 1 { "" } else { " each" };
                format!("tick {} {k} times{suffix}", nodes(&ids))
            } else {
                let parts: Vec<String> = ticks
                    .iter()
                    .map(|(y, k)| format!("node {y} {k} times"))
                    .collect();
                format!("tick {}", parts.join(", "))
            };
            let steps: Vec<String> = ticks.iter().map(|(y, k)| format!("tick-{y}-{k}")).collect();
            remedies.push(format!(
                "{how} ({}) before delivering node {x}'s requests",
                steps.join(", ")
            ));
        }
        if remedies.is_empty() {
            remedies.push("time out another node".to_string());
        }
        let mut seen = std::collections::BTreeSet::new();
        remedies.retain(|r| seen.insert(r.clone()));
        self.say(format!(
            "node {x} cannot win its pre-vote yet: it needs {q} of {} (its own included) and would get {grants}, because {}. To make it possible: {}",
            self.n,
            why.join("; "),
            remedies.join("; or ")
        ));
    }

    /// How many ticks of `wait` until a running node leads a term above `term`, and who:
    /// found by waiting on a copy of the engine, exactly as the step would.
    fn wait_for_leader(&self, term: Term) -> Option<(u64, NodeId, Term)> {
        let mut probe = self.clone();
        let t = self
            .slots
            .values()
            .map(|s| s.config.election_timeout_ticks)
            .max()?;
        // Leases run out within T, timers fire within 2T more; a split vote costs another.
        for k in 1..=5 * t {
            probe.tick_all();
            probe.deliver_all();
            let leader = probe.slots.iter().find(|(id, s)| {
                probe.running(**id) && s.seen.role == Role::Leader && s.seen.term > term
            });
            if let Some((id, s)) = leader {
                return Some((k, *id, s.seen.term));
            }
        }
        None
    }

    /// The buttons of node `id`'s card, each with why it does not apply now.
    pub(super) fn actions(&self, id: NodeId) -> Vec<Action> {
        let leads = self.slots[&id].seen.role == Role::Leader && self.slots[&id].node.is_some();
        let pause = if leads { "stop heartbeats" } else { "pause" };
        let buttons = [
            ("time out", Step::Timeout { node: id }),
            ("tick", Step::Tick { node: id, ticks: 1 }),
            (pause, Step::Pause { node: id }),
            ("resume", Step::Resume { node: id }),
            ("crash", Step::Crash { node: id }),
            ("restart", Step::Restart { node: id }),
            ("isolate", Step::Partition { side: vec![id] }),
            ("campaign (app)", Step::Hold { node: id }),
            ("write (app)", Step::Write { node: id }),
        ];
        buttons
            .into_iter()
            .map(|(label, step)| {
                let mut refused = self.refusal(&step).map(|e| e.refusal());
                if matches!(step, Step::Partition { .. }) && !self.side.is_empty() {
                    // The step would replace the cut; the button makes one cut at a time.
                    let side: Vec<NodeId> = self.side.iter().copied().collect();
                    let rest: Vec<NodeId> =
                        (1..=self.n).filter(|i| !self.side.contains(i)).collect();
                    refused = Some(Refusal::new(
                        format!(
                            "the network is already split ({{{}}} | {{{}}})",
                            list(&side),
                            list(&rest)
                        ),
                        "heal the network first (isolate makes one cut at a time)",
                    ));
                }
                Action {
                    label: label.to_string(),
                    step: step.to_string(),
                    does: self.foresee(&step),
                    refused,
                }
            })
            .collect()
    }

    /// Why the deliver and drop buttons of message `m` do not apply now, if they do not.
    pub(super) fn in_flight_refusals(&self, m: &InFlight) -> (Option<Refusal>, Option<Refusal>) {
        let oldest = self
            .net
            .iter()
            .find(|o| o.from == m.from && o.to == m.to)
            .expect("m is in flight");
        if oldest.id != m.id {
            let r = Refusal::new(
                format!(
                    "an older message from node {} to node {} (#{}) is still in flight, and each link delivers in order",
                    m.from, m.to, oldest.id
                ),
                format!("deliver or drop #{} first", oldest.id),
            );
            return (Some(r.clone()), Some(r));
        }
        let deliver = Step::Deliver {
            from: m.from,
            to: m.to,
        };
        (self.refusal(&deliver).map(|e| e.refusal()), None)
    }

    /// What `step` would do now, in words: its description with what the engine knows
    /// (the message a delivery hands over, when a timer fires).
    pub fn foresee(&self, step: &Step) -> String {
        let does = step.describe();
        match step {
            Step::Timeout { node } => match self.ticks_to_timeout(*node) {
                Some(k) => format!(
                    "{does} (at its tick {}, {k} tick{} from now)",
                    self.slots[node].seen.now_tick + k,
                    if k == 1 { "" } else { "s" }
                ),
                None => does,
            },
            Step::Deliver { from, to } | Step::Drop { from, to } => match self.first(*from, *to) {
                Some(i) => format!("{does}: {}", self.net[i].text),
                None => does,
            },
            Step::Pause { node }
                if self
                    .slots
                    .get(node)
                    .is_some_and(|s| s.seen.role == Role::Leader) =>
            {
                format!("{does} (it leads, so its heartbeats stop)")
            }
            _ => does,
        }
    }
}
