//! Keepalive streams, for the fate-sharing seeds: the model of what the server's API layer
//! tells its node about the streams that sessions are bound to (docs/GUARANTEES.md
//! "Fate-sharing sessions").
//!
//! A stream is TCP: what the client sends on it — its keepalives, then its close (its
//! process exiting, or the client library letting go of it) — reaches the node in order,
//! each one network delay after the one before; across a cut link it waits until the link
//! carries it again, as retransmitted segments would, and it is lost only with the process
//! it was sent to (a stream never outlives the server process that served it). So a
//! keepalive may reach a node long after it was sent, when that node has become leader and
//! the client has moved on. The node tells its core when the client closed a stream.
//!
//! A server closes the connection of a client it cannot reach — frozen, or cut off in
//! either direction, so that its pings go unanswered — once that has lasted its idle
//! timeout, and tells its core that it ended the stream itself. A frozen client and a cut
//! link close nothing on the client's side.

use std::collections::VecDeque;

use tenure_core::node::StreamEnd;

use super::{Event, World};
use crate::client::FateSharing;
use crate::observe::ClientId;
use crate::options::{InjectBug, SimOptions};
use crate::protocol::Addr;
use crate::protocol::{ClientRequest, Packet};
use crate::rng::SimRng;
use crate::time::{SimTimeUs, US_PER_MS};
use tenure_core::types::NodeId;

/// Share of seeds whose clients bind sessions to their keepalive streams.
const FATE_SHARING_SHARE: f64 = 0.5;
/// Range of the share of a fate-sharing seed's sessions that are bound.
const BOUND_SHARE: (f64, f64) = (0.3, 1.0);
/// Range of the per-decision probability that a leading client's process exits.
const CLIENT_CRASH: (f64, f64) = (0.005, 0.05);
/// Range of the servers' idle timeout for clients they cannot reach (true time): from
/// well inside the shortest TTL to past the longest.
const IDLE_CLOSE_US: (u64, u64) = (100 * US_PER_MS, 1_600 * US_PER_MS);
/// How often servers look for unreachable clients.
pub(super) const SWEEP_US: SimTimeUs = 10 * US_PER_MS;
/// How long what a stream carries waits for a cut link, a paused node or a running fsync
/// before it is tried again.
const STREAM_RETRY_US: SimTimeUs = 20 * US_PER_MS;

/// What a client sends on a stream.
#[derive(Debug)]
pub(super) enum Sent {
    /// A keepalive.
    Keepalive(ClientRequest),
    /// The client's close of the stream.
    Close,
}

/// One client stream to one node process, as TCP carries it.
#[derive(Debug)]
pub(super) struct Pipe {
    client: ClientId,
    node: NodeId,
    /// The node process the stream reaches; it dies with it.
    incarnation: u64,
    /// Sent, not yet delivered, in order.
    queue: VecDeque<Sent>,
    /// A delivery is scheduled.
    scheduled: bool,
}

/// The fate-sharing shape of `seed`, from a random stream of its own (so that adding it left
/// every draw of every other seed as it was), and the servers' idle timeout. Seeds of a
/// fate-sharing bug always have it.
pub(super) fn draw(seed: u64, opts: &SimOptions) -> (Option<FateSharing>, SimTimeUs) {
    let mut rng = SimRng::new(seed ^ 0x6661_7465_7368_6172);
    let on = rng.chance(FATE_SHARING_SHARE) || opts.bug.is_some_and(InjectBug::is_fate_sharing);
    let fate = FateSharing {
        bound_share: rng.uniform(BOUND_SHARE.0, BOUND_SHARE.1),
        crash: rng.uniform(CLIENT_CRASH.0, CLIENT_CRASH.1),
        closes_bound_stream: opts.bug == Some(InjectBug::ClientClosesBoundStream),
    };
    let idle_close_us = rng.between(IDLE_CLOSE_US.0, IDLE_CLOSE_US.1);
    (on.then_some(fate), idle_close_us)
}

