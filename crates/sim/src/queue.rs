//! The event queue: a min-heap keyed by (simulated time, sequence number).
//!
//! The sequence number makes the order of simultaneous events the order in which they were
//! scheduled, so the run does not depend on heap internals.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::time::SimTimeUs;

struct Queued<E> {
    time_us: SimTimeUs,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Queued<E> {
    fn eq(&self, other: &Self) -> bool {
        (self.time_us, self.seq) == (other.time_us, other.seq)
    }
}

impl<E> Eq for Queued<E> {}

impl<E> PartialOrd for Queued<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<E> Ord for Queued<E> {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap and the earliest event must come out first.
        (other.time_us, other.seq).cmp(&(self.time_us, self.seq))
    }
}

/// Events ordered by time, ties broken by scheduling order.
pub struct EventQueue<E> {
    heap: BinaryHeap<Queued<E>>,
    next_seq: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue {
            heap: BinaryHeap::new(),
            next_seq: 0,
        }
    }
}

impl<E> EventQueue<E> {
    /// Schedules `event` at `time_us`.
    pub fn push(&mut self, time_us: SimTimeUs, event: E) {
        self.heap.push(Queued {
            time_us,
            seq: self.next_seq,
            event,
        });
        self.next_seq += 1;
    }

    /// Takes the earliest event.
    pub fn pop(&mut self) -> Option<(SimTimeUs, E)> {
        self.heap.pop().map(|q| (q.time_us, q.event))
    }

    /// Events waiting.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// True if nothing is scheduled.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}
