//! `fabemu emulate`: real programs in network namespaces, their frames carried through the
//! emulated fabric. This module holds the operating-system side: namespaces and their TAP
//! devices ([`netns`], [`tap`]) and the programs started in them ([`launch`]).

pub mod launch;
pub mod netns;
pub mod tap;
