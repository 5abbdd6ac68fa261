//! # fabemu-fabric
//!
//! The foundation of fabemu: virtual time and units ([`units`]), real RoCEv2 and PFC frames
//! ([`wire`], [`packet`]), links and ports ([`link`]), the sans-IO actor interface and the
//! deterministic parallel discrete-event engine ([`engine`]), and hosts with RoCE NICs
//! ([`host`]), and the [`transport`] seam between applications and what carries their
//! messages.
#![warn(missing_docs, unreachable_pub)]

pub mod deque;
pub mod engine;
pub mod fault;
pub mod histogram;
pub mod host;
pub mod link;
pub mod mix;
pub mod packet;
pub mod route;
pub mod transport;
pub mod units;
pub mod wire;
