//! A peer that sends garbage is logged with its address and the error, not just closed.
//!
//! This file holds a single test because it installs a thread-local log subscriber, and
//! tracing caches per-callsite interest across threads: a lone test per binary keeps that
//! cache from depending on what other tests run at the same time.

mod common;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use common::*;
use tenure_transport::Transport;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// Records every event at WARN or above as one line of `field=value` pairs.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<String>>>);

struct Line<'a>(&'a mut String);

impl Visit for Line<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, "{}={:?} ", field.name(), value);
    }
}

impl Subscriber for Capture {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= Level::WARN
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut line = String::new();
        event.record(&mut Line(&mut line));
        self.0.lock().expect("not poisoned").push(line);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

// A current-thread runtime, so that every task logs on this thread, under this subscriber.
#[tokio::test]
async fn garbage_is_logged_with_the_peer_address_and_the_error() {
    let capture = Capture::default();
    let _guard = tracing::subscriber::set_default(capture.clone());

    let listener = bind().await;
    let addr = listener.local_addr().expect("addr");
    let (handle, _inbound) = Transport::start(config(1, listener, BTreeMap::new())).expect("start");
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let local = stream.local_addr().expect("addr");
    stream
        .write_all(b"\x16\x03\x01 TLS hello")
        .await
        .expect("write");
    let mut buf = [0u8; 16];
    let read = bounded("the close", stream.read(&mut buf)).await;
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    let h = handle.clone();
    wait_until("the handshake failure", move || {
        h.metrics().handshake_failures == 1
    })
    .await;

    let lines = capture.0.lock().expect("not poisoned").clone();
    let line = lines
        .iter()
        .find(|line| line.contains("handshake failed"))
        .unwrap_or_else(|| panic!("no handshake failure logged in {lines:#?}"));
    assert!(line.contains(&format!("peer_addr={local}")), "{line}");
    assert!(line.contains("bad magic"), "{line}");
    handle.shutdown().await;
}
