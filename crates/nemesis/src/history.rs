//! The history of a run: every client operation with its invoke and completion times on one
//! monotonic clock, and its outcome, exactly as the client saw it.
//!
//! Each operation is one attempt (no retries inside an operation), so the history says
//! precisely what was asked and what was answered. Outcomes follow the proto's documented
//! reasons (`tenure-error` metadata, see `crates/proto/proto/tenure/v1/tenure.proto`):
//! a definite failure did not and will not take effect; anything else that is not `ok` is
//! indeterminate and may or may not take effect.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tenure_proto::{Reason, CURRENT_TOKEN_KEY, ERROR_KEY};

/// Microseconds since the start of the run, on the monotonic clock.
pub type Micros = u64;

/// The one clock of a run. Every client is in this process, so one clock orders them all.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    base: Instant,
}

impl Clock {
    /// A clock whose zero is now.
    pub fn start() -> Clock {
        Clock {
            base: Instant::now(),
        }
    }

    /// Now, in microseconds since the start.
    pub fn now(&self) -> Micros {
        self.base.elapsed().as_micros() as Micros
    }
}

/// What a client asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `Sessions.Grant`.
    Grant {
        /// Requested TTL.
        ttl_ms: u64,
    },
    /// One request on a `Sessions.KeepAlive` stream; invoke is its send time.
    KeepAlive {
        /// Session renewed.
        session: u64,
    },
    /// `Sessions.Revoke`.
    Revoke {
        /// Session ended.
        session: u64,
    },
    /// `Elections.Campaign`.
    Campaign {
        /// Election.
        election: String,
        /// Candidate's session.
        session: u64,
    },
    /// `Elections.Resign`.
    Resign {
        /// Election.
        election: String,
        /// Session resigning.
        session: u64,
    },
    /// `Elections.Leader`.
    Leader {
        /// Election.
        election: String,
    },
    /// `FencedKeys.Put`.
    Put {
        /// Key.
        key: String,
        /// Value (unique over the run, so that a read names the write it saw).
        value: String,
        /// Election whose token fences the write.
        election: String,
        /// The writer's token.
        token: u64,
    },
    /// `FencedKeys.Get`.
    Get {
        /// Key.
        key: String,
    },
    /// `Cluster.TransferLeadership`.
    TransferLeadership {
        /// Target node.
        to: u64,
    },
    /// `Cluster.AddMember`.
    AddMember {
        /// Node.
        id: u64,
        /// As a voter or a learner.
        voter: bool,
    },
    /// `Cluster.RemoveMember`.
    RemoveMember {
        /// Node.
        id: u64,
    },
}

impl Kind {
    /// A short name for reports.
    pub fn name(&self) -> &'static str {
        match self {
            Kind::Grant { .. } => "grant",
            Kind::KeepAlive { .. } => "keepalive",
            Kind::Revoke { .. } => "revoke",
            Kind::Campaign { .. } => "campaign",
            Kind::Resign { .. } => "resign",
            Kind::Leader { .. } => "leader",
            Kind::Put { .. } => "put",
            Kind::Get { .. } => "get",
            Kind::TransferLeadership { .. } => "transfer-leadership",
            Kind::AddMember { .. } => "add-member",
            Kind::RemoveMember { .. } => "remove-member",
        }
    }
}

/// A successful answer's content, where the checkers need it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// Nothing to check (Resign, Revoke, admin calls).
    Unit,
    /// Grant: the session id and granted TTL.
    Session {
        /// Session id.
        session: u64,
        /// Granted TTL.
        ttl_ms: u64,
    },
    /// KeepAlive: the TTL the leader renewed for.
    Renewed {
        /// TTL.
        ttl_ms: u64,
    },
    /// Campaign: the candidate now leads with this token.
    Token(u64),
    /// Leader: who leads, if anyone.
    Leader(Option<(u64, u64)>),
    /// Put: the log index of the accepted write.
    Index(u64),
    /// Get: the stored value, its token and its index.
    Read(Option<(String, u64, u64)>),
}

/// How an operation ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Done, with its result.
    Ok(Value),
    /// A definite failure: the command did not and will not take effect. The reason is the
    /// proto's (`not-leader`, `stale-token`, …); `current` is `tenure-current-token`.
    Fail {
        /// The `tenure-error` reason (one of the definite ones: [`Reason::is_definite`]).
        reason: Reason,
        /// `tenure-current-token` on `stale-token`.
        current: Option<u64>,
    },
    /// May or may not have taken effect (explicit `indeterminate`, timeout, transport error,
    /// cancellation, or an answer without a documented reason).
    Indeterminate {
        /// What the client saw.
        why: String,
    },
}

