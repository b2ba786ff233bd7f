//! Fate-sharing sessions on the client's side: the `tenure` client library's promise, as the
//! simulated clients keep it (docs/GUARANTEES.md "Fate-sharing sessions").
//!
//! A bound session's keepalives go on a stream to the node the client talks to; each binds
//! the session to its stream there. A client never closes a stream it sent a binding
//! keepalive on while it may still believe in the session: it keeps the stream open when it
//! moves to another node, and closes it only once a keepalive on a newer stream is
//! acknowledged, or once it has given the session up (its belief dropped first). Its process
//! exiting closes them all (the kernel closes its sockets). A frozen client closes nothing.
//!
//! The `client-closes-bound-stream` bug closes the streams it leaves at once, as the client
//! library's keepalive loop did before fate-sharing (a stream that went quiet was dropped
//! for another).

use tenure_core::types::NodeId;

use super::{Client, ClientAction, ClientEnv, BOUND_STREAMS_MAX};

/// How a fate-sharing seed's clients behave, drawn per seed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FateSharing {
    /// Share of new sessions that are bound to their keepalive streams.
    pub bound_share: f64,
    /// Per client decision while leading: probability that the client's process exits.
    pub crash: f64,
    /// The `client-closes-bound-stream` bug is on.
    pub closes_bound_stream: bool,
}

impl Client {
    /// The stream the next keepalive of a bound session goes on: the current one if it
    /// reaches the node the client talks to, else a new one. `None` when the client gave
    /// the session up instead (it holds too many streams open without an acknowledgement).
    pub(super) fn keepalive_stream(&mut self, env: &mut ClientEnv<'_>) -> Option<u64> {
        if let Some((stream, node)) = self.stream {
            if node == self.target {
                return Some(stream);
            }
        }
        if self.bound_streams.len() >= BOUND_STREAMS_MAX {
            self.session_ended("it gave up a session it could not renew on any stream", env);
            return None;
        }
        if env.fate.is_some_and(|f| f.closes_bound_stream) {
            self.close_streams_below(u64::MAX, env);
        }
        self.streams_opened += 1;
        let stream = (self.id << 32) | self.streams_opened;
        self.stream = Some((stream, self.target));
        self.bound_streams.insert(stream, self.target);
        Some(stream)
    }

    /// A keepalive sent on `stream` was acknowledged: the streams opened before it are no
    /// longer needed, and closing them cannot end the session (docs/GUARANTEES.md).
    pub(super) fn bound_keepalive_acked(&mut self, stream: u64, env: &mut ClientEnv<'_>) {
        self.close_streams_below(stream, env);
    }

    /// The node ended `stream` itself: nothing to close any more.
    pub(super) fn stream_ended(&mut self, stream: u64) {
        self.bound_streams.remove(&stream);
        if self.stream.is_some_and(|(s, _)| s == stream) {
            self.stream = None;
        }
    }

    /// Closes every open stream older than `limit` (all of them with `u64::MAX`).
    pub(super) fn close_streams_below(&mut self, limit: u64, env: &mut ClientEnv<'_>) {
        let closing: Vec<(u64, NodeId)> = self
            .bound_streams
            .range(..limit)
            .map(|(s, n)| (*s, *n))
            .collect();
        for (stream, to) in closing {
            self.bound_streams.remove(&stream);
            if self.stream.is_some_and(|(s, _)| s == stream) {
                self.stream = None;
            }
            env.trace.detail(env.now_us, || {
                format!("client {} closes stream {stream:#x} to node {to}", self.id)
            });
            env.out.push(ClientAction::CloseStream { to, stream });
        }
    }

    /// The client's process exits while it leads: it believes nothing any more, its kernel
    /// closes its streams, and nothing is revoked. It starts over as a new process with no
    /// session (its old one ends on its TTL, or at once where it was bound to a stream).
    pub(super) fn crash(&mut self, env: &mut ClientEnv<'_>) {
        env.stats.fault("client-crash");
        env.trace.log(env.now_us, || {
            format!("fault: client {}'s process exits", self.id)
        });
        self.session_ended("its process exits", env);
    }

    /// For the late-bind shape: whether this client leads with a fate-sharing session and
    /// talks to node `leader` (as the leader), so that its keepalives are acknowledged there.
    pub fn leads_bound_via(&self, leader: NodeId) -> bool {
        self.frozen.is_none()
            && self.belief.is_some()
            && self.op.is_none()
            && self.session.is_some_and(|s| s.bound)
            && self.target == leader
    }

    /// Whether a stream of this client to `node` is still open.
    pub fn holds_stream_to(&self, node: NodeId) -> bool {
        self.bound_streams.values().any(|n| *n == node)
    }

    /// For the late-bind shape: sends one keepalive to `detour` now (on a new stream there),
    /// then goes back to `home` and sends the next one there at once. Once the one at `home`
    /// is acknowledged, the client closes the stream to `detour`, as the library would.
    pub fn keepalive_via(&mut self, detour: NodeId, home: NodeId, env: &mut ClientEnv<'_>) {
        for node in [detour, home] {
            // A fresh generation each time, so that only the last send's timer stays armed.
            self.keepalive_gen += 1;
            self.target = node;
            self.send_keepalive(env);
        }
    }
}
