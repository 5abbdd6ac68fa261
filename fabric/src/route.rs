//! Forwarding tables shared by switches and multi-port hosts: destination IPv4 address → the
//! set of equal-cost egress ports, with ECMP selection by a hash of the flow's 5-tuple.
//!
//! The hash mixes the scenario seed in, so one flow always takes one path (no reordering)
//! while many flows spread, and a different seed gives a different (but reproducible) spread.

use std::net::Ipv4Addr;

use rustc_hash::FxHashMap;

use crate::mix::mix;

/// Destination address → equal-cost egress ports.
///
/// Looked up once per frame per switch, so it is laid out for the cache: each distinct port
/// list is stored once (a fat-tree edge switch has a handful: one per local host and one set of
/// uplinks for all others), and destinations whose addresses lie in one dense window (hosts
/// numbered consecutively, as every generated fabric but the coordinate-addressed ones does) map
/// through a plain array, 2 bytes per destination; other addresses fall back to a hash map. On
/// a 1024-host fat-tree this took the table lookup from ~26% of the run (three cache misses in
/// a 1024-entry hash map per switch) to almost nothing; 2-byte slots (2 KiB per switch, not 4)
/// and lists stored with their length in front (no separate span table) keep the 320 switches'
/// tables within the L2 cache and a lookup to two cache lines.
///
/// `repr(C)` with the fields a lookup of a hierarchical table reads (`base`, `affine`) last:
/// a switch places what every frame reads right after its table.
#[derive(Clone, Debug, Default)]
#[repr(C)]
pub struct RouteTable {
    /// Per address from `base`: 1 + the list's offset in `pool`, 0 for no route (or a list
    /// whose offset does not fit: that address is in `sparse`).
    dense: Vec<u16>,
    /// The dense window as runs of equal slots, `(first index, slot)` in index order, after
    /// [`RouteTable::compact`] found few (empty otherwise; any insert empties it again).
    runs: Vec<(u32, u16)>,
    /// Addresses outside the dense window: the list's offset in `pool`.
    sparse: FxHashMap<u32, u32>,
    /// Each distinct port list as its length followed by its ports.
    pool: Vec<u16>,
    /// Distinct port lists → their offset in `pool` (used while building).
    lists: FxHashMap<Vec<u16>, u32>,
    len: usize,
    /// Address of `dense[0]`.
    base: u32,
    /// The table as address arithmetic, when [`RouteTable::compact`] found it has that shape
    /// (see [`Affine`]); `None` otherwise (any insert clears it).
    affine: Option<Affine>,
}

/// A table of hierarchical shape, answered from the address alone: the dense window's
/// indices `lo..hi` go down, one port each, `first + (index - lo) >> shift` (a block of
/// `1 << shift` consecutive hosts behind each port: one host per port on a leaf, a leaf's or a
/// pod's hosts on the tiers above); every other index of the window takes the one list
/// `other` (the uplinks, or no route), and addresses outside the window have none.
///
/// Why: a lookup through the runs reads the runs (one or two cache lines per switch) and the
/// port list (another); on a 1024-host fat-tree those lines of 320 switches miss ~1.7 times
/// per switch hop, because every hop brings in ~1.6 KiB of other state. These few fields sit
/// beside the table's other fields in the switch, which the hop reads anyway.
#[derive(Clone, Copy, Debug)]
struct Affine {
    /// First index of the down window.
    lo: u32,
    /// Indices in the down window (`hi - lo`).
    span: u32,
    /// Slots in the dense window; indices at or past it have no route.
    len: u32,
    /// The port of index `lo`.
    first: u16,
    /// log2 of the hosts behind each down port.
    shift: u8,
    /// Every other index: ports `other_first .. other_first + other_n` (0 ports: no route),
    /// or, when `other_pool` is set, the list at that offset in `pool` (not consecutive).
    other_first: u16,
    other_n: u16,
    other_pool: Option<u32>,
}

/// The dense window may grow to this many slots per destination it holds (plus a minimum),
/// so scattered addresses cannot make it large.
const DENSE_SLACK: usize = 4;
const DENSE_MIN: usize = 256;
/// At most this many runs replace the dense slots ([`RouteTable::compact`]): 512 bytes, a
/// binary search over them reads at most a few cache lines that every lookup shares.
const MAX_RUNS: usize = 64;

impl RouteTable {
    /// An empty table.
    pub fn new() -> RouteTable {
        RouteTable::default()
    }

