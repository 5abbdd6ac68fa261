//! The switch's packet memory: one shared pool with an optional cap per egress queue.
//!
//! Admission is drop-tail: a frame is refused when the pool, or its egress queue's cap, would
//! overflow. Accounting is in frame bytes (what the memory holds; preamble and gap are not
//! stored).

use serde::{Deserialize, Serialize};

/// Why a frame was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The shared pool is full.
    PoolFull,
    /// The egress queue reached its cap.
    QueueFull,
}

/// Buffer sizes (the scenario's per-switch `buffer:` section).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BufferConfig {
    /// Total shared packet memory.
    pub total: fabemu_fabric::units::ByteSize,
    /// Largest share one egress queue may hold; absent means the whole pool.
    #[serde(default)]
    pub per_queue: Option<fabemu_fabric::units::ByteSize>,
}

impl Default for BufferConfig {
    /// 32 MiB shared, the order of a current 12.8-25.6 Tb/s datacenter switch's buffer.
    fn default() -> Self {
        BufferConfig {
            total: fabemu_fabric::units::ByteSize(32 << 20),
            per_queue: None,
        }
    }
}

/// Occupancy of the pool and of each egress queue.
#[derive(Clone, Debug)]
pub struct SharedBuffer {
    total: u64,
    per_queue: u64,
    used: u64,
    queues: Vec<u64>,
    peak: u64,
}

impl SharedBuffer {
    /// A pool for `queues` egress queues.
    pub fn new(cfg: &BufferConfig, queues: usize) -> SharedBuffer {
        let total = cfg.total.bytes();
        SharedBuffer {
            total,
            per_queue: cfg.per_queue.map_or(total, |q| q.bytes().min(total)),
            used: 0,
            queues: vec![0; queues],
            peak: 0,
        }
    }

    /// Reserves `bytes` for egress queue `q`, or says why not.
    #[inline]
    pub fn admit(&mut self, q: usize, bytes: u64) -> Result<(), Refusal> {
        if self.used + bytes > self.total {
            return Err(Refusal::PoolFull);
        }
        let qb = &mut self.queues[q];
        if *qb + bytes > self.per_queue {
            return Err(Refusal::QueueFull);
        }
        *qb += bytes;
        self.used += bytes;
        self.peak = self.peak.max(self.used);
        Ok(())
    }

    /// Frees `bytes` of egress queue `q` (the frame left).
    #[inline]
    pub fn release(&mut self, q: usize, bytes: u64) {
        self.queues[q] = self.queues[q].saturating_sub(bytes);
        self.used = self.used.saturating_sub(bytes);
    }

    /// Bytes held by egress queue `q`.
    pub fn queue_bytes(&self, q: usize) -> u64 {
        self.queues[q]
    }

    /// Bytes held in all.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Highest occupancy seen.
    pub fn peak(&self) -> u64 {
        self.peak
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabemu_fabric::units::ByteSize;

    #[test]
    fn drop_tail_on_pool_and_queue_caps() {
        let mut b = SharedBuffer::new(
            &BufferConfig {
                total: ByteSize(1000),
                per_queue: Some(ByteSize(600)),
            },
            2,
        );
        assert_eq!(b.admit(0, 500), Ok(()));
        assert_eq!(b.admit(0, 200), Err(Refusal::QueueFull));
        assert_eq!(b.admit(1, 500), Ok(()));
        assert_eq!(b.admit(1, 1), Err(Refusal::PoolFull));
        b.release(0, 500);
        assert_eq!(b.used(), 500);
        assert_eq!(b.admit(1, 100), Ok(()));
        assert_eq!(b.queue_bytes(1), 600);
        assert_eq!(b.peak(), 1000);
    }
}
