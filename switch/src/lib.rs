//! # fabemu-switch
//!
//! The switch actor. A frame's journey: parse the headers from its bytes ([`fabemu_fabric::wire`])
//! → route (destination address → equal-cost egress ports, one chosen by a hash of the 5-tuple)
//! → decrement TTL → priority from the DSCP ([`priority`]) → admission to the shared buffer,
//! accounted per ingress (port, priority) with dynamic thresholds and PFC headroom ([`mmu`],
//! configured by [`buffer`]) → the egress port's scheduler ([`egress`]) → transmit when the port
//! is free and the priority is not paused ([`pfc`]), ECN-marking by RED on the way out
//! ([`red`]). A watchdog reports queues stuck behind pauses ([`watchdog`]).
//!
//! The egress scheduler is a trait object so that other disciplines (PIFO trees) plug in
//! without touching forwarding or buffering.
#![warn(missing_docs, unreachable_pub)]

pub mod buffer;
pub mod egress;
pub mod mmu;
pub mod pfc;
pub mod pifo;
pub mod priority;
pub mod red;
mod switch;
pub mod tree_egress;
pub mod watchdog;

#[cfg(test)]
mod lone_tests;

pub use crate::switch::{PriorityStats, Switch, SwitchConfig, SwitchPortStats, SwitchStats};
pub use crate::watchdog::StalledQueue;