    /// Sets the egress ports toward `dst` (replacing any earlier entry).
    pub fn insert(&mut self, dst: Ipv4Addr, ports: &[usize]) {
        let list: Vec<u16> = ports.iter().map(|&p| p as u16).collect();
        let pool = &mut self.pool;
        let off = *self.lists.entry(list).or_insert_with_key(|l| {
            let start = pool.len() as u32;
            pool.push(l.len() as u16);
            pool.extend_from_slice(l);
            start
        });
        self.runs.clear();
        self.affine = None;
        let ip = u32::from(dst);
        if self.dense.is_empty() && self.sparse.is_empty() {
            self.base = ip;
        }
        let limit = DENSE_MIN.max(DENSE_SLACK * (self.len + 1));
        let fits = ip >= self.base && ((ip - self.base) as usize) < limit;
        let slot = u16::try_from(off + 1).ok().filter(|_| fits);
        if let Some(v) = slot {
            let i = (ip - self.base) as usize;
            if i >= self.dense.len() {
                self.dense.resize(i + 1, 0);
            }
            let was_new = self.dense[i] == 0 && self.sparse.remove(&ip).is_none();
            self.dense[i] = v;
            self.len += usize::from(was_new);
        } else {
            // In the window but past what a slot can name: clear the slot, keep it here.
            let i = ip.wrapping_sub(self.base) as usize;
            let had_slot = fits
                && self
                    .dense
                    .get_mut(i)
                    .is_some_and(|d| std::mem::replace(d, 0) != 0);
            if self.sparse.insert(ip, off).is_none() && !had_slot {
                self.len += 1;
            }
        }
    }

    /// Prepares the table for lookups once it is built: when its dense window is a few runs
    /// of addresses with the same ports (hierarchical fabrics: a fat-tree switch has one run
    /// per local host or pod and one or two for "up"), lookups binary-search those runs
    /// instead of reading a slot per destination. A 1024-host fat-tree's 320 switches then
    /// share ~40 KiB of runs that stay cached instead of 640 KiB of slots that miss (the
    /// slot load was 43% of `Switch::handle`). When the runs are one block of single down
    /// ports counting up and one list for the rest (`Affine`), [`RouteTable::select`]
    /// answers from the address alone, reading nothing but the table's own fields. Answers
    /// are the same either way.
    pub fn compact(&mut self) {
        let mut runs: Vec<(u32, u16)> = Vec::new();
        for (i, &v) in self.dense.iter().enumerate() {
            if runs.last().is_none_or(|&(_, last)| last != v) {
                if runs.len() == MAX_RUNS {
                    return;
                }
                runs.push((i as u32, v));
            }
        }
        self.affine = self.find_affine(&runs);
        self.runs = runs;
    }

    /// The port list of a dense slot (`0`: none).
    fn slot_list(&self, v: u16) -> &[u16] {
        if v == 0 {
            return &[];
        }
        let off = usize::from(v - 1);
        match self.pool.get(off) {
            Some(&n) => self
                .pool
                .get(off + 1..off + 1 + usize::from(n))
                .unwrap_or(&[]),
            None => &[],
        }
    }

    /// Whether the runs (`(first index, slot)`, covering the dense window) have the shape of
    /// [`Affine`]: one contiguous stretch of single-port runs of equal length `1 << shift`
    /// (the last may be shorter only if it ends the window) whose ports count up by one, and
    /// one slot everywhere else. Only without sparse addresses, which it would not answer.
    fn find_affine(&self, runs: &[(u32, u16)]) -> Option<Affine> {
        if !self.sparse.is_empty() || runs.is_empty() {
            return None;
        }
        let len = u32::try_from(self.dense.len()).ok()?;
        let end = |k: usize| runs.get(k + 1).map_or(len, |r| r.0);
        let single = |v: u16| match self.slot_list(v) {
            [p] => Some(*p),
            _ => None,
        };
        // The down stretch: the longest sequence of runs with single ports counting up.
        // Try each starting run (few: at most 64).
        for a in 0..runs.len() {
            let Some(first) = single(runs[a].1) else {
                continue;
            };
            let width = end(a) - runs[a].0;
            if !width.is_power_of_two() {
                continue;
            }
            let mut b = a + 1;
            while b < runs.len()
                && single(runs[b].1).is_some_and(|p| first.checked_add((b - a) as u16) == Some(p))
                && (end(b) - runs[b].0 == width || (end(b) == len && end(b) - runs[b].0 < width))
            {
                b += 1;
            }
            // Everything outside runs a..b must be one slot.
            let mut outside = runs[..a].iter().chain(&runs[b..]).map(|r| r.1);
            let other = outside.next().unwrap_or(0);
            if outside.any(|v| v != other) {
                continue;
            }
            let list = self.slot_list(other);
            let consecutive = list
                .iter()
                .enumerate()
                .all(|(k, &p)| list.first().and_then(|f| f.checked_add(k as u16)) == Some(p));
            let lo = runs[a].0;
            return Some(Affine {
                lo,
                span: end(b - 1) - lo,
                len,
                first,
                shift: width.trailing_zeros() as u8,
                other_first: list.first().copied().unwrap_or(0),
                other_n: list.len() as u16,
                other_pool: (!consecutive).then(|| u32::from(other - 1)),
            });
        }
        None
    }