impl Outcome {
    /// `ok`, `fail` or `indeterminate`.
    pub fn name(&self) -> &'static str {
        match self {
            Outcome::Ok(_) => "ok",
            Outcome::Fail { .. } => "fail",
            Outcome::Indeterminate { .. } => "indeterminate",
        }
    }

    /// Whether the answer was a definite failure with this reason.
    pub fn is_fail(&self, reason: Reason) -> bool {
        matches!(self, Outcome::Fail { reason: r, .. } if *r == reason)
    }
}

/// Turn a gRPC status into an outcome by its `tenure-error` reason.
pub fn classify(status: &tonic::Status) -> Outcome {
    match Reason::of(status) {
        Some(reason) if reason.is_definite() => Outcome::Fail {
            reason,
            current: status
                .metadata()
                .get(CURRENT_TOKEN_KEY)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok()),
        },
        // `indeterminate` (UNKNOWN), `request-forgotten`: the command may have taken effect.
        Some(reason) => Outcome::Indeterminate {
            why: format!("{reason}: {}", status.message()),
        },
        // A status without a reason is a transport error, a cancellation, a deadline or an
        // overloaded server's refusal before the API saw it; one with a reason this version
        // does not know is undocumented. Neither is definite.
        None => Outcome::Indeterminate {
            why: match status.metadata().get(ERROR_KEY) {
                Some(raw) => format!("undocumented reason {raw:?}: {}", status.message()),
                None => format!("{:?}: {}", status.code(), status.message()),
            },
        },
    }
}

/// One operation of the history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Op {
    /// Position in the history (assigned when recorded).
    pub id: usize,
    /// Which client (a name such as `e0-c1`, `reader-e0`, `nemesis`).
    pub client: String,
    /// What was asked.
    pub kind: Kind,
    /// When it was sent.
    pub invoke: Micros,
    /// When the answer arrived (for indeterminate operations, when the client gave up; the
    /// checkers treat those as never answered).
    pub complete: Micros,
    /// How it ended.
    pub outcome: Outcome,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "#{} {} [{:.3}s..{:.3}s] {:?} -> ",
            self.id,
            self.client,
            self.invoke as f64 / 1e6,
            self.complete as f64 / 1e6,
            self.kind
        )?;
        match &self.outcome {
            Outcome::Ok(v) => write!(f, "ok {v:?}"),
            Outcome::Fail { reason, .. } => write!(f, "fail {reason}"),
            Outcome::Indeterminate { why } => write!(f, "indeterminate ({why})"),
        }
    }
}

/// The history being recorded, shared by every client task.
#[derive(Clone)]
pub struct Recorder {
    clock: Clock,
    ops: Arc<Mutex<Vec<Op>>>,
}

impl Recorder {
    /// An empty history on `clock`.
    pub fn new(clock: Clock) -> Recorder {
        Recorder {
            clock,
            ops: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// The run's clock.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// Record a finished operation.
    pub fn record(&self, client: &str, kind: Kind, invoke: Micros, outcome: Outcome) {
        let complete = self.clock.now();
        self.push(client, kind, invoke, complete, outcome);
    }

    /// Record an operation with an explicit completion time.
    pub fn push(
        &self,
        client: &str,
        kind: Kind,
        invoke: Micros,
        complete: Micros,
        outcome: Outcome,
    ) {
        let mut ops = self.ops.lock().expect("no recorder holder panics");
        let id = ops.len();
        ops.push(Op {
            id,
            client: client.to_string(),
            kind,
            invoke,
            complete,
            outcome,
        });
    }

    /// Run one attempt of a unary call, at most `timeout`, and record it. Returns the
    /// outcome, the answer if any, and the error status if any (for its leader hint).
    pub async fn call<T, F>(
        &self,
        client: &str,
        kind: Kind,
        timeout: Duration,
        fut: F,
        value: impl FnOnce(&T) -> Value,
    ) -> (Outcome, Option<T>, Option<tonic::Status>)
    where
        F: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let invoke = self.clock.now();
        let (outcome, answer, status) = match tokio::time::timeout(timeout, fut).await {
            Ok(Ok(r)) => {
                let r = r.into_inner();
                (Outcome::Ok(value(&r)), Some(r), None)
            }
            Ok(Err(status)) => (classify(&status), None, Some(status)),
            Err(_) => (
                Outcome::Indeterminate {
                    why: format!("no answer within {timeout:?}"),
                },
                None,
                None,
            ),
        };
        self.record(client, kind, invoke, outcome.clone());
        (outcome, answer, status)
    }

    /// Everything recorded so far, ordered by id.
    pub fn snapshot(&self) -> Vec<Op> {
        self.ops.lock().expect("no recorder holder panics").clone()
    }
}
