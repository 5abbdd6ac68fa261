//! nccl-tests bandwidth metrics.
//!
//! nccl-tests reports, for a collective of `S` bytes that took `t` seconds:
//!
//! - **algbw** = `S / t`, in GB/s with GB = 10^9 bytes;
//! - **busbw** = `algbw * factor`, where the factor is [`Collective::bus_factor`] (All-Reduce
//!   `2(n-1)/n`; Reduce-Scatter, All-Gather, All-To-All `(n-1)/n`; Broadcast, Reduce `1`).
//!
//! `S` is the size nccl-tests prints in its `size` column: the per-rank buffer for All-Reduce,
//! All-To-All, Broadcast and Reduce, and the *whole* `n x per-rank` buffer for All-Gather
//! (the receive buffer) and Reduce-Scatter (the send buffer).
//!
//! Times are integer picoseconds, as everywhere in fabemu (`fabemu_fabric::units::Time::ps`).

use fabemu_fabric::units::PS_PER_S;

use crate::op::Collective;

/// Bytes per GB in nccl-tests reports (decimal).
pub const BYTES_PER_GB: f64 = 1e9;

/// Algorithm bandwidth in GB/s (GB = 10^9 bytes): `size_bytes / time`.
///
/// A zero size gives `0`; a positive size in zero time gives `f64::INFINITY`.
pub fn algbw_gbps(size_bytes: u64, time_ps: u64) -> f64 {
    if size_bytes == 0 {
        return 0.0;
    }
    if time_ps == 0 {
        return f64::INFINITY;
    }
    let secs = time_ps as f64 / PS_PER_S as f64;
    size_bytes as f64 / secs / BYTES_PER_GB
}

/// Bus bandwidth in GB/s: [`algbw_gbps`] times `op`'s bus factor for `n` ranks.
pub fn busbw_gbps(op: Collective, n: usize, size_bytes: u64, time_ps: u64) -> f64 {
    let algbw = algbw_gbps(size_bytes, time_ps);
    if algbw == 0.0 {
        return 0.0;
    }
    algbw * op.bus_factor(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * b.abs().max(1.0)
    }

    #[test]
    fn algbw_hand_computed() {
        // 1e9 bytes in 1 s = 1 GB/s.
        assert!(close(algbw_gbps(1_000_000_000, PS_PER_S), 1.0));
        // 1 MiB in 100 us: 1048576 B / 1e-4 s = 1.048576e10 B/s = 10.48576 GB/s.
        assert!(close(algbw_gbps(1 << 20, 100_000_000), 10.48576));
        // 8 bytes in 1 ns = 8 GB/s.
        assert!(close(algbw_gbps(8, 1_000), 8.0));
    }

    #[test]
    fn busbw_hand_computed() {
        // All-Reduce, 8 ranks: 10.48576 * 2 * 7 / 8 = 18.35008.
        assert!(close(
            busbw_gbps(Collective::AllReduce, 8, 1 << 20, 100_000_000),
            18.35008
        ));
        // All-Gather, 4 ranks, 4 GB in 2 s: algbw 2, busbw 2 * 3/4 = 1.5.
        assert!(close(
            busbw_gbps(Collective::AllGather, 4, 4_000_000_000, 2 * PS_PER_S),
            1.5
        ));
        // Broadcast: busbw == algbw; 3000 B in 1 us = 3 GB/s.
        assert!(close(
            busbw_gbps(Collective::Broadcast, 16, 3_000, 1_000_000),
            3.0
        ));
        // All-To-All, one rank: nothing crosses a link.
        assert_eq!(busbw_gbps(Collective::AllToAll, 1, 1 << 20, 1_000), 0.0);
    }

    #[test]
    fn degenerate_inputs() {
        assert_eq!(algbw_gbps(0, 0), 0.0);
        assert_eq!(algbw_gbps(0, 5), 0.0);
        assert_eq!(algbw_gbps(1, 0), f64::INFINITY);
        assert_eq!(busbw_gbps(Collective::AllReduce, 4, 0, 0), 0.0);
    }
}
