//! Steps: what the person at the page does, one at a time, and their text form.
//!
//! A scenario is a seed and a list of steps; the list is written as comma-separated tokens
//! (`wait-14,timeout-1,deliver-1-3`) so that it fits in a URL's query string and replays
//! exactly. [`parse_steps`] reads it back, refusing anything it does not understand with a
//! [`StepError`] that names the offending token.

use std::fmt;

use tenure_core::types::NodeId;

/// Most steps in one scenario: a page's share link must stay a reasonable URL.
pub const STEPS_MAX: usize = 1_000;
/// Most ticks one `wait` or `tick` step may ask for.
pub const TICKS_PER_STEP_MAX: u64 = 1_000;

/// One thing the person does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Let `ticks` ticks pass on every running node, the network delivering everything it
    /// can after each tick (apps keep their sessions alive meanwhile).
    Wait {
        /// How many ticks.
        ticks: u64,
    },
    /// Tick one node's clock `ticks` times, delivering nothing.
    Tick {
        /// The node.
        node: NodeId,
        /// How many ticks.
        ticks: u64,
    },
    /// Tick one node alone until its election timer fires and it campaigns.
    Timeout {
        /// The node.
        node: NodeId,
    },
    /// Deliver the oldest message in flight from `from` to `to`.
    Deliver {
        /// Sender.
        from: NodeId,
        /// Receiver.
        to: NodeId,
    },
    /// Drop the oldest message in flight from `from` to `to`.
    Drop {
        /// Sender.
        from: NodeId,
        /// Receiver.
        to: NodeId,
    },
    /// Deliver every message the network can, round after round, until none is left that
    /// can be delivered (no clock moves).
    Settle,
    /// Freeze a node (a long GC pause, SIGSTOP): its clock stops, it sends and receives
    /// nothing. This is how a leader's heartbeats stop.
    Pause {
        /// The node.
        node: NodeId,
    },
    /// Wake a paused node: it first catches up with the ticks it missed.
    Resume {
        /// The node.
        node: NodeId,
    },
    /// Cut the network in two: `side` on one side, every other node on the other.
    Partition {
        /// One side of the cut.
        side: Vec<NodeId>,
    },
    /// Mend the network.
    Heal,
    /// Crash a node: it loses everything but what it made durable.
    Crash {
        /// The node.
        node: NodeId,
    },
    /// Restart a crashed node from its durable state.
    Restart {
        /// The node.
        node: NodeId,
    },
    /// The application on `node` takes a session and campaigns in the election `billing`.
    Hold {
        /// The node whose application campaigns.
        node: NodeId,
    },
    /// The application on `node` writes the fenced key `books` with the token it believes
    /// it holds.
    Write {
        /// The node whose application writes.
        node: NodeId,
    },
}

/// A step list that cannot be read, or a step that cannot be taken now. Nothing changed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StepError {
    /// The token is not a step.
    #[error("step {index} ({token:?}) is not a step: {why}")]
    Syntax {
        /// Position in the list, from 1.
        index: usize,
        /// The token as written.
        token: String,
        /// What is wrong with it.
        why: String,
    },
    /// Too many steps for one scenario.
    #[error("{0} steps is more than the {STEPS_MAX} one scenario may hold")]
    TooMany(usize),
    /// The cluster has no such node.
    #[error("there is no node {node} (the cluster has nodes 1 to {nodes})")]
    UnknownNode {
        /// The node named.
        node: NodeId,
        /// Cluster size.
        nodes: u64,
    },
    /// The step does not apply to the cluster as it is now: why, and what would make it
    /// possible.
    #[error("{0}")]
    NotNow(Refusal),
    /// The cluster size is not 3 or 5.
    #[error("the ballot runs 3 or 5 nodes, not {0}")]
    ClusterSize(u64),
    /// A share link's steps are not where the scenario it names goes.
    #[error("the steps {steps:?} are not the beginning of scenario {name}")]
    NotInScenario {
        /// The scenario.
        name: String,
        /// The steps given.
        steps: String,
    },
    /// No prepared scenario has this name.
    #[error("there is no prepared scenario {0:?}")]
    UnknownScenario(String),
    /// No start state has this name.
    #[error("there is no start {0:?} (the starts are fresh and term41)")]
    UnknownStart(String),
    /// A step of a replayed list failed.
    #[error("step {index} ({step}): {error}")]
    Replay {
        /// Position in the list, from 1.
        index: usize,
        /// The step as written.
        step: String,
        /// Why it could not be taken.
        error: Box<StepError>,
    },
}

