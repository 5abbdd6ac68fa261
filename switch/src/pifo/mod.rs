//! PIFOs and PIFO trees: programmable packet scheduling.
//!
//! A *push-in first-out* queue (PIFO) is a priority queue in which every element carries a rank:
//! an element may be pushed anywhere (by rank), but only the head leaves (smallest rank first;
//! equal ranks in arrival order). Sivaraman et al., "Programmable Packet Scheduling at Line
//! Rate" (SIGCOMM 2016), observe that most scheduling algorithms decide *in what order* and
//! *when* packets leave at the moment they are enqueued, so one abstraction expresses them all:
//! a rank computed by a small program (a *scheduling transaction*) at enqueue, and a PIFO that
//! keeps the order. Hierarchies (hierarchical fair queueing, rate limits per class) are a *tree*
//! of PIFOs: the leaves hold packets, the inner nodes hold references to children, and a
//! *shaping transaction* can hold an element back from its parent until a release time.
//!
//! This module provides:
//! - the [`Pifo`] trait with two exact implementations: [`HeapPifo`] (a min-max heap keyed by
//!   (rank, arrival number); any `u64` rank) and [`BucketPifo`] (a calendar of FIFO buckets with
//!   a find-first-set bitmap hierarchy, the fast one for integer ranks in a sliding window);
//! - [`PifoTree`], the tree, generic over the queued item (the switch queues `Packet`s), with
//!   shaping, PFC-aware dequeue and instrumentation counters;
//! - built-in [`transactions`] (FIFO, strict priority, WFQ/STFQ, round robin, token bucket,
//!   minimum rate, LSTF, SRPT, SJF, LAS, EDF, Stop-and-Go) and [`classifier`]s; users add their
//!   own by implementing [`SchedulingTransaction`], [`ShapingTransaction`] or [`Classifier`].
//!
//! Transactions read a [`PacketInfo`], the scheduling-relevant facts of a packet, which the
//! switch extracts once per packet; the tree never looks inside the item it queues.

mod bucket;
pub mod classifier;
pub mod config;
mod heap;
mod info;
pub mod transactions;
mod tree;

pub use bucket::{BucketConfig, BucketPifo};
pub use classifier::Classifier;
pub use heap::HeapPifo;
pub use info::PacketInfo;
pub use transactions::{SchedulingTransaction, ShapingTransaction, TxnCtx};
pub use tree::{
    EnqueueError, NodeId, NodeSpec, NodeStats, PifoKind, PifoTree, PifoTreeBuilder, TreeError,
    MAX_CHILDREN,
};

/// What a full PIFO does with one element too many.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OverflowPolicy {
    /// Refuse the arriving element (drop-tail).
    #[default]
    DropArriving,
    /// Keep the elements that would leave first: the one that would leave last — the largest
    /// rank, and among equal largest ranks the latest arrival — is pushed out. That may be the
    /// arriving element itself (its rank is at least the largest queued one), in which case it
    /// is refused as with [`OverflowPolicy::DropArriving`].
    EvictLargest,
}

/// The element a full PIFO gave back from a push.
///
/// Either way the PIFO's length is unchanged and the returned element is no longer queued.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Overflow<T> {
    /// The arriving element was not queued.
    #[error("PIFO full: arriving element of rank {rank} refused")]
    Refused {
        /// Its rank.
        rank: u64,
        /// The element.
        item: T,
    },
    /// The arriving element was queued and this one, the largest, was pushed out
    /// ([`OverflowPolicy::EvictLargest`]).
    #[error("PIFO full: queued element of rank {rank} evicted")]
    Evicted {
        /// Its rank.
        rank: u64,
        /// The element.
        item: T,
    },
}

impl<T> Overflow<T> {
    /// The element given back and its rank.
    pub fn into_inner(self) -> (u64, T) {
        match self {
            Overflow::Refused { rank, item } | Overflow::Evicted { rank, item } => (rank, item),
        }
    }
    /// True when the arriving element was queued (another one was evicted).
    pub fn arriving_queued(&self) -> bool {
        matches!(self, Overflow::Evicted { .. })
    }
}

/// A push-in first-out queue: elements enter anywhere by rank, leave from the head.
///
/// Contract shared by every implementation (and checked by one test suite run against each):
/// - [`pop`](Pifo::pop) returns the smallest rank; **equal ranks leave in arrival order**;
/// - at most [`capacity`](Pifo::capacity) elements are held; a push beyond that follows the
///   queue's [`OverflowPolicy`] and gives one element back in an [`Overflow`];
/// - the back end ([`peek_largest`](Pifo::peek_largest), [`pop_largest`](Pifo::pop_largest))
///   is the element that would leave last, for buffer management (eviction).
///
/// The trait is object-safe.
pub trait Pifo<T> {
    /// Queues `item` with `rank`, or gives one element back when full (see [`Overflow`]).
    fn push(&mut self, rank: u64, item: T) -> Result<(), Overflow<T>>;
    /// Removes the head: the smallest rank, the earliest arrival among equals.
    fn pop(&mut self) -> Option<(u64, T)>;
    /// The head, without removing it.
    fn peek(&self) -> Option<(u64, &T)>;
    /// The head's rank.
    fn peek_rank(&self) -> Option<u64> {
        self.peek().map(|(r, _)| r)
    }
    /// The element that would leave last: the largest rank, the latest arrival among equals.
    fn peek_largest(&self) -> Option<(u64, &T)>;
    /// Removes the element that would leave last.
    fn pop_largest(&mut self) -> Option<(u64, T)>;
    /// Elements queued.
    fn len(&self) -> usize;
    /// True when nothing is queued.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Most elements held at once.
    fn capacity(&self) -> usize;
    /// What a push into a full queue does.
    fn policy(&self) -> OverflowPolicy;
}

/// Decides what a push into a full queue gives back, given the queue's last element.
///
/// Shared by the implementations so that they agree exactly: the arriving element is newer than
/// every queued one, so it would leave last unless its rank is strictly smaller than the
/// largest queued rank.
#[inline]
pub(crate) fn arriving_is_last(policy: OverflowPolicy, rank: u64, largest: Option<u64>) -> bool {
    match (policy, largest) {
        (OverflowPolicy::DropArriving, _) | (_, None) => true,
        (OverflowPolicy::EvictLargest, Some(l)) => rank >= l,
    }
}

#[cfg(test)]
mod alloc_tests;
#[cfg(test)]
mod suite;
#[cfg(test)]
mod tree_tests;
