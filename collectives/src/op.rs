//! The collective operations and their nccl-tests semantics.
//!
//! nccl-tests reports a *bus bandwidth* next to the algorithm bandwidth: algbw multiplied by a
//! per-collective factor that turns it into the bandwidth each rank's link actually carried with
//! an optimal algorithm, so that numbers are comparable across collectives and rank counts (see
//! [`crate::metrics`]). The factors are:
//!
//! | collective | factor |
//! |---|---|
//! | All-Reduce | 2(n-1)/n |
//! | Reduce-Scatter, All-Gather, All-To-All | (n-1)/n |
//! | Broadcast, Reduce | 1 |

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A collective operation over `n` ranks.
///
/// Serialized in snake_case (`all_reduce`, `reduce_scatter`, `all_gather`, `all_to_all`,
/// `broadcast`, `reduce`); `alltoall` is accepted as an alias of `all_to_all`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Collective {
    /// Every rank ends with the elementwise reduction of all ranks' buffers.
    AllReduce,
    /// Rank `r` ends with the reduction of chunk `r` of all ranks' buffers.
    ReduceScatter,
    /// Every rank ends with the concatenation of all ranks' chunks.
    AllGather,
    /// Rank `i`'s block `j` ends as rank `j`'s block `i`.
    #[serde(alias = "alltoall")]
    AllToAll,
    /// The root's buffer is copied to every rank.
    Broadcast,
    /// The root ends with the elementwise reduction of all ranks' buffers.
    Reduce,
}

impl Collective {
    /// Every collective, in declaration order.
    pub const ALL: [Collective; 6] = [
        Collective::AllReduce,
        Collective::ReduceScatter,
        Collective::AllGather,
        Collective::AllToAll,
        Collective::Broadcast,
        Collective::Reduce,
    ];

    /// Whether the operation reduces (All-Reduce, Reduce-Scatter, Reduce); nccl-tests prints
    /// `none` as the operator of the others.
    pub const fn reduces(self) -> bool {
        matches!(
            self,
            Collective::AllReduce | Collective::ReduceScatter | Collective::Reduce
        )
    }

    /// The nccl-tests bus-bandwidth factor for `n` ranks: `busbw = algbw * bus_factor(n)`.
    ///
    /// All-Reduce `2(n-1)/n`; Reduce-Scatter, All-Gather and All-To-All `(n-1)/n`; Broadcast
    /// and Reduce `1`. With one rank nothing crosses a link, so the first four give `0`; `n == 0`
    /// is meaningless and gives `0` for every collective.
    pub fn bus_factor(self, n: usize) -> f64 {
        if n == 0 {
            return 0.0;
        }
        let nf = n as f64;
        let spread = (nf - 1.0) / nf;
        match self {
            Collective::AllReduce => 2.0 * spread,
            Collective::ReduceScatter | Collective::AllGather | Collective::AllToAll => spread,
            Collective::Broadcast | Collective::Reduce => 1.0,
        }
    }

    /// The name nccl-tests gives the collective (its `testColl` name, printed in reports):
    /// `AllReduce`, `ReduceScatter`, `AllGather`, `AlltoAll`, `Broadcast`, `Reduce`.
    pub const fn name(self) -> &'static str {
        match self {
            Collective::AllReduce => "AllReduce",
            Collective::ReduceScatter => "ReduceScatter",
            Collective::AllGather => "AllGather",
            Collective::AllToAll => "AlltoAll",
            Collective::Broadcast => "Broadcast",
            Collective::Reduce => "Reduce",
        }
    }

    /// The nccl-tests binary that measures the collective, e.g. `all_reduce_perf`,
    /// `alltoall_perf`.
    pub const fn perf_binary(self) -> &'static str {
        match self {
            Collective::AllReduce => "all_reduce_perf",
            Collective::ReduceScatter => "reduce_scatter_perf",
            Collective::AllGather => "all_gather_perf",
            Collective::AllToAll => "alltoall_perf",
            Collective::Broadcast => "broadcast_perf",
            Collective::Reduce => "reduce_perf",
        }
    }

    /// The serialized (snake_case) key, as written in scenarios: `all_reduce`, `all_to_all`, ...
    pub const fn key(self) -> &'static str {
        match self {
            Collective::AllReduce => "all_reduce",
            Collective::ReduceScatter => "reduce_scatter",
            Collective::AllGather => "all_gather",
            Collective::AllToAll => "all_to_all",
            Collective::Broadcast => "broadcast",
            Collective::Reduce => "reduce",
        }
    }
}

impl fmt::Display for Collective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A string that names no collective.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown collective `{0}` (expected one of all_reduce, reduce_scatter, all_gather, all_to_all, broadcast, reduce)")]
pub struct UnknownCollective(pub String);

impl FromStr for Collective {
    type Err = UnknownCollective;

    /// Accepts the serialized key (`all_reduce`), the alias `alltoall`, or the nccl-tests name
    /// (`AllReduce`, `AlltoAll`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Collective::ALL
            .into_iter()
            .find(|c| c.key() == s || c.name() == s)
            .or((s == "alltoall").then_some(Collective::AllToAll))
            .ok_or_else(|| UnknownCollective(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn bus_factors_follow_nccl_tests() {
        assert!(close(Collective::AllReduce.bus_factor(8), 1.75));
        assert!(close(Collective::AllReduce.bus_factor(2), 1.0));
        assert!(close(Collective::ReduceScatter.bus_factor(4), 0.75));
        assert!(close(Collective::AllGather.bus_factor(4), 0.75));
        assert!(close(Collective::AllToAll.bus_factor(5), 0.8));
        assert!(close(Collective::Broadcast.bus_factor(16), 1.0));
        assert!(close(Collective::Reduce.bus_factor(3), 1.0));
    }

    #[test]
    fn bus_factor_edge_cases() {
        for c in Collective::ALL {
            assert_eq!(c.bus_factor(0), 0.0);
        }
        assert_eq!(Collective::AllReduce.bus_factor(1), 0.0);
        assert_eq!(Collective::AllToAll.bus_factor(1), 0.0);
        assert_eq!(Collective::Broadcast.bus_factor(1), 1.0);
    }

    #[test]
    fn names_match_nccl_tests() {
        let names: Vec<_> = Collective::ALL.iter().map(|c| c.name()).collect();
        assert_eq!(
            names,
            [
                "AllReduce",
                "ReduceScatter",
                "AllGather",
                "AlltoAll",
                "Broadcast",
                "Reduce"
            ]
        );
        assert_eq!(Collective::AllToAll.perf_binary(), "alltoall_perf");
        assert_eq!(Collective::AllReduce.to_string(), "AllReduce");
    }

    #[test]
    fn parses_keys_names_and_alias() {
        for c in Collective::ALL {
            assert_eq!(c.key().parse::<Collective>(), Ok(c));
            assert_eq!(c.name().parse::<Collective>(), Ok(c));
        }
        assert_eq!("alltoall".parse(), Ok(Collective::AllToAll));
        assert!("allreduce".parse::<Collective>().is_err());
    }

    #[test]
    fn serde_is_snake_case() {
        for c in Collective::ALL {
            let json = serde_json::to_string(&c).unwrap();
            assert_eq!(json, format!("\"{}\"", c.key()));
            assert_eq!(serde_json::from_str::<Collective>(&json).unwrap(), c);
        }
        let alias: Collective = serde_json::from_str("\"alltoall\"").unwrap();
        assert_eq!(alias, Collective::AllToAll);
    }
}