/// Why a step cannot be taken now, and what would make it possible. The page shows both
/// when a step is refused, and as the tooltip of a button it disables.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Refusal {
    /// Why not, in words ("node 5 is paused, so it receives nothing").
    pub why: String,
    /// What would make it possible ("resume node 5 first, or drop the message").
    pub remedy: String,
}

impl Refusal {
    /// A refusal: `why` it cannot happen now and the `remedy` that would make it possible.
    pub fn new(why: impl Into<String>, remedy: impl Into<String>) -> Refusal {
        Refusal {
            why: why.into(),
            remedy: remedy.into(),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.why, self.remedy)
    }
}

impl StepError {
    /// This error as a refusal with a remedy, for a disabled button's tooltip.
    pub fn refusal(&self) -> Refusal {
        match self {
            StepError::NotNow(r) => r.clone(),
            StepError::TooMany(_) => Refusal::new(
                self.to_string(),
                "start a new cluster, or share this one as it is",
            ),
            StepError::UnknownNode { nodes, .. } => {
                Refusal::new(self.to_string(), format!("name a node from 1 to {nodes}"))
            }
            other => Refusal::new(other.to_string(), "see the steps table in the docs"),
        }
    }
}

/// This crate's result type.
pub type Result<T, E = StepError> = std::result::Result<T, E>;

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Wait { ticks } => write!(f, "wait-{ticks}"),
            Step::Tick { node, ticks } => write!(f, "tick-{node}-{ticks}"),
            Step::Timeout { node } => write!(f, "timeout-{node}"),
            Step::Deliver { from, to } => write!(f, "deliver-{from}-{to}"),
            Step::Drop { from, to } => write!(f, "drop-{from}-{to}"),
            Step::Settle => write!(f, "settle"),
            Step::Pause { node } => write!(f, "pause-{node}"),
            Step::Resume { node } => write!(f, "resume-{node}"),
            Step::Partition { side } => {
                let ids: Vec<String> = side.iter().map(|n| n.to_string()).collect();
                write!(f, "partition-{}", ids.join("."))
            }
            Step::Heal => write!(f, "heal"),
            Step::Crash { node } => write!(f, "crash-{node}"),
            Step::Restart { node } => write!(f, "restart-{node}"),
            Step::Hold { node } => write!(f, "hold-{node}"),
            Step::Write { node } => write!(f, "write-{node}"),
        }
    }
}

fn number(index: usize, token: &str, text: &str, what: &str) -> Result<u64> {
    text.parse::<u64>().map_err(|_| StepError::Syntax {
        index,
        token: token.to_string(),
        why: format!("{what} {text:?} is not a number"),
    })
}

/// Reads one step (`index` is its position, from 1, for the error message).
pub fn parse_step(index: usize, token: &str) -> Result<Step> {
    let syntax = |why: &str| StepError::Syntax {
        index,
        token: token.to_string(),
        why: why.to_string(),
    };
    let mut parts = token.split('-');
    let verb = parts.next().unwrap_or_default();
    let args: Vec<&str> = parts.collect();
    let node = |i: usize| -> Result<NodeId> {
        let text = args.get(i).ok_or_else(|| syntax("a node id is missing"))?;
        number(index, token, text, "node id")
    };
    let want = |n: usize| -> Result<()> {
        if args.len() == n {
            Ok(())
        } else {
            Err(syntax(&format!(
                "{verb} takes {n} argument(s), not {}",
                args.len()
            )))
        }
    };
    let ticks = |text: &str| -> Result<u64> {
        let t = number(index, token, text, "tick count")?;
        if t == 0 || t > TICKS_PER_STEP_MAX {
            return Err(syntax(&format!(
                "tick count must be 1..={TICKS_PER_STEP_MAX}"
            )));
        }
        Ok(t)
    };
    let step = match verb {
        "wait" => {
            want(1)?;
            Step::Wait {
                ticks: ticks(args[0])?,
            }
        }
        "tick" => match args.len() {
            1 => Step::Tick {
                node: node(0)?,
                ticks: 1,
            },
            2 => Step::Tick {
                node: node(0)?,
                ticks: ticks(args[1])?,
            },
            _ => return Err(syntax("tick takes a node and an optional tick count")),
        },
        "timeout" => {
            want(1)?;
            Step::Timeout { node: node(0)? }
        }
        "deliver" | "drop" => {
            want(2)?;
            let (from, to) = (node(0)?, node(1)?);
            if verb == "deliver" {
                Step::Deliver { from, to }
            } else {
                Step::Drop { from, to }
            }
        }
        "settle" => {
            want(0)?;
            Step::Settle
        }
        "heal" => {
            want(0)?;
            Step::Heal
        }
        "partition" => {
            want(1)?;
            let mut side = Vec::new();
            for text in args[0].split('.') {
                let id = number(index, token, text, "node id")?;
                if side.contains(&id) {
                    return Err(syntax(&format!("node {id} is named twice")));
                }
                side.push(id);
            }
            side.sort_unstable();
            Step::Partition { side }
        }
        "pause" | "resume" | "crash" | "restart" | "hold" | "write" => {
            want(1)?;
            let node = node(0)?;
            match verb {
                "pause" => Step::Pause { node },
                "resume" => Step::Resume { node },
                "crash" => Step::Crash { node },
                "restart" => Step::Restart { node },
                "hold" => Step::Hold { node },
                _ => Step::Write { node },
            }
        }
        _ => return Err(syntax("unknown step")),
    };
    Ok(step)
}

