//! The switch's packet memory: its configuration (the scenario's `buffer:` section, which is
//! the whole MMU: sizes, thresholds, PFC and ECN) and why a frame is refused.
//!
//! The switch admits frames through [`crate::mmu::Mmu`] (per ingress (port, priority)
//! accounting, dynamic thresholds, headroom). Accounting is in frame bytes (what the memory
//! holds; preamble and gap are not stored).
//!
//! Every field but `total` has a default; the defaults are lossy, PFC off, no ECN marking:
//!
//! ```yaml
//! buffer:
//!   total: 32MiB            # all packet memory
//!   per_queue: 4MiB         # optional cap per egress port (lossy frames); default: none
//!   reserved: 0B            # guaranteed to each (ingress port, priority); default 0
//!   alpha: 0.125            # dynamic threshold of lossless priorities: alpha x free shared
//!   lossy_alpha: 8          # dynamic threshold of lossy priorities (SONiC's lossy default)
//!   dscp_priority: {48: 7}  # DSCP -> priority overrides; default priority = DSCP >> 3
//!   pfc:
//!     enabled: true         # default false: every priority lossy, pauses ignored
//!     priorities: [3]       # lossless priorities (default [3])
//!     quanta: 65535         # pause time in XOFF frames, 512-bit-time quanta
//!     headroom: 40KB        # per (port, lossless priority); default: formula (see pfc)
//!     xon_offset: 8348B     # XON this far below the threshold; default 2 max_frame
//!     max_frame: 4174B      # largest frame (headroom formula); default 4 KiB MTU RoCE
//!     response_time: 0ns    # neighbour's pause reaction time (headroom formula)
//!     deadlock_timeout: 10ms  # paused with frames this long = stalled
//!   ecn:                    # RED/ECN marking on every egress (port, priority); absent: off
//!     kmin: 100KB
//!     kmax: 400KB
//!     pmax: 0.2
//! ```

use fabemu_fabric::units::ByteSize;
use serde::{Deserialize, Serialize};

use crate::pfc::PfcConfig;
use crate::priority::DscpMap;
use crate::red::RedConfig;

/// Why a frame was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The shared pool is full.
    PoolFull,
    /// The egress queue reached its cap.
    QueueFull,
    /// The ingress (port, priority) is over its dynamic threshold (lossy priorities).
    ThresholdExceeded,
    /// A lossless priority over its threshold with its headroom used up.
    HeadroomFull,
}

/// The MMU's settings (the scenario's per-switch `buffer:` section; YAML in the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BufferConfig {
    /// Total shared packet memory.
    pub total: ByteSize,
    /// Largest share one egress port's queue may hold (lossy frames only: lossless ones are
    /// bounded by their ingress thresholds and headroom); absent means the whole pool.
    #[serde(default)]
    pub per_queue: Option<ByteSize>,
    /// Bytes guaranteed to each ingress (port, priority) before it draws on the shared pool.
    #[serde(default)]
    pub reserved: ByteSize,
    /// Dynamic-threshold factor of lossless priorities: an ingress (port, priority) may hold
    /// `alpha x free shared bytes` in the shared pool before XOFF. Default 1/8 (HPCC's model
    /// uses 1/8 and below on fast ports; smaller pauses earlier and leaves room for others).
    #[serde(default = "default_alpha")]
    pub alpha: f64,
    /// Dynamic-threshold factor of lossy priorities (above it they drop). Default 8, SONiC's
    /// lossy profile (`dynamic_th: 3`): one ingress may fill 8/9 of a free buffer.
    #[serde(default = "default_lossy_alpha")]
    pub lossy_alpha: f64,
    /// DSCP → priority overrides of the class selector (priority = DSCP >> 3).
    #[serde(default)]
    pub dscp_priority: DscpMap,
    /// Priority flow control.
    #[serde(default)]
    pub pfc: PfcConfig,
    /// ECN marking by RED on the egress queues; absent: no marking.
    #[serde(default)]
    pub ecn: Option<RedConfig>,
}

fn default_alpha() -> f64 {
    0.125
}

fn default_lossy_alpha() -> f64 {
    8.0
}

impl Default for BufferConfig {
    /// 32 MiB shared, the order of a current 12.8-25.6 Tb/s datacenter switch's buffer; lossy,
    /// PFC off, no ECN marking.
    fn default() -> Self {
        BufferConfig {
            total: ByteSize(32 << 20),
            per_queue: None,
            reserved: ByteSize(0),
            alpha: default_alpha(),
            lossy_alpha: default_lossy_alpha(),
            dscp_priority: DscpMap::default(),
            pfc: PfcConfig::default(),
            ecn: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_yaml_still_parses_and_new_fields_default() {
        let c: BufferConfig = serde_yaml::from_str("{total: 8KiB, per_queue: 4KiB}").unwrap();
        assert_eq!(c.total, ByteSize(8192));
        assert_eq!(c.per_queue, Some(ByteSize(4096)));
        assert!(!c.pfc.enabled && c.ecn.is_none() && c.alpha == 0.125);
        let c: BufferConfig = serde_yaml::from_str(
            "{total: 1MiB, reserved: 2KiB, alpha: 1, dscp_priority: {48: 7},
              pfc: {enabled: true, priorities: [3, 4], quanta: 1000, deadlock_timeout: 2ms},
              ecn: {kmin: 5KB, kmax: 200KB, pmax: 0.01}}",
        )
        .unwrap();
        assert!(c.pfc.enabled && c.pfc.priorities.contains(4) && c.pfc.quanta == 1000);
        assert_eq!(c.dscp_priority.priority(48), 7);
        assert_eq!(c.ecn.map(|e| e.kmax), Some(ByteSize(200_000)));
        assert!(serde_yaml::from_str::<BufferConfig>("{total: 1MiB, pfcc: {}}").is_err());
        assert!(serde_yaml::from_str::<BufferConfig>("{total: 1MiB, pfc: {on: true}}").is_err());
    }
}