impl World {
    /// Client `client` sends `sent` on its stream `stream` to node `to`.
    pub(super) fn send_on_stream(&mut self, client: ClientId, to: NodeId, stream: u64, sent: Sent) {
        let Some(slot) = self.nodes.get(&to) else {
            return;
        };
        let incarnation = slot.incarnation;
        let pipe = self.pipes.entry(stream).or_insert(Pipe {
            client,
            node: to,
            incarnation,
            queue: VecDeque::new(),
            scheduled: false,
        });
        pipe.queue.push_back(sent);
        if !std::mem::replace(&mut pipe.scheduled, true) {
            let delay = self.network.delay(&mut self.rng);
            self.queue
                .push(self.now_us + delay, Event::StreamDeliver { stream });
        }
    }

    /// The next thing sent on `stream` reaches its node, if it can now.
    pub(super) fn on_stream_deliver(&mut self, stream: u64) {
        let Some(pipe) = self.pipes.get(&stream) else {
            return;
        };
        let (client, node) = (pipe.client, pipe.node);
        let alive = self
            .nodes
            .get(&node)
            .is_some_and(|s| s.is_up() && s.incarnation == pipe.incarnation);
        if !alive {
            self.pipes.remove(&stream);
            return;
        }
        let slot = &self.nodes[&node];
        let blocked = self
            .network
            .is_blocked(Addr::Client(client), Addr::Node(node));
        if blocked || slot.paused || slot.persisting() {
            self.queue.push(
                self.now_us + STREAM_RETRY_US,
                Event::StreamDeliver { stream },
            );
            return;
        }
        let Some(pipe) = self.pipes.get_mut(&stream) else {
            return;
        };
        let sent = pipe.queue.pop_front();
        if pipe.queue.is_empty() {
            pipe.scheduled = false;
        } else {
            let delay = self.network.delay(&mut self.rng);
            self.queue
                .push(self.now_us + delay, Event::StreamDeliver { stream });
        }
        match sent {
            Some(Sent::Keepalive(request)) => {
                self.deliver_to_node(node, Addr::Client(client), Packet::Request(request));
            }
            Some(Sent::Close) => {
                self.pipes.remove(&stream);
                if let Some(drive) = self.with_node(node, |slot, ctx| {
                    slot.end_stream(stream, StreamEnd::Client, ctx)
                }) {
                    self.after_drive(node, drive);
                }
            }
            None => {}
        }
    }

    /// Every running server closes the streams of clients it has not been able to reach for
    /// its idle timeout.
    pub(super) fn sweep_streams(&mut self) {
        self.queue.push(self.now_us + SWEEP_US, Event::StreamSweep);
        let now = self.now_us;
        let mut closing: Vec<(NodeId, u64)> = Vec::new();
        for (id, slot) in self.nodes.iter_mut() {
            if !slot.is_up() || slot.paused || slot.persisting() {
                continue;
            }
            for (stream, open) in slot.streams.iter_mut() {
                let (client, node) = (Addr::Client(open.client), Addr::Node(*id));
                let frozen = self
                    .clients
                    .get(open.client as usize)
                    .is_some_and(|c| c.is_frozen());
                let cut =
                    self.network.is_blocked(client, node) || self.network.is_blocked(node, client);
                if !(frozen || cut) {
                    open.unresponsive_since_us = None;
                    continue;
                }
                let since = *open.unresponsive_since_us.get_or_insert(now);
                if now >= since + self.stream_idle_close_us {
                    closing.push((*id, *stream));
                }
            }
        }
        for (node, stream) in closing {
            self.trace.log(now, || {
                format!("node {node} closes the connection of stream {stream:#x}: its client did not answer")
            });
            if let Some(drive) = self.with_node(node, |slot, ctx| {
                slot.end_stream(stream, StreamEnd::Server, ctx)
            }) {
                self.after_drive(node, drive);
            }
        }
    }
}
