"""The holder's view of its session (lease), and the thread that keeps it alive: a port of
the Rust ``tenure::session`` and of ``keepalive_loop`` in ``backend/cluster.rs``.

DESIGN.md rule 4: the holder believes in its session only until ``send time of the last
acknowledged keepalive (or of the grant request) + TTL - margin`` on this process's
monotonic clock (``time.monotonic``), with the margin of :mod:`tenure.drift`.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import grpc

from .channel import ATTEMPT_TIMEOUT_S, RETRY_PAUSE_S, LeaderChannel, Node
from .errors import Reason, reason_of
from .v1 import tenure_pb2 as pb

#: Streams a fate-sharing session keeps open at once: the one in use and those it moved away
#: from before a keepalive on a newer one was acknowledged. A stream is left after half a TTL
#: without acknowledgements and the session is given up when its lease runs out, so a
#: handful is the most it can need; past this the session is given up too.
HELD_STREAMS_MAX = 8
#: Keepalive requests waiting to go out on one stream. One goes every TTL/4 and a stream is
#: left after half a TTL without an answer, so a few is the most a live stream holds; a
#: stream whose queue is full is not taking requests and is left as a stuck one.
KEEPALIVES_INFLIGHT_MAX = 16


class Session:
    """One granted session: what the holder believes about its lease, and its keepalives.

    Every change (an acknowledgement that moves the lease forward, the session ending)
    notifies ``changed``, a condition that the leadership's watcher waits on.
    """

    def __init__(
        self,
        session_id: int,
        ttl_ms: int,
        margin_ms: float,
        sent: float,
        bound: bool,
        secret: bytes,
    ):
        #: The cluster's id of the session; candidacies are bound to it.
        self.id = session_id
        #: The TTL the cluster granted, in milliseconds.
        self.ttl_ms = ttl_ms
        #: How much earlier than the cluster the holder stops believing, in milliseconds
        #: (:func:`tenure.drift.holder_margin_ms` of the TTL asked for).
        self.margin_ms = margin_ms
        #: Fate-sharing: every keepalive binds the session to the stream it goes on.
        self.bound = bound
        #: The session's secret, presented by every request acting for it.
        self.secret = secret
        self.changed = threading.Condition()
        # Until when the holder may believe its session alive (monotonic seconds); it only
        # ever moves forward.
        self._valid_until = max(sent, sent + (ttl_ms - margin_ms) / 1_000)
        self._ended = False
        self._on_end: List[Callable[[], None]] = []
        self._keepalive: Optional[KeepAlive] = None

    @property
    def valid_until(self) -> float:
        """Until when the session is known alive, on ``time.monotonic()``'s clock."""
        with self.changed:
            return self._valid_until

    @property
    def ended(self) -> bool:
        """Whether the cluster said the session is gone (or the holder gave it up)."""
        with self.changed:
            return self._ended

    def lease_ran_out(self) -> bool:
        """Whether the lease has run out on this process's clock."""
        return time.monotonic() >= self.valid_until

    def acked(self, sent: float, ttl_ms: int) -> None:
        """The cluster acknowledged a keepalive sent at ``sent``, granting ``ttl_ms`` from
        then."""
        ttl_ms = min(ttl_ms, self.ttl_ms)
        until = max(sent, sent + (ttl_ms - self.margin_ms) / 1_000)
        with self.changed:
            if until > self._valid_until and not self._ended:
                self._valid_until = until
                self.changed.notify_all()

    def end(self) -> None:
        """The cluster said the session is gone, or (fate-sharing) the holder gave it up."""
        with self.changed:
            if self._ended:
                return
            self._ended = True
            callbacks, self._on_end = self._on_end, []
            self.changed.notify_all()
        for cb in callbacks:
            cb()

    def on_end(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the session ends (at once if it has)."""
        with self.changed:
            if not self._ended:
                self._on_end.append(callback)
                return
        callback()

    def notify(self) -> None:
        """Wake whoever waits on ``changed`` (the leadership's own state changed)."""
        with self.changed:
            self.changed.notify_all()

    def start_keepalives(self, nodes: LeaderChannel) -> None:
        """Start the thread that keeps this session alive."""
        self._keepalive = KeepAlive(nodes, self)
        self._keepalive.start()

    def stop_keepalives(self) -> None:
        """Stop renewing: from now on the lease runs out at its current ``valid_until``. A
        fate-sharing session is given up instead (ended here, so that nothing believes in it
        any more) before its keepalive thread, and with it its bound streams, goes."""
        if self.bound:
            self.end()
        keepalive, self._keepalive = self._keepalive, None
        if keepalive is not None:
            keepalive.stop()


# What a stream's reader thread reports to the keepalive thread: (stream number, kind,
# payload), kind one of "open", "ack", "end", "error"; or (0, "stop", None).
_Event = Tuple[int, str, object]


class _Stream:
    """One open ``KeepAlive`` stream: its requests go through a queue that a generator hands
    to grpc; a reader thread reports its answers. ``close`` ends the stream (a cancel: the
    connection, shared with every other call to the node, stays open)."""

    def __init__(self, number: int, node: Node, events: "queue.Queue[_Event]"):
        self.number = number
        self._requests: "queue.Queue[Optional[pb.KeepAliveRequest]]" = queue.Queue(
            KEEPALIVES_INFLIGHT_MAX
        )
        self._call = node.sessions.KeepAlive(self._outgoing(), metadata=node.metadata)
        self._events = events
        self._reader = threading.Thread(
            target=self._read, name=f"tenure-keepalive-reader-{number}", daemon=True
        )
        self._reader.start()

    def _outgoing(self) -> Iterator[pb.KeepAliveRequest]:
        while True:
            request = self._requests.get()
            if request is None:
                return
            yield request

    def _read(self) -> None:
        try:
            # The headers arrive once the node took the stream: only then does a bound
            # session send on it (a stream given up while opening has bound nothing).
            self._call.initial_metadata()
            if not self._call.done():
                self._events.put((self.number, "open", None))
            for answer in self._call:
                self._events.put((self.number, "ack", answer))
            self._events.put((self.number, "end", None))
        except grpc.RpcError as e:
            self._events.put((self.number, "error", e))

    def send(self, request: pb.KeepAliveRequest) -> bool:
        """Queue ``request``; ``False`` when the stream is not taking requests."""
        try:
            self._requests.put_nowait(request)
            return True
        except queue.Full:
            return False

    def close(self) -> None:
        self._call.cancel()
        try:
            # Ends the generator grpc reads the requests from (and with it grpc's thread
            # that reads it). A full queue needs no end: grpc stops reading a cancelled call.
            self._requests.put_nowait(None)
        except queue.Full:
            pass


class KeepAlive(threading.Thread):
    """Keeps one session alive: one ``KeepAlive`` stream at the node believed to lead, a
    request every TTL/4, each acknowledgement extending the lease from that request's send
    time. Streams that break or go quiet for half a TTL are reopened at another node
    (following ``not-leader`` hints); ``unknown-session`` ends the session and the thread.

    A fate-sharing session keeps the library's promise (docs/GUARANTEES.md, "Fate-sharing
    sessions"): every request binds the session to its stream; a stream that went quiet is
    kept open, unread, until a request on a newer stream is acknowledged; and when the lease
    runs out the session is given up (ended here first) before the thread returns and its
    streams close.
    """

    def __init__(self, nodes: LeaderChannel, session: Session):
        super().__init__(name=f"tenure-keepalive-{session.id}", daemon=True)
        self._nodes = nodes
        self._session = session
        # Unbounded, but bounded in fact: its events are the answers to this thread's own
        # requests (at most KEEPALIVES_INFLIGHT_MAX a stream) and one end per stream.
        self._events: "queue.Queue[_Event]" = queue.Queue()
        self._stopped = threading.Event()
        self._streams = 0

    def stop(self) -> None:
        """Stop at once (the thread closes its streams as it returns)."""
        self._stopped.set()
        self._events.put((0, "stop", None))

    def run(self) -> None:
        held: List[_Stream] = []
        current: List[_Stream] = []
        try:
            self._loop(held, current)
        finally:
            for stream in held + current:
                stream.close()

    def _request(self, seq: int) -> pb.KeepAliveRequest:
        s = self._session
        return pb.KeepAliveRequest(session_id=s.id, seq=seq, session_secret=s.secret, bind=s.bound)

    def _next_event(self, timeout: float) -> Optional[_Event]:
        try:
            return self._events.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return None

    def _pause(self, seconds: float) -> None:
        self._stopped.wait(seconds)

    def _loop(self, held: List[_Stream], current: List[_Stream]) -> None:
        session, nodes = self._session, self._nodes
        every = session.ttl_ms / 4 / 1_000
        half_ttl = session.ttl_ms / 2 / 1_000
        bind = session.bound
        # Rises across streams: a binding moves only to a request with a higher number.
        seq = 0
        while not self._stopped.is_set():
            if bind and (len(held) >= HELD_STREAMS_MAX or session.lease_ran_out()):
                # Belief first, then the streams (they close as this thread returns).
                session.end()
                return
            i = nodes.guess()
            self._streams += 1
            try:
                stream = _Stream(self._streams, nodes.node_at(i), self._events)
            except ValueError:  # the channel was closed under us
                return
            current[:] = [stream]
            # Send times by sequence number, so that an acknowledgement extends the lease
            # from the moment its request left (never from when the answer came back).
            sent: Dict[int, float] = {}
            if not bind:
                # The first request goes with the call; a bound one waits for the stream to
                # open, so that giving up on the opening closes nothing bound.
                seq += 1
                sent[seq] = time.monotonic()
                stream.send(self._request(seq))
            opened = self._wait_open(stream, i)
            if opened is None:
                return
            if not opened:
                stream.close()
                current.clear()
                continue
            if bind:
                seq += 1
                sent[seq] = time.monotonic()
                stream.send(self._request(seq))
            last_ack = time.monotonic()
            next_tick = last_ack + every
            while True:
                event = self._next_event(next_tick - time.monotonic())
                if self._stopped.is_set():
                    return
                if event is None:
                    # A tick (a late one is not made up for: the next comes a period later).
                    next_tick = time.monotonic() + every
                    if bind and session.lease_ran_out():
                        session.end()
                        return
                    # A stream whose requests go unanswered for half a TTL is stuck (a node
                    # that lost its quorum): try elsewhere while the lease still holds.
                    if time.monotonic() - last_ack > half_ttl:
                        nodes.advance(i)
                        if bind:
                            # It may hold the binding: it stays open until a newer stream's
                            # request is acknowledged.
                            held.append(stream)
                        else:
                            stream.close()
                        current.clear()
                        break
                    seq += 1
                    sent[seq] = time.monotonic()
                    if not stream.send(self._request(seq)):
                        last_ack = float("-inf")  # stuck: left at the next tick
                    continue
                number, kind, payload = event
                if number != stream.number:
                    continue  # a stream left behind: not read any more
                if kind == "ack":
                    assert isinstance(payload, pb.KeepAliveResponse)
                    sent_at = sent.pop(payload.seq, None)
                    if sent_at is None:
                        continue
                    # Older unanswered requests will not be answered on their own now.
                    for older in [s for s in sent if s < payload.seq]:
                        del sent[older]
                    last_ack = time.monotonic()
                    session.acked(sent_at, payload.ttl_ms)
                    # A request on this stream was acknowledged: the streams left before it
                    # may close.
                    for old in held:
                        old.close()
                    held.clear()
                    continue
                if kind == "end":
                    # The server ended the stream (not the client's close).
                    nodes.advance(i)
                elif kind == "error":
                    assert isinstance(payload, grpc.RpcError)
                    if reason_of(payload) is Reason.UNKNOWN_SESSION:
                        session.end()
                        return
                    nodes.note_failure(i, payload)
                stream.close()
                current.clear()
                break
            self._pause(RETRY_PAUSE_S)

    def _wait_open(self, stream: _Stream, i: int) -> Optional[bool]:
        """Wait until ``stream`` opens: ``True`` once it has, ``False`` when it did not (the
        node was passed over), ``None`` when the session ended or the thread was stopped."""
        deadline = time.monotonic() + ATTEMPT_TIMEOUT_S
        while True:
            event = self._next_event(deadline - time.monotonic())
            if self._stopped.is_set():
                return None
            if event is None:
                self._nodes.advance(i)
                return False
            number, kind, payload = event
            if number != stream.number:
                continue
            if kind == "open":
                # The reader reports the opening before any answer, so none is lost here.
                return True
            if kind == "error":
                assert isinstance(payload, grpc.RpcError)
                if reason_of(payload) is Reason.UNKNOWN_SESSION:
                    self._session.end()
                    return None
                self._nodes.note_failure(i, payload)
                self._pause(RETRY_PAUSE_S)
                return False
            # "end" before anything: the server ended the stream at once.
            self._nodes.advance(i)
            self._pause(RETRY_PAUSE_S)
            return False
