//! # fabemu-flow (lead's temporary stub network; replaced by the real crate at merge)
#![warn(missing_docs, unreachable_pub)]

pub mod sim;
mod stub;

pub use stub::{FlowId, FlowNetwork, LinkId};
