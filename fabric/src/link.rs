//! Links and ports: how long a frame occupies a wire and when its last bit arrives.
//!
//! A link is two independent one-way channels, each with a bandwidth and a propagation latency.
//! A port puts one frame at a time on its channel; the frame occupies the wire for its *wire
//! bytes* — the frame plus Ethernet's FCS, preamble/SFD and inter-frame gap, padded to the
//! minimum frame — and reaches the peer when its last bit does (store-and-forward):
//! `arrival = start + serialization(wire bytes) + latency`.

use serde::{Deserialize, Serialize};

use crate::units::{Bandwidth, Time, PS_PER_S};

/// What Ethernet adds to every frame on the wire. All fields are bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EthernetOverhead {
    /// Frame check sequence appended to every frame (4 bytes).
    pub fcs: u32,
    /// Preamble and start-of-frame delimiter (8 bytes).
    pub preamble: u32,
    /// Minimum inter-frame gap (12 bytes).
    pub inter_frame_gap: u32,
    /// Minimum frame size including FCS (64 bytes); shorter frames are padded.
    pub min_frame: u32,
}

impl Default for EthernetOverhead {
    fn default() -> Self {
        EthernetOverhead {
            fcs: 4,
            preamble: 8,
            inter_frame_gap: 12,
            min_frame: 64,
        }
    }
}

impl EthernetOverhead {
    /// No overhead at all: wire bytes equal frame bytes (for textbook comparisons).
    pub const NONE: EthernetOverhead = EthernetOverhead {
        fcs: 0,
        preamble: 0,
        inter_frame_gap: 0,
        min_frame: 0,
    };

    /// Bytes a frame of `frame_len` bytes (without FCS) occupies on the wire.
    #[inline]
    pub fn wire_bytes(&self, frame_len: usize) -> u64 {
        let with_fcs = (frame_len as u64 + self.fcs as u64).max(self.min_frame as u64);
        with_fcs + self.preamble as u64 + self.inter_frame_gap as u64
    }
}

/// A channel's rate, with serialization precomputed for speed.
///
/// Same result as [`Bandwidth::serialization_time`] (exact, rounded up to the picosecond) but
/// avoids 128-bit division per packet: when `8·10^12` is a multiple of the rate (every rate
/// of a whole number of Mb/s that divides 8 Tb/s, e.g. 25/40/50/100/200/400 Gb/s) the time is
/// a multiplication; otherwise a 64-bit division (exact for frames under 2 MB).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    bandwidth: Bandwidth,
    ps_per_byte: Option<u64>,
}

impl Rate {
    /// A rate for `bandwidth`.
    pub fn new(bandwidth: Bandwidth) -> Rate {
        let bps = bandwidth.bps().max(1);
        let num = 8 * PS_PER_S;
        let ps_per_byte = (num % bps == 0).then_some(num / bps);
        Rate {
            bandwidth,
            ps_per_byte,
        }
    }
    /// The bandwidth.
    pub fn bandwidth(&self) -> Bandwidth {
        self.bandwidth
    }
    /// Time to serialize `bytes`.
    #[inline]
    pub fn serialization_time(&self, bytes: u64) -> Time {
        match self.ps_per_byte {
            // Saturates: a frame that would take longer than u64 picoseconds never finishes.
            Some(p) => Time(bytes.saturating_mul(p)),
            None if bytes < (1 << 20) => {
                Time((bytes * 8 * PS_PER_S).div_ceil(self.bandwidth.bps().max(1)))
            }
            None => self.bandwidth.serialization_time(bytes),
        }
    }
}

/// One direction of a link as seen from the transmitting port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Channel {
    /// Rate of the channel.
    pub rate: Rate,
    /// Propagation latency.
    pub latency: Time,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_bytes_add_overhead_and_pad() {
        let e = EthernetOverhead::default();
        assert_eq!(e.wire_bytes(1000), 1000 + 4 + 8 + 12);
        // A 40-byte frame is padded to 64 with FCS.
        assert_eq!(e.wire_bytes(40), 64 + 20);
        assert_eq!(EthernetOverhead::NONE.wire_bytes(40), 40);
    }

    #[test]
    fn rate_matches_exact_serialization() {
        for bps in [
            100_000_000_000u64,
            25_000_000_000,
            3,
            7_000_000_007,
            400_000_000_000,
            50 * 8 * (1 << 30),
        ] {
            let r = Rate::new(Bandwidth(bps));
            for bytes in [0u64, 1, 64, 1500, 4182, 9000, 1 << 21] {
                assert_eq!(
                    r.serialization_time(bytes),
                    Bandwidth(bps).serialization_time(bytes),
                    "{bps} bps, {bytes} B"
                );
            }
        }
    }
}
