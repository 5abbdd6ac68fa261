//! Checks of a parsed scenario that do not need the fabric graph: ranges, mutually exclusive
//! sections, sizes. References between nodes are checked when the world is built.

use super::{FieldPath, Routing, ScenarioError, Source};
use fabemu_fabric::units::Time;

/// Largest message an RDMA WRITE can carry: RETH's DMA length is 32 bits.
pub(crate) const MAX_MESSAGE: u64 = u32::MAX as u64;

/// Most hosts a fabric may have (QP numbers and addresses have room for more; this keeps the
/// per-node routing tables and the all-to-all workload within a laptop's memory).
pub(crate) const MAX_HOSTS: u64 = 65_536;
/// Most links a fabric may have.
pub(crate) const MAX_LINKS: u64 = 1 << 22;
/// Most (node, destination host) routing entries: 4 bytes each.
pub(crate) const MAX_ROUTE_ENTRIES: u64 = 1 << 28;
/// Most payload bytes a data-mode workload may carry: each message's bytes are held by the
/// sender and again by the receiver.
pub(crate) const MAX_DATA_MODE_BYTES: u64 = 4 << 30;
/// Most messages a workload may have.
pub(crate) const MAX_MESSAGES: u64 = 1 << 24;

/// (hosts, switches, links) the fabric will have, computed without building it; `None` when
/// the product overflows.
fn fabric_size(s: &super::Scenario) -> Option<(u64, u64, u64)> {
    match &s.topology {
        Some(t) => {
            if let Some(u) = &t.star {
                let h = u.hosts as u64;
                Some((h, 1, h))
            } else if let Some(u) = &t.ring {
                let h = u.hosts as u64;
                Some((h, 0, h))
            } else if let Some(l) = &t.leaf_spine {
                let h = (l.leaves as u64).checked_mul(l.hosts_per_leaf as u64)?;
                let fabric = (l.leaves as u64).checked_mul(l.spines as u64)?;
                Some((
                    h,
                    (l.leaves as u64).checked_add(l.spines as u64)?,
                    h.checked_add(fabric)?,
                ))
            } else {
                Some((0, 0, 0))
            }
        }
        None => Some((
            s.hosts.len() as u64,
            s.switches.len() as u64,
            s.links.len() as u64,
        )),
    }
}

