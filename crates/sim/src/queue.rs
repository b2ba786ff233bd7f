//! The event queue: a min-heap keyed by (simulated time, sequence number).
//!
//! The sequence number makes the order of simultaneous events the order in which they were
//! scheduled, so the run does not depend on heap internals.
//!
//! Events live in a slab and the heap orders small keys that name their slots, so a push
//! or pop moves 24-byte keys rather than whole events, and an event can carry its payload
//! inline instead of in a box of its own.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::time::SimTimeUs;

#[derive(Clone, Copy)]
struct Key {
    time_us: SimTimeUs,
    seq: u64,
    slot: usize,
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        (self.time_us, self.seq) == (other.time_us, other.seq)
    }
}

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap and the earliest event must come out first.
        (other.time_us, other.seq).cmp(&(self.time_us, self.seq))
    }
}

/// Events ordered by time, ties broken by scheduling order.
pub struct EventQueue<E> {
    heap: BinaryHeap<Key>,
    slots: Vec<Option<E>>,
    /// Slots whose event was taken, reused before the slab grows.
    free: Vec<usize>,
    next_seq: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue {
            heap: BinaryHeap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            next_seq: 0,
        }
    }
}

impl<E> EventQueue<E> {
    /// Schedules `event` at `time_us`.
    pub fn push(&mut self, time_us: SimTimeUs, event: E) {
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot] = Some(event);
                slot
            }
            None => {
                self.slots.push(Some(event));
                self.slots.len() - 1
            }
        };
        self.heap.push(Key {
            time_us,
            seq: self.next_seq,
            slot,
        });
        self.next_seq += 1;
    }

    /// Takes the earliest event.
    pub fn pop(&mut self) -> Option<(SimTimeUs, E)> {
        let key = self.heap.pop()?;
        let event = self.slots[key.slot]
            .take()
            .expect("every queued key names a filled slot");
        self.free.push(key.slot);
        Some((key.time_us, event))
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

#[cfg(test)]
mod tests {
    use super::EventQueue;

    #[test]
    fn pops_by_time_then_scheduling_order_and_reuses_slots() {
        let mut q = EventQueue::default();
        q.push(30, "c");
        q.push(10, "a1");
        q.push(10, "a2");
        q.push(20, "b");
        assert_eq!(q.pop(), Some((10, "a1")));
        assert_eq!(q.pop(), Some((10, "a2")));
        q.push(10, "a3");
        q.push(25, "b2");
        assert_eq!(q.len(), 4);
        assert_eq!(q.slots.len(), 4, "freed slots are reused");
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, vec![(10, "a3"), (20, "b"), (25, "b2"), (30, "c")]);
        assert!(q.is_empty());
    }
}
