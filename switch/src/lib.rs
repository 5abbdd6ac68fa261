//! # fabemu-switch
//!
//! The switch actor. A frame's journey: parse the headers from its bytes ([`fabemu_fabric::wire`])
//! → route (destination address → equal-cost egress ports, one chosen by a hash of the 5-tuple)
//! → decrement TTL → admission to the shared buffer ([`buffer`]; drop-tail when full) → the
//! egress port's scheduler ([`egress`]) → transmit when the port is free.
//!
//! The egress scheduler is a trait object so that other disciplines (PIFO trees) plug in
//! without touching forwarding or buffering.
#![warn(missing_docs, unreachable_pub)]

pub mod buffer;
pub mod egress;
pub mod pifo;
mod switch;
pub mod tree_egress;

pub use crate::switch::{Switch, SwitchConfig, SwitchPortStats, SwitchStats};
