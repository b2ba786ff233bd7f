//! The holder's view of its session (lease), shared by the keepalive task that extends it and
//! the [`crate::Leadership`] that reads it (DESIGN.md rule 4).

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the holder believes about its lease.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LeaseState {
    /// Until when the holder may believe its session alive: the send time of the last
    /// acknowledged keepalive (or of the grant request) + TTL − drift margin, on this
    /// process's monotonic clock. It only ever moves forward.
    pub valid_until: Instant,
    /// Set once the backend said the session is gone (expired, revoked, unknown).
    pub ended: bool,
}

/// One granted session and the task that keeps it alive.
#[derive(Debug)]
pub(crate) struct Session {
    /// The backend's id of the session; candidacies are bound to it.
    pub id: u64,
    /// The TTL the backend granted.
    pub ttl: Duration,
    /// How much earlier than the backend the holder stops believing (drift and scheduling):
    /// `tenure_core::drift::holder_margin` of the TTL asked for.
    pub margin: Duration,
    /// The lease as the holder sees it; a watch so that `lost()` wakes on every change.
    pub state: watch::Sender<LeaseState>,
    /// Fate-sharing: every keepalive binds the session to the stream it goes on, and the
    /// session is given up (ended here) before any such stream is closed while it may still
    /// be believed in ([`crate::CampaignOptions::fate_sharing`]).
    pub bound: bool,
    /// The keepalive task, until it is stopped.
    keepalive: Mutex<Option<JoinHandle<()>>>,
}

impl Session {
    /// A session granted with `ttl` by a request sent at `sent`; `bound` for fate-sharing.
    pub fn new(id: u64, ttl: Duration, margin: Duration, sent: Instant, bound: bool) -> Session {
        let (state, _) = watch::channel(LeaseState {
            valid_until: (sent + ttl).checked_sub(margin).unwrap_or(sent),
            ended: false,
        });
        Session {
            id,
            ttl,
            margin,
            state,
            bound,
            keepalive: Mutex::new(None),
        }
    }

    /// Record the keepalive task, so that it can be stopped.
    pub fn set_keepalive(&self, task: JoinHandle<()>) {
        let old = self
            .keepalive
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .replace(task);
        if let Some(old) = old {
            old.abort();
        }
    }

    /// Stop renewing: from now on the lease runs out at its current `valid_until`. A
    /// fate-sharing session is given up instead (ended here, so that nothing believes in it
    /// any more) before its keepalive task, and with it its bound streams, goes: the
    /// cluster then ends it at once.
    pub fn stop_keepalives(&self) {
        if self.bound {
            self.end();
        }
        if let Some(task) = self
            .keepalive
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            task.abort();
        }
    }

    /// The backend acknowledged a keepalive sent at `sent`, granting `ttl` from then.
    pub fn acked(&self, sent: Instant, ttl: Duration) {
        let ttl = ttl.min(self.ttl);
        let until = (sent + ttl).checked_sub(self.margin).unwrap_or(sent);
        self.state.send_if_modified(|s| {
            if until > s.valid_until && !s.ended {
                s.valid_until = until;
                true
            } else {
                false
            }
        });
    }

    /// The backend said the session is gone, or (fate-sharing) the holder gave it up.
    pub fn end(&self) {
        self.state
            .send_if_modified(|s| !std::mem::replace(&mut s.ended, true));
    }

    /// Whether the backend said the session is gone.
    pub fn ended(&self) -> bool {
        self.state.borrow().ended
    }

    /// Resolves once the backend says the session is gone.
    pub async fn wait_ended(&self) {
        let mut rx = self.state.subscribe();
        // The sender lives in `self`, so `wait_for` cannot fail while we borrow it.
        let _ = rx.wait_for(|s| s.ended).await;
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.stop_keepalives();
    }
}
