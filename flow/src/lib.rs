//! # fabemu-flow
//!
//! A fluid (flow-level) network: the coarse fidelity of fabemu. It knows nothing about packets,
//! NICs, switches or scenarios; it moves **flows** (a number of payload bytes) over **link
//! directions** (a capacity in bytes per second each) and gives every flow a max-min fair rate.
//! Time is the fabric's virtual time ([`fabemu_fabric::units::Time`], picoseconds), and the
//! network only changes when a flow starts or finishes, so a run costs a few operations per
//! flow instead of a few per packet.
//!
//! ## The model
//!
//! - **Usage.** A flow at rate `r` (payload bytes/s) uses `w * r` of the capacity of each link
//!   direction it lists, with its own weight `w` per link: the caller passes the forward path
//!   with `w` = wire bytes per payload byte. A flow may also have a cap on `r` (a rate limiter,
//!   or a NIC's per-QP rate).
//! - **ACK reservations.** The reverse path's ACK bytes per payload byte are passed apart
//!   ([`FlowNetwork::start_with_acks`]): they *reserve* `a * r` of those links' capacity, taken
//!   off before the filling, instead of sharing it. Shared, a few percent of ACK bytes would join
//!   every flow to the flows on its reverse path, so that a ring of 1024 flows is one component
//!   refilled at every start and finish. A reservation is updated when the flow's rate has
//!   moved by more than [`network::RESERVATION_EPSILON`] since it was set, which bounds how far
//!   a change propagates (each round smaller by the ACK-to-data ratio) and the error it makes
//!   (the ACK load to within 1e-3: about 2e-5 of a link); a link applies their sum when it has
//!   moved by more than [`network::LINK_RESERVATION_SLACK`] (1e-4 of its capacity). What a
//!   finished flow reserved is held until the link is refilled anyway (a flow starts on it or
//!   leaves it) or a rate change moves its reservations (see [`network`]).
//! - **Weighted max-min fairness by progressive filling** ([`maxmin`]): constraints
//!   `sum_f w_fl * r_f <= C_l` per link direction and `r_f <= cap_f` per flow. All flows that are
//!   not frozen share one rising level `x`. A link saturates at
//!   `x_l = (C_l - load of its frozen flows) / (sum of the weights of its unfrozen flows)`; the
//!   link with the smallest `x_l` (a cap acts as a private link of its flow) freezes its flows at
//!   that level, and the filling goes on until every flow is frozen. The links wait in a
//!   min-heap keyed by a lower bound of their level (levels only rise), re-checked when they come
//!   out, so the heap holds one entry per link and a filling costs `O(E + P log L)` for `E`
//!   (flow, link) pairs, `L` links and `P` pops, instead of a scan of all links per round.
//! - **Incremental, above a threshold** ([`network`]): the max-min rates of flows that share
//!   no link direction, directly or through other flows, do not depend on each other, and the
//!   filling below the level at which a changed link saturates (before or after the change) is
//!   the same as before it. A start or a finish only marks its links dirty; before the next query
//!   the network takes each dirty link's threshold, collects the flows at or above it that are
//!   connected to the link through such flows (a breadth-first search), and refills only those,
//!   the flows below the threshold folded into their links' capacities. The filling is taken in
//!   a canonical order (flows by [`FlowId`], links by [`LinkId`], heap ties broken by kind and
//!   index), so runs are reproducible, and the incremental rates equal a recomputation of every
//!   component ([`FlowNetwork::recompute_all`]) up to the order of float additions.
//! - **Progress.** Every flow keeps its remaining payload bytes and the time of its last rate
//!   change; its projected finish time is `last change + ceil(remaining / rate)` in picoseconds
//!   (rounded up: a flow never finishes before its last byte is out). A queue of projected finish
//!   times grouped by instant, invalidated lazily by a per-flow version, means that advancing time touches only the
//!   flows that finish or whose rate changed. A flow at rate 0 (which cannot happen with positive
//!   capacities) simply never finishes until its rate changes.
//! - **Link bytes.** Each link direction integrates its load (`sum w * r` of its flows) over time,
//!   for utilization reports ([`FlowNetwork::link_bytes`]).
//!
//! ## Driving it
//!
//! A simulation alternates between asking for the next finish and advancing to it (or to an
//! earlier event of its own), starting the flows that the finished ones unblock:
//!
//! ```
//! use fabemu_fabric::units::Time;
//! use fabemu_flow::{FlowNetwork, LinkId};
//!
//! # fn main() -> Result<(), fabemu_flow::FlowError> {
//! // Two link directions of 12.5 GB/s (100 Gb/s): data one way, ACKs the other.
//! let mut net = FlowNetwork::new(vec![12.5e9, 12.5e9])?;
//! // 1 MB over link 0 at 1.0625 wire bytes per payload byte, ACKs of 1/64 on link 1.
//! let usage = [(LinkId(0), 1.0625)];
//! let acks = [(LinkId(1), 1.0 / 64.0)];
//! net.start_with_acks(Time::ZERO, &usage, &acks, 1_000_000, None, 42)?;
//! let mut finished = Vec::new();
//! while let Some(t) = net.next_finish() {
//!     net.advance(t, &mut finished);
//!     // ... start the flows that depend on `finished` at `t` here ...
//! }
//! assert_eq!(finished.len(), 1);
//! assert_eq!(finished[0].1, 42);
//! // 1e6 B at 12.5e9 / 1.0625 B/s: 85 us.
//! assert_eq!(net.now(), Time::from_us(85));
//! # Ok(())
//! # }
//! ```
//!
//! ## Determinism
//!
//! Same calls, same results, on every platform: no hash map iteration reaches a result (there is
//! no hash map at all), no wall clock, and floating point uses only `+ - * /`, comparisons and
//! `ceil`, all exactly specified by IEEE 754.
#![warn(missing_docs, unreachable_pub)]

