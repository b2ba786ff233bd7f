//! What simulated clients and nodes say to each other over the simulated network.
//!
//! This mirrors the shape of tenure's client API closely enough for the properties checked:
//! proposals answered from `AfterPersist::applied`, keepalives answered from
//! `AfterPersist::keepalive_acks`, and leader changes pushed to watchers.

use tenure_core::message::Message;
use tenure_core::sm::{Command, LeaderChange, RequestId, Response, SessionId};
use tenure_core::types::{Index, NodeId};

use crate::observe::ClientId;

/// An endpoint of the simulated network.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Addr {
    /// A node.
    Node(NodeId),
    /// A simulated client.
    Client(ClientId),
}

impl Addr {
    /// A number for the trace hash, distinct for nodes and clients.
    pub fn code(self) -> u64 {
        match self {
            Addr::Node(id) => id,
            Addr::Client(id) => (1 << 32) | id,
        }
    }
}

/// A packet on the simulated network.
#[derive(Clone, Debug)]
pub enum Packet {
    /// Between nodes.
    Raft(Message),
    /// From a client to a node.
    Request(ClientRequest),
    /// From a node to a client.
    Reply(ClientReply),
}

/// A client's request to a node.
#[derive(Clone, Debug)]
pub enum ClientRequest {
    /// Propose a command; answered once the node applies the entry.
    Propose {
        /// Identifies this attempt.
        req_id: u64,
        /// Identifies the request across attempts, so that a retry is never applied twice.
        request: Option<RequestId>,
        /// The command.
        command: Command,
        /// The election the client campaigns in, so the node pushes its leader changes.
        watch: Option<String>,
    },
    /// Keep a session alive.
    Keepalive {
        /// The session.
        session: SessionId,
        /// Echoed in the ack; also the client's sequence number of the keepalive (tags
        /// rise with every request the client sends).
        tag: u64,
        /// As for `Propose`.
        watch: Option<String>,
        /// For a fate-sharing session, the stream the keepalive is sent on, which it binds
        /// the session to (`Node::keepalive_bound`).
        stream: Option<u64>,
    },
}

/// A node's answer to a client.
#[derive(Clone, Debug)]
pub enum ClientReply {
    /// The proposal's entry was applied.
    Applied {
        /// The attempt answered.
        req_id: u64,
        /// An index at which the command's effect is in the log (for a retried request, the
        /// first application's).
        index: Index,
        /// The state machine's response.
        response: Response,
    },
    /// The proposal's entry was replaced by another leader's: it definitely did not take
    /// effect; try again.
    Retry {
        /// The attempt answered.
        req_id: u64,
    },
    /// The proposal may or may not have taken effect (its node stopped, or caught up past it
    /// by a snapshot); retry with the same request id to learn which.
    Indeterminate {
        /// The attempt answered.
        req_id: u64,
    },
    /// This node does not lead.
    NotLeader {
        /// The attempt answered.
        req_id: u64,
        /// Who the node thinks leads.
        hint: Option<NodeId>,
    },
    /// The leader refused the proposal because the session is unknown.
    SessionUnknown {
        /// The attempt answered.
        req_id: u64,
        /// The session.
        session: SessionId,
    },
    /// The leader cannot take proposals right now (transfer, too many uncommitted, …).
    Busy {
        /// The attempt answered.
        req_id: u64,
    },
    /// A keepalive was acknowledged by a leader that provably leads.
    KeepaliveAck {
        /// The keepalive's tag.
        tag: u64,
        /// The session.
        session: SessionId,
        /// The session's TTL.
        ttl_ticks: u64,
    },
    /// A keepalive was refused.
    KeepaliveRefused {
        /// The keepalive's tag.
        tag: u64,
        /// The session.
        session: SessionId,
        /// True if the session no longer exists.
        unknown_session: bool,
        /// Who the node thinks leads, if it does not.
        hint: Option<NodeId>,
    },
    /// The leader of a watched election changed.
    LeaderChanged(LeaderChange),
    /// The node ended a stream of the client's (fate-sharing seeds): it closed an
    /// unresponsive client's connection, or a keepalive came on a stream that had ended.
    StreamEnded {
        /// The stream.
        stream: u64,
    },
}
