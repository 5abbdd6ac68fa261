//! [`PacketInfo`]: what scheduling and shaping transactions may read about a packet.

use fabemu_fabric::units::Time;

/// The scheduling-relevant facts of one queued packet.
///
/// The switch fills it once per packet from the headers and its own state (the mapping lives
/// with the switch, so the PIFO code never parses frames); the tree stores it with the item and
/// sets [`now`](PacketInfo::now) before each transaction runs. Fields a scenario does not supply
/// stay zero; transactions that need them then degrade to FIFO among equal ranks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PacketInfo {
    /// Frame length in bytes (what the queue holds and the link carries, without preamble/IFG).
    pub len: u32,
    /// Flow identity: a hash of the 5-tuple (or any per-flow key).
    pub flow: u64,
    /// PFC priority / traffic class, 0..=7 (also what PFC pauses).
    pub priority: u8,
    /// IP DSCP, 0..=63.
    pub dscp: u8,
    /// Destination queue pair (RoCE).
    pub qp: u32,
    /// Size of the message this packet belongs to, in bytes (SJF).
    pub message_size: u64,
    /// Bytes of the message still to send, this packet included (SRPT).
    pub remaining_bytes: u64,
    /// Bytes of the flow already sent before this packet, as the sender counts them (LAS from
    /// the packet; [`Las::per_flow`](crate::pifo::transactions::Las::per_flow) counts at the
    /// switch instead).
    pub attained_bytes: u64,
    /// Absolute deadline (EDF).
    pub deadline: Time,
    /// Slack: how long the packet may still wait, as of [`arrival`](PacketInfo::arrival) (LSTF).
    pub slack: Time,
    /// An explicit rank the message carries (the `rank` transaction, [`crate::pifo::transactions::Given`]).
    pub rank: u64,
    /// When the packet arrived at this switch.
    pub arrival: Time,
    /// The time the transaction runs at (set by the tree: the enqueue time, or a shaped
    /// element's release time).
    pub now: Time,
}