    /// The dense slot of window index `i` (0: none).
    #[inline]
    fn slot(&self, i: usize) -> u16 {
        if self.runs.is_empty() {
            return self.dense.get(i).copied().unwrap_or(0);
        }
        if i >= self.dense.len() {
            return 0;
        }
        // The last run starting at or before `i` (the first run starts at 0).
        let k = self.runs.partition_point(|r| r.0 as usize <= i);
        self.runs.get(k.wrapping_sub(1)).map_or(0, |r| r.1)
    }

    /// All egress ports toward `dst` (empty when there is no route).
    #[inline]
    pub fn ports(&self, dst: Ipv4Addr) -> &[u16] {
        let ip = u32::from(dst);
        let off = match self.slot(ip.wrapping_sub(self.base) as usize) {
            v if v != 0 => usize::from(v - 1),
            _ if self.sparse.is_empty() => return &[],
            _ => match self.sparse.get(&ip) {
                Some(&off) => off as usize,
                None => return &[],
            },
        };
        match self.pool.get(off) {
            Some(&n) => self
                .pool
                .get(off + 1..off + 1 + usize::from(n))
                .unwrap_or(&[]),
            None => &[],
        }
    }

    /// The egress port for a flow toward `dst` whose 5-tuple hashes to `flow_hash`.
    #[inline]
    pub fn select(&self, dst: Ipv4Addr, flow_hash: u64) -> Option<usize> {
        self.select_by(dst, || flow_hash)
    }

    /// [`RouteTable::select`] with the flow's hash computed only when `dst` has more than one
    /// next hop: a switch's down ports (one per destination) need none, and the hash (two
    /// rounds of [`mix`]) would be half of a switch's route look-up.
    #[inline]
    pub fn select_by(&self, dst: Ipv4Addr, flow_hash: impl FnOnce() -> u64) -> Option<usize> {
        if let Some(a) = &self.affine {
            let i = u32::from(dst).wrapping_sub(self.base);
            if i >= a.len {
                return None;
            }
            let d = i.wrapping_sub(a.lo);
            if d < a.span {
                return Some(usize::from(a.first) + (d >> a.shift) as usize);
            }
            if let Some(off) = a.other_pool {
                let ports = self.slot_list(off as u16 + 1);
                return ecmp_choice(ports.len(), flow_hash).map(|i| usize::from(ports[i]));
            }
            return ecmp_choice(usize::from(a.other_n), flow_hash)
                .map(|i| usize::from(a.other_first) + i);
        }
        let ports = self.ports(dst);
        ecmp_choice(ports.len(), flow_hash).map(|i| usize::from(ports[i]))
    }

