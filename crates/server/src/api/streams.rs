//! The pools that KeepAlive and Observe streams draw their slots from: a bounded number of
//! open streams of each kind on this node, and each principal's share of it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tenure_proto::Reason;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::Status;

use crate::auth::Principal;
use crate::metrics::Metrics;

/// Which pool a stream draws its slot from.
#[derive(Clone, Copy, Debug)]
pub(super) enum StreamKind {
    KeepAlive,
    Observe,
}

impl StreamKind {
    fn open(self, metrics: &Metrics) -> &AtomicU64 {
        match self {
            StreamKind::KeepAlive => &metrics.keepalive_streams,
            StreamKind::Observe => &metrics.observe_streams,
        }
    }

    fn refused(self, metrics: &Metrics) -> &AtomicU64 {
        match self {
            StreamKind::KeepAlive => &metrics.keepalive_streams_refused,
            StreamKind::Observe => &metrics.observe_streams_refused,
        }
    }
}

/// A bounded number of open streams of one kind, and each principal's share of it.
#[derive(Clone)]
pub(super) struct StreamPool {
    kind: StreamKind,
    slots: Arc<Semaphore>,
    max: usize,
    /// A principal's share unless the auth file sets its own.
    share: usize,
    /// Streams held, by principal.
    held: SharesHeld,
}

/// Streams held in one pool, by principal (the metrics show them).
type SharesHeld = crate::metrics::PrincipalCounts;

/// One open stream's place in its pool, given back when the stream's task ends.
pub(super) struct StreamSlot {
    _permit: OwnedSemaphorePermit,
    kind: StreamKind,
    metrics: Arc<Metrics>,
    /// Its principal's count in the pool, if it has one.
    principal: Option<(String, SharesHeld)>,
}

impl StreamPool {
    pub(super) fn new(kind: StreamKind, max: usize, share: usize, held: SharesHeld) -> StreamPool {
        StreamPool {
            kind,
            slots: Arc::new(Semaphore::new(max)),
            max,
            share,
            held,
        }
    }

    /// The quota's name, for refusals.
    fn quota_names(&self) -> (&'static str, &'static str, &'static str) {
        match self.kind {
            StreamKind::KeepAlive => (
                "KeepAlive",
                "keepalive_streams_max",
                "keepalive_streams (keepalive_streams_per_principal_max)",
            ),
            StreamKind::Observe => (
                "Observe",
                "observe_streams_max",
                "observe_streams (observe_streams_per_principal_max)",
            ),
        }
    }

    /// A slot for `principal`, or RESOURCE_EXHAUSTED: `quota-exceeded` when the principal
    /// holds its whole share (`quota`, or the pool's default share), `resource-exhausted`
    /// when every slot is taken. One principal's streams never take more than its share, so
    /// with shares that add up to the pool no principal is refused for another's.
    pub(super) fn take(
        &self,
        metrics: &Arc<Metrics>,
        principal: &Principal,
        quota: Option<usize>,
    ) -> Result<StreamSlot, Status> {
        let (what, _, quota_name) = self.quota_names();
        let mut counted = None;
        if let Principal::Named(name) = principal {
            let share = quota.unwrap_or(self.share);
            let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
            let n = held.entry(name.clone()).or_insert(0);
            if *n >= share {
                self.kind.refused(metrics).fetch_add(1, Ordering::Relaxed);
                return Err(
                    Reason::QuotaExceeded.label(Status::resource_exhausted(format!(
                        "principal {name:?} has {n} {what} streams open on this node, its quota \
                     {quota_name} of {share}; end some of its own first"
                    ))),
                );
            }
            *n += 1;
            counted = Some((name.clone(), Arc::clone(&self.held)));
        }
        let give_back = |counted: &Option<(String, SharesHeld)>| {
            if let Some((name, held)) = counted {
                release_share(held, name);
            }
        };
        match Arc::clone(&self.slots).try_acquire_owned() {
            Ok(permit) => {
                self.kind.open(metrics).fetch_add(1, Ordering::Relaxed);
                Ok(StreamSlot {
                    _permit: permit,
                    kind: self.kind,
                    metrics: Arc::clone(metrics),
                    principal: counted,
                })
            }
            Err(_) => {
                give_back(&counted);
                self.kind.refused(metrics).fetch_add(1, Ordering::Relaxed);
                let (what, flag, _) = self.quota_names();
                Err(Reason::ResourceExhausted.label(Status::resource_exhausted(format!(
                    "this node has {} {what} streams open, its limit ({flag}); retry later or on another node",
                    self.max
                ))))
            }
        }
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.kind
            .open(&self.metrics)
            .fetch_sub(1, Ordering::Relaxed);
        if let Some((name, held)) = &self.principal {
            release_share(held, name);
        }
    }
}

/// One stream of principal `name` ended.
fn release_share(held: &SharesHeld, name: &str) {
    let mut held = held.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(n) = held.get_mut(name) {
        *n -= 1;
        if *n == 0 {
            held.remove(name);
        }
    }
}