/// Reads a comma-separated step list. An empty string is an empty list.
pub fn parse_steps(text: &str) -> Result<Vec<Step>> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let tokens: Vec<&str> = text.split(',').collect();
    if tokens.len() > STEPS_MAX {
        return Err(StepError::TooMany(tokens.len()));
    }
    tokens
        .iter()
        .enumerate()
        .map(|(i, t)| parse_step(i + 1, t.trim()))
        .collect()
}

/// Writes a step list in the form [`parse_steps`] reads.
pub fn encode_steps(steps: &[Step]) -> String {
    let tokens: Vec<String> = steps.iter().map(|s| s.to_string()).collect();
    tokens.join(",")
}

impl Step {
    /// What the step does, in words, for the page's "next step" and its buttons' tooltips.
    pub fn describe(&self) -> String {
        match self {
            Step::Wait { ticks: 1 } => {
                "let 1 tick pass on every running node, delivering everything".to_string()
            }
            Step::Wait { ticks } => {
                format!("let {ticks} ticks pass on every running node, delivering everything after each")
            }
            Step::Tick { node, ticks: 1 } => {
                format!("tick node {node}'s clock once, delivering nothing")
            }
            Step::Tick { node, ticks } => {
                format!("tick node {node}'s clock {ticks} times, delivering nothing")
            }
            Step::Timeout { node } => {
                format!("tick node {node} alone until its election timer fires and it campaigns")
            }
            Step::Deliver { from, to } => {
                format!("deliver the oldest message from node {from} to node {to}")
            }
            Step::Drop { from, to } => {
                format!("drop the oldest message from node {from} to node {to}")
            }
            Step::Settle => {
                "deliver everything, round after round, until the network is quiet".to_string()
            }
            Step::Pause { node } => {
                format!("freeze node {node}: no ticks, nothing sent or received")
            }
            Step::Resume { node } => {
                format!("wake node {node}: it first ticks for the time it missed")
            }
            Step::Partition { side } => {
                let ids: Vec<String> = side.iter().map(|n| n.to_string()).collect();
                format!("cut nodes {{{}}} off from the others", ids.join(", "))
            }
            Step::Heal => "mend the network".to_string(),
            Step::Crash { node } => format!("crash node {node}: only its disk survives"),
            Step::Restart { node } => format!("restart node {node} from its disk"),
            Step::Hold { node } => {
                format!("node {node}'s application takes a session and campaigns in billing")
            }
            Step::Write { node } => {
                format!(
                    "node {node}'s application writes books with the token it believes it holds"
                )
            }
        }
    }

    /// Every node the step names, to be checked against the cluster.
    pub fn nodes(&self) -> Vec<NodeId> {
        match self {
            Step::Wait { .. } | Step::Settle | Step::Heal => Vec::new(),
            Step::Deliver { from, to } | Step::Drop { from, to } => vec![*from, *to],
            Step::Partition { side } => side.clone(),
            Step::Tick { node, .. }
            | Step::Timeout { node }
            | Step::Pause { node }
            | Step::Resume { node }
            | Step::Crash { node }
            | Step::Restart { node }
            | Step::Hold { node }
            | Step::Write { node } => vec![*node],
        }
    }
}