    /// Number of destinations.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the table has no destination.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Which of `n` equal-cost next hops a flow takes (`None` for none), its 5-tuple's hash
/// computed only when there is a choice: the rule of every forwarding node ([`RouteTable::select_by`])
/// and of the flow-level fidelity, which must put a message on the path its packets would take.
#[inline]
pub fn ecmp_choice(n: usize, flow_hash: impl FnOnce() -> u64) -> Option<usize> {
    match n {
        0 => None,
        1 => Some(0),
        n => Some(ecmp_index(n, flow_hash())),
    }
}

/// Which of `n` (> 0) equal-cost next hops a flow whose 5-tuple hashes to `flow_hash` takes:
/// the one rule every forwarding node (and the flow-level fidelity, which must put a message on
/// the path its packets would take) applies to its list of ports toward a destination.
#[inline]
pub fn ecmp_index(n: usize, flow_hash: u64) -> usize {
    // Multiply-shift maps the hash onto 0..n without a division (Lemire's fastrange).
    ((flow_hash as u128 * n as u128) >> 64) as usize
}

/// The UDP source port of host `src`'s queue pair toward host `peer` (RoCEv2 puts per-QP
/// entropy there for ECMP): from the two addresses, the peer's index and the run's seed.
#[inline]
pub fn qp_udp_src_port(src: Ipv4Addr, dst: Ipv4Addr, peer: u32, seed: u64) -> u16 {
    0xC000 | (flow_hash(src, dst, peer as u16, seed) as u16 & 0x3FFF)
}

/// The ECMP salt of switch `node` (its actor id) in a run seeded with `seed`, so switches of
/// one fabric spread the same flows differently (no hash polarization).
#[inline]
pub fn switch_salt(seed: u64, node: usize) -> u64 {
    mix(seed ^ (node as u64) << 32)
}

/// A well-mixed 64-bit hash of a RoCEv2 flow's 5-tuple (protocol UDP and destination port
/// 4791 are the same for every flow, so they add nothing) and a seed.
#[inline]
pub fn flow_hash(src: Ipv4Addr, dst: Ipv4Addr, udp_src_port: u16, seed: u64) -> u64 {
    let x = (u32::from(src) as u64) << 32 | u32::from(dst) as u64;
    mix(mix(x ^ seed) ^ udp_src_port as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selects_among_equal_cost_ports() {
        let mut t = RouteTable::new();
        let d = Ipv4Addr::new(10, 0, 0, 2);
        t.insert(d, &[3, 5, 7]);
        assert_eq!(t.ports(d), &[3, 5, 7]);
        assert_eq!(t.select(Ipv4Addr::new(10, 0, 0, 9), 1), None);
        let mut hits = [0u32; 8];
        for sport in 0..3000u16 {
            let h = flow_hash(Ipv4Addr::new(10, 0, 0, 1), d, sport, 42);
            hits[t.select(d, h).unwrap()] += 1;
        }
        // 3000 flows over 3 ports: each gets 1000 ± 10% (binomial sd ≈ 26).
        for p in [3, 5, 7] {
            assert!((900..=1100).contains(&hits[p]), "{hits:?}");
        }
    }

    proptest::proptest! {
        /// Whatever the addresses (consecutive, scattered, below the first, replaced), the table
        /// answers exactly as a plain map from address to port list would.
        #[test]
        fn answers_like_a_plain_map(
            ops in proptest::collection::vec((0u32..3, 0u32..5000, 0usize..4), 1..300),
        ) {
            let mut t = RouteTable::new();
            let mut want: std::collections::HashMap<u32, Vec<u16>> = Default::default();
            for (spread, a, n) in ops {
                // Mostly a dense block of addresses, some far away or below it.
                let ip = match spread {
                    0 => 0x0A00_0100 + a % 600,
                    1 => 0x0A00_0000 + a * 977,
                    _ => 0x0A00_0100 - a % 200,
                };
                let ports: Vec<usize> = (0..n).map(|k| (a as usize + k) % 7).collect();
                t.insert(Ipv4Addr::from(ip), &ports);
                want.insert(ip, ports.iter().map(|&p| p as u16).collect());
                proptest::prop_assert_eq!(t.len(), want.len());
            }
            // Every address held, and a comb of others (mostly without a route); the same
            // answers once compacted (as runs when there are few).
            let mut compact = t.clone();
            compact.compact();
            let comb = (0u32..60_000).map(|k| 0x0A00_0000 + k * 83);
            for probe in want.keys().copied().chain(comb) {
                let exp = want.get(&probe).map_or(&[][..], |v| &v[..]);
                let got = t.ports(Ipv4Addr::from(probe));
                proptest::prop_assert_eq!(got, exp, "address {:#x}", probe);
                let got = compact.ports(Ipv4Addr::from(probe));
                proptest::prop_assert_eq!(got, exp, "compacted, address {:#x}", probe);
            }
        }
    }

    /// What a plain map answers for a flow: the list's port at the ECMP index.
    fn select_in(
        want: &std::collections::HashMap<u32, Vec<u16>>,
        ip: u32,
        h: u64,
    ) -> Option<usize> {
        want.get(&ip)
            .filter(|l| !l.is_empty())
            .map(|l| usize::from(l[ecmp_index(l.len(), h)]))
    }

    proptest::proptest! {
        /// Tables of a hierarchical fabric's shape (a block of hosts per down port, one list
        /// for the rest), sometimes with one entry changed so the shape breaks: once
        /// compacted, `select` answers exactly as a plain map would (from address arithmetic
        /// when the shape holds, which it must find when nothing was changed and the down
        /// ports' blocks are whole).
        #[test]
        fn hierarchical_tables_select_like_a_plain_map(
            hosts in 1u32..300,
            lo in 0u32..300,
            shift in 0u32..4,
            down_ports in 0u32..20,
            first in 0usize..40,
            other in 0usize..4,
            tweak in proptest::option::of((0u32..600, 0usize..50)),
        ) {
            let base = 0x0A00_0000u32;
            let lo = lo.min(hosts - 1);
            let span = (down_ports << shift).min(hosts - lo);
            let other: Vec<usize> = match other {
                0 => vec![],
                1 => vec![first + 50],
                2 => (first + 50..first + 58).collect(),
                _ => vec![first + 57, first + 50, first + 53],
            };
            let mut t = RouteTable::new();
            let mut want: std::collections::HashMap<u32, Vec<u16>> = Default::default();
            for i in 0..hosts {
                let ports = if (lo..lo + span).contains(&i) {
                    vec![first + ((i - lo) >> shift) as usize]
                } else {
                    other.clone()
                };
                t.insert(Ipv4Addr::from(base + i), &ports);
                want.insert(base + i, ports.iter().map(|&p| p as u16).collect());
            }
            if let Some((i, p)) = tweak {
                t.insert(Ipv4Addr::from(base + i), &[p]);
                want.insert(base + i, vec![p as u16]);
            }
            let mut c = t.clone();
            c.compact();
            // Found whenever nothing was changed and the last block is whole.
            if tweak.is_none() && span > 0 && span == down_ports << shift {
                proptest::prop_assert!(c.affine.is_some(), "{:?}", c.runs);
            }
            for ip in base.wrapping_sub(3)..base + 700 {
                for h in [0, 1 << 61, u64::MAX / 3, u64::MAX] {
                    let exp = select_in(&want, ip, h);
                    proptest::prop_assert_eq!(t.select(Ipv4Addr::from(ip), h), exp);
                    proptest::prop_assert_eq!(c.select(Ipv4Addr::from(ip), h), exp, "{:#x}", ip);
                    proptest::prop_assert_eq!(c.select_by(Ipv4Addr::from(ip), || h), exp);
                }
            }
        }
    }

    #[test]
    fn lists_past_a_slot_s_reach_fall_back_to_the_map() {
        // 30 000 distinct 3-port lists fill the pool past what a 2-byte slot can name; the
        // later ones are answered through the hash map, and replacing an early address by a
        // late list moves it there without counting it twice.
        let mut t = RouteTable::new();
        let ip = |k: u32| Ipv4Addr::from(0x0A00_0000 + k);
        let list = |k: u32| [k as usize % 60_000, 60_000 + (k as usize / 7), 3];
        for k in 0..30_000 {
            t.insert(ip(k), &list(k));
        }
        t.insert(ip(1), &list(29_999));
        assert_eq!(t.len(), 30_000);
        for k in [0, 2, 16_000, 29_999] {
            let want: Vec<u16> = list(k).iter().map(|&p| p as u16).collect();
            assert_eq!(t.ports(ip(k)), &want[..], "{k}");
        }
        let want: Vec<u16> = list(29_999).iter().map(|&p| p as u16).collect();
        assert_eq!(t.ports(ip(1)), &want[..]);
        assert!(t.ports(ip(40_000)).is_empty());
    }

    #[test]
    fn runs_answer_like_slots_and_inserts_undo_them() {
        // A fat-tree edge switch's shape: everything up (ports 8..16) but 8 local hosts.
        let mut t = RouteTable::new();
        let up: Vec<usize> = (8..16).collect();
        let ip = |k: u32| Ipv4Addr::from(0x0A00_0000 + k);
        for k in 0..1024 {
            if (64..72).contains(&k) {
                t.insert(ip(k), &[k as usize - 64]);
            } else {
                t.insert(ip(k), &up);
            }
        }
        t.compact();
        assert_eq!(t.runs.len(), 10);
        assert_eq!(t.ports(ip(0)), t.ports(ip(1023)));
        assert_eq!(t.ports(ip(0)).len(), 8);
        for k in 64..72 {
            assert_eq!(t.ports(ip(k)), &[k as u16 - 64]);
        }
        assert!(t.ports(ip(1024)).is_empty());
        assert!(t.ports(Ipv4Addr::from(0x09FF_FFFFu32)).is_empty());
        // A later insert (a route changed at run time) drops the runs; answers stay right.
        t.insert(ip(5), &[3]);
        assert!(t.runs.is_empty());
        assert_eq!(t.ports(ip(5)), &[3]);
        assert_eq!(t.ports(ip(6)).len(), 8);
    }

    #[test]
    fn one_flow_one_path() {
        let a = Ipv4Addr::new(10, 0, 0, 1);
        let b = Ipv4Addr::new(10, 0, 1, 1);
        assert_eq!(flow_hash(a, b, 49152, 7), flow_hash(a, b, 49152, 7));
        assert_ne!(flow_hash(a, b, 49152, 7), flow_hash(a, b, 49152, 8));
    }
}