pub mod backlog;
mod head_vec;
mod id_slab;
mod keyed_heap;
pub mod maxmin;
pub mod network;
pub mod pfc;
pub mod queues;
pub mod sim;

pub use backlog::{BacklogPeak, Backlogs, DynamicThreshold, PauseThreshold, PauseTotal};
pub use maxmin::{max_min_rates, FlowSpec};
pub use network::{FlowNetwork, PathId};
pub use queues::{QueueEvent, QueueNetwork};

// The flow-level transport (`sim`) runs applications over a [`FlowNetwork`].

/// One direction of a link; indices `0..n` chosen by the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LinkId(pub u32);

/// A flow in the network. Ids are small integers reused after the flow finished, so that the
/// network's tables stay as large as the number of flows active at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FlowId(pub u32);

/// What was wrong with an input of the flow network, in the caller's terms.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum FlowError {
    /// A link capacity was not a positive finite number of bytes per second.
    #[error("link direction {link}: capacity {value} B/s is not a positive finite number")]
    InvalidCapacity {
        /// The link direction.
        link: u32,
        /// The capacity given.
        value: f64,
    },
    /// A flow listed a link direction the network does not have.
    #[error("link direction {link} does not exist (the network has {links})")]
    UnknownLink {
        /// The link direction given.
        link: u32,
        /// How many link directions the network has.
        links: usize,
    },
    /// A usage weight was not a positive finite number.
    #[error("link direction {link}: weight {weight} is not a positive finite number")]
    InvalidWeight {
        /// The link direction.
        link: u32,
        /// The weight given.
        weight: f64,
    },
    /// A rate cap was not a positive number (`+inf` means no cap).
    #[error("rate cap {cap} B/s is not a positive number")]
    InvalidCap {
        /// The cap given.
        cap: f64,
    },
    /// A flow of zero bytes: it would have no last byte to finish with.
    #[error("a flow must move at least one byte")]
    ZeroBytes,
    /// A flow that uses no link and has no cap would have an infinite rate.
    #[error("a flow that uses no link needs a rate cap")]
    Unbounded,
    /// A path id that [`FlowNetwork::add_path`] did not return.
    #[error("path {path} does not exist (the network has {paths})")]
    UnknownPath {
        /// The path id given.
        path: u32,
        /// How many paths the network has.
        paths: usize,
    },
    /// A flow listed more link directions (data and ACK links together) than a flow can hold.
    #[error("a flow lists {links} link directions; at most 65535 are supported")]
    TooManyLinks {
        /// How many it listed.
        links: usize,
    },
    /// A flow was started before the network's current time.
    #[error("flow started at {at} ps, before the network's current time {now} ps")]
    TimeInPast {
        /// The requested start time (ps).
        at: u64,
        /// The network's current time (ps).
        now: u64,
    },
    /// A flow was started after a time at which another flow finishes: advance the network to
    /// the start time first, so that the finished flows are reported.
    #[error("flow started at {at} ps, after another flow finishes at {finish} ps; advance first")]
    SkipsFinish {
        /// The requested start time (ps).
        at: u64,
        /// The earliest pending finish (ps).
        finish: u64,
    },
}

/// 2^52: a float of this magnitude or more is a whole number.
pub(crate) const WHOLE_FROM: f64 = 4_503_599_627_370_496.0;

/// `x.ceil()`, without the library call that `ceil` is where the CPU the build targets has no
/// rounding instruction (x86-64's baseline): truncated through `i64` (one conversion each way)
/// and raised where a fraction was cut. The same value as `ceil` for every `x`: magnitudes of
/// 2^52 and more are whole already, and they, NaN and the infinities go to `ceil`.
#[inline]
pub(crate) fn round_up(x: f64) -> f64 {
    if x.is_nan() || x.abs() >= WHOLE_FROM {
        return x.ceil();
    }
    let t = x as i64 as f64;
    if t < x {
        t + 1.0
    } else if t == 0.0 && x.is_sign_negative() {
        // ceil(-0.5) and ceil(-0.0) are -0.
        -0.0
    } else {
        t
    }
}

#[cfg(test)]
mod tests {
    use super::round_up;

    #[test]
    fn round_up_gives_the_bits_ceil_gives() {
        let mut xs = vec![
            0.0,
            -0.0,
            0.5,
            -0.5,
            1.0,
            -1.0,
            1.5,
            -1.5,
            f64::MIN_POSITIVE,
            -f64::MIN_POSITIVE,
            4_503_599_627_370_495.5,
            4_503_599_627_370_496.0,
            -4_503_599_627_370_495.5,
            9.3e18,
            1e300,
            f64::MAX,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
        ];
        // Projected finishes: bytes x 1e12 / rate, around every power of two.
        let mut x: f64 = 1.234_567_890_123e-3;
        while x < 1e19 {
            xs.extend([x, -x, x.next_up(), x.next_down()]);
            x *= 1.37;
        }
        for x in xs {
            assert_eq!(round_up(x).to_bits(), x.ceil().to_bits(), "{x:e}");
        }
    }
}