pub(super) fn check(src: &Source) -> Result<(), ScenarioError> {
    let s = &src.scenario;
    let root = FieldPath::root();
    let err = |p: FieldPath, m: String| Err(src.error_at(&p, m));

    if s.until == Time::ZERO {
        return err(root.key("until"), "must be greater than zero".into());
    }
    let mtu = s.nic.mtu.bytes();
    if !(64..=8192).contains(&mtu) {
        return err(
            root.key("nic").key("mtu"),
            format!("{mtu} bytes is outside 64B..8KiB (RoCE uses 256B, 512B, 1KiB, 2KiB or 4KiB)"),
        );
    }
    if s.nic.ack_every == 0 {
        return err(
            root.key("nic").key("ack_every"),
            "must be at least 1".into(),
        );
    }
    if s.nic.rto == Time::ZERO {
        return err(
            root.key("nic").key("rto"),
            "must be greater than zero".into(),
        );
    }
    for (f, v) in [("dscp", s.nic.dscp), ("control_dscp", s.nic.control_dscp)] {
        if v > 63 {
            return err(
                root.key("nic").key(f),
                format!("{v} is not a 6-bit DSCP (0..63)"),
            );
        }
    }
    if let Some(r) = s.nic.qp_rate {
        if r.bps() == 0 {
            return err(
                root.key("nic").key("qp_rate"),
                "must be greater than zero".into(),
            );
        }
    }
    // One frame must fit any buffer, or nothing could ever be forwarded.
    let frame = mtu + 100;
    let check_buffer = |p: FieldPath, b: &fabemu_switch::buffer::BufferConfig| {
        if b.total.bytes() < frame {
            return Err(src.error_at(
                &p.key("total"),
                format!("{} cannot hold one {}-byte frame", b.total, frame),
            ));
        }
        if let Some(q) = b.per_queue {
            if q.bytes() < frame {
                return Err(src.error_at(
                    &p.key("per_queue"),
                    format!("{q} cannot hold one {frame}-byte frame"),
                ));
            }
        }
        Ok(())
    };
    check_buffer(root.key("switch_buffer"), &s.switch_buffer)?;
    for (i, sw) in s.switches.iter().enumerate() {
        if let Some(b) = &sw.buffer {
            check_buffer(root.key("switches").index(i).key("buffer"), b)?;
        }
    }

    if let Some(t) = &s.topology {
        let tp = root.key("topology");
        let given = [t.star.is_some(), t.ring.is_some(), t.leaf_spine.is_some()]
            .iter()
            .filter(|x| **x)
            .count();
        if given != 1 {
            return err(
                tp,
                format!("give exactly one of `star`, `ring`, `leaf_spine` (found {given})"),
            );
        }
        for (f, given) in [
            ("hosts", !s.hosts.is_empty()),
            ("switches", !s.switches.is_empty()),
            ("links", !s.links.is_empty()),
        ] {
            if given {
                return err(
                    root.key(f),
                    format!("`{f}` cannot be combined with `topology`; use one or the other"),
                );
            }
        }
        let uniform = |p: FieldPath, u: &super::UniformSpec, min: usize| {
            if u.hosts < min {
                return Err(src.error_at(
                    &p.key("hosts"),
                    format!(
                        "{} host{}; at least {min} needed",
                        u.hosts,
                        if u.hosts == 1 { "" } else { "s" }
                    ),
                ));
            }
            if u.bandwidth.bps() == 0 {
                return Err(src.error_at(&p.key("bandwidth"), "must be greater than zero"));
            }
            Ok(())
        };
        if let Some(u) = &t.star {
            uniform(tp.key("star"), u, 1)?;
        }
        if let Some(u) = &t.ring {
            uniform(tp.key("ring"), u, 2)?;
        }
        if let Some(l) = &t.leaf_spine {
            let lp = tp.key("leaf_spine");
            for (f, v) in [
                ("leaves", l.leaves),
                ("spines", l.spines),
                ("hosts_per_leaf", l.hosts_per_leaf),
            ] {
                if v == 0 {
                    return err(lp.key(f), "must be at least 1".into());
                }
            }
            for (f, v) in [
                ("host_bandwidth", l.host_bandwidth),
                ("fabric_bandwidth", l.fabric_bandwidth),
            ] {
                if v.bps() == 0 {
                    return err(lp.key(f), "must be greater than zero".into());
                }
            }
        }
    } else {
        if s.hosts.is_empty() {
            return err(
                root.key("hosts"),
                "no hosts: list `hosts` (with `switches` and `links`) or give a `topology`".into(),
            );
        }
        for (i, l) in s.links.iter().enumerate() {
            if l.bandwidth.bps() == 0 {
                return err(
                    root.key("links").index(i).key("bandwidth"),
                    "must be greater than zero".into(),
                );
            }
        }
    }

    // Sizes: refuse before building what would not fit in memory or time.
    let fabric_path = match &s.topology {
        Some(t) if t.star.is_some() => root.key("topology").key("star"),
        Some(t) if t.ring.is_some() => root.key("topology").key("ring"),
        Some(t) if t.leaf_spine.is_some() => root.key("topology").key("leaf_spine"),
        Some(_) => root.key("topology"),
        None => root.key("hosts"),
    };
    let too_big = |what: String| Err(src.error_at(&fabric_path, what));
    match fabric_size(s) {
        None => return too_big("the fabric is too large: its size overflows 64 bits".into()),
        Some((h, sw, l)) => {
            if h > MAX_HOSTS {
                return too_big(format!(
                    "the fabric is too large: {h} hosts; fabemu supports at most {MAX_HOSTS}"
                ));
            }
            if l > MAX_LINKS {
                return too_big(format!(
                    "the fabric is too large: {l} links; fabemu supports at most {MAX_LINKS}"
                ));
            }
            if h * (h + sw) > MAX_ROUTE_ENTRIES {
                return too_big(format!(
                    "{h} hosts and {sw} switches need {} routing entries; at most {MAX_ROUTE_ENTRIES}",
                    h * (h + sw)
                ));
            }
            let a2a = if s.workload.all_to_all.is_some() {
                h * h.saturating_sub(1)
            } else {
                0
            };
            let messages = s.workload.messages.len() as u64 + a2a;
            if messages > MAX_MESSAGES {
                return err(
                    root.key("workload"),
                    format!("{messages} messages; fabemu supports at most {MAX_MESSAGES}"),
                );
            }
            if s.mode == super::Mode::Data {
                let bytes = s
                    .workload
                    .messages
                    .iter()
                    .map(|m| m.size.bytes())
                    .sum::<u64>()
                    .saturating_add(
                        s.workload
                            .all_to_all
                            .as_ref()
                            .map_or(0, |a| a.size.bytes().saturating_mul(a2a)),
                    );
                if bytes > MAX_DATA_MODE_BYTES {
                    return err(
                        root.key("mode"),
                        format!(
                            "data mode holds every payload byte in memory twice; this workload has {} (limit {}); use `mode: timing`",
                            fabemu_fabric::units::ByteSize(bytes),
                            fabemu_fabric::units::ByteSize(MAX_DATA_MODE_BYTES)
                        ),
                    );
                }
            }
        }
    }

    match s.routing {
        Routing::ShortestPath if !s.routes.is_empty() => {
            return err(
                root.key("routes"),
                "routes are listed but `routing` is `shortest_path`; set `routing: explicit`"
                    .into(),
            );
        }
        Routing::Explicit if s.routes.is_empty() => {
            return err(
                root.key("routing"),
                "`routing: explicit` needs a `routes` list".into(),
            );
        }
        _ => {}
    }

    let wp = root.key("workload");
    for (i, m) in s.workload.messages.iter().enumerate() {
        if m.size.bytes() > MAX_MESSAGE {
            return err(
                wp.key("messages").index(i).key("size"),
                format!(
                    "{} exceeds the largest RDMA WRITE (4GiB - 1B); split it into several messages",
                    m.size
                ),
            );
        }
    }
    if let Some(a) = &s.workload.all_to_all {
        if a.size.bytes() > MAX_MESSAGE {
            return err(
                wp.key("all_to_all").key("size"),
                format!("{} exceeds the largest RDMA WRITE (4GiB - 1B)", a.size),
            );
        }
    }
    Ok(())
}
