//! Checks of a parsed scenario that do not need the fabric graph: ranges, mutually exclusive
//! sections, sizes. References between nodes are checked when the world is built.

use super::{DimKindYaml, Fidelity, FieldPath, Routing, ScenarioError, Source, TopologySpec};
use fabemu_fabric::units::Time;
use fabemu_topologies::DimKind;

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
pub(crate) const MAX_MESSAGES: u64 = 1 << 22;

/// (hosts, switches, links) of a multi-dimensional fabric with these dimensions.
pub(crate) fn dims_size(
    dims: impl Iterator<Item = (DimKindYaml, usize)> + Clone,
) -> Option<(u64, u64, u64)> {
    let hosts = dims
        .clone()
        .try_fold(1u64, |acc, (_, n)| acc.checked_mul(n as u64))?;
    let (mut switches, mut links) = (0u64, 0u64);
    for (kind, n) in dims {
        let n = (n as u64).max(1);
        let groups = hosts / n;
        match kind {
            // A ring of two is one link.
            DimKindYaml::Ring if n == 2 => links = links.checked_add(groups)?,
            DimKindYaml::Ring => links = links.checked_add(hosts)?,
            DimKindYaml::FullyConnected => {
                links = links.checked_add(groups.checked_mul(n * (n - 1) / 2)?)?
            }
            DimKindYaml::Switch => {
                switches = switches.checked_add(groups)?;
                links = links.checked_add(hosts)?;
            }
        }
    }
    Some((hosts, switches, links))
}

/// (hosts, switches, links) the fabric will have, computed without building it; `None` when
/// the product overflows.
fn fabric_size(src: &Source) -> Option<(u64, u64, u64)> {
    let s = &src.scenario;
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
            } else if let Some(f) = &t.fat_tree {
                let k = f.k as u64;
                let half = k / 2;
                let hosts = (f.oversubscription as u64)
                    .checked_mul(k)?
                    .checked_mul(half)?
                    .checked_mul(half)?;
                let switches = k.checked_mul(k)?.checked_add(half.checked_mul(half)?)?;
                let fabric = k.checked_mul(half)?.checked_mul(half)?.checked_mul(2)?;
                Some((hosts, switches, hosts.checked_add(fabric)?))
            } else if let Some(tor) = &t.torus {
                dims_size(tor.dims.iter().map(|&d| (DimKindYaml::Ring, d)))
            } else if let Some(m) = &t.multi_dim {
                dims_size(m.dimensions.iter().map(|d| (d.kind, d.size)))
            } else if let Some(a) = &src.astra {
                dims_size(a.network.dims.iter().map(|d| {
                    let kind = match d.kind {
                        DimKind::Ring => DimKindYaml::Ring,
                        DimKind::FullyConnected => DimKindYaml::FullyConnected,
                        DimKind::Switch => DimKindYaml::Switch,
                    };
                    (kind, d.size)
                }))
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

/// Checks what can be checked without the fabric graph, section by section in the order a
/// reader meets them; the first problem found is the error.
pub(super) fn check(src: &Source) -> Result<(), ScenarioError> {
    check_run_and_nic(src)?;
    check_buffers_and_schedulers(src)?;
    match &src.scenario.topology {
        Some(t) => check_topology(src, t)?,
        None => check_explicit_fabric(src)?,
    }
    check_sizes(src)?;
    check_routing(src)?;
    check_message_sizes(src)
}

/// The run's length and the NICs' transport settings (MTU, ACKs, Ethernet overhead, RTO,
/// DSCP, rates), and faults against the fidelity.
fn check_run_and_nic(src: &Source) -> Result<(), ScenarioError> {
    let s = &src.scenario;
    let root = FieldPath::root();
    let err = |p: FieldPath, m: String| Err(src.error_at(&p, m));
    if s.until == Some(Time::ZERO) {
        return err(root.key("until"), "must be greater than zero".into());
    }
    let mtu = s.nic.mtu.bytes();
    if !(64..=8192).contains(&mtu) {
        return err(
            root.key("nic").key("mtu"),
            format!("{mtu} bytes is outside 64B..8KiB (RoCE uses 256B, 512B, 1KiB, 2KiB or 4KiB)"),
        );
    }
    if s.nic.ack_every == 0 || s.nic.ack_every > 1 << 20 {
        return err(
            root.key("nic").key("ack_every"),
            format!("{} is outside 1..1048576", s.nic.ack_every),
        );
    }
    for (f, v) in [
        ("fcs", s.ethernet.fcs),
        ("preamble", s.ethernet.preamble),
        ("inter_frame_gap", s.ethernet.inter_frame_gap),
        ("min_frame", s.ethernet.min_frame),
    ] {
        if v > 1024 {
            return err(
                root.key("ethernet").key(f),
                format!("{v} bytes; at most 1024 (Ethernet's are 4, 8, 12 and 64)"),
            );
        }
    }
    if s.nic.rto < Time::from_us(1) {
        return err(
            root.key("nic").key("rto"),
            format!(
                "{} is below 1us; an RTO shorter than a round trip only retransmits (ConnectX's shortest is ~4us)",
                s.nic.rto
            ),
        );
    }
    if s.fidelity == Fidelity::Flow && !s.faults.is_empty() {
        return err(
            root.key("faults"),
            "faults need packet fidelity (flows have no frames to lose); use `fidelity: packet`"
                .into(),
        );
    }
    if s.nic.restart_window == 0 || u64::from(s.nic.restart_window) > 1 << 22 {
        return err(
            root.key("nic").key("restart_window"),
            format!("{} is outside 1..4194304 packets", s.nic.restart_window),
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
    Ok(())
}

/// Switch buffers, the NIC relay buffer, the NIC's congestion control and PFC, and the
/// egress scheduler trees.
fn check_buffers_and_schedulers(src: &Source) -> Result<(), ScenarioError> {
    let s = &src.scenario;
    let root = FieldPath::root();
    let err = |p: FieldPath, m: String| Err(src.error_at(&p, m));
    // One frame must fit any buffer, or nothing could ever be forwarded.
    let frame = s.nic.mtu.bytes() + 100;
    check_buffer(src, root.key("switch_buffer"), &s.switch_buffer, frame)?;
    if s.nic.relay_buffer.bytes() < frame {
        return err(
            root.key("nic").key("relay_buffer"),
            format!("{} cannot hold one {frame}-byte frame", s.nic.relay_buffer),
        );
    }
    if let Err(e) = s.nic.validate() {
        use fabemu_fabric::host::NicConfigError;
        let field = match e {
            NicConfigError::Dcqcn(ref d) => root.key("nic").key("cc").key("dcqcn").key(d.field()),
            NicConfigError::Cc(ref c) => root.key("nic").key("cc").key(c.scheme).key(c.field),
            NicConfigError::Pfc(_) => root.key("nic").key("pfc"),
        };
        return err(field, e.to_string());
    }
    // Scheduler trees: the error's path is relative to the tree; extend ours with it.
    let check_tree = |p: FieldPath, t: &fabemu_switch::pifo::config::TreeConfig| {
        t.validate().map_err(|e| {
            use fabemu_switch::pifo::config::PathSegment;
            let mut path = p.clone();
            for seg in e.segments() {
                path = match seg {
                    PathSegment::Key(k) => path.key(&k),
                    PathSegment::Index(i) => path.index(i),
                };
            }
            src.error_at(&path, e.message.clone())
        })
    };
    if let Some(t) = &s.switch_scheduler {
        check_tree(root.key("switch_scheduler"), t)?;
    }
    for (i, sw) in s.switches.iter().enumerate() {
        if let Some(t) = &sw.scheduler {
            check_tree(root.key("switches").index(i).key("scheduler"), t)?;
        }
    }
    for (i, sw) in s.switches.iter().enumerate() {
        if let Some(b) = &sw.buffer {
            check_buffer(src, root.key("switches").index(i).key("buffer"), b, frame)?;
        }
    }
    Ok(())
}

/// A switch buffer's sizes, thresholds and PFC settings; `frame` is the largest frame on the
/// wire, which every buffer must hold.
fn check_buffer(
    src: &Source,
    p: FieldPath,
    b: &fabemu_switch::buffer::BufferConfig,
    frame: u64,
) -> Result<(), ScenarioError> {
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
    for (f, v) in [("alpha", b.alpha), ("lossy_alpha", b.lossy_alpha)] {
        if !(v.is_finite() && v > 0.0) {
            return Err(src.error_at(&p.key(f), format!("{v} must be a positive number")));
        }
    }
    if let Some(e) = &b.ecn {
        let ep = p.key("ecn");
        if !(e.pmax.is_finite() && (0.0..=1.0).contains(&e.pmax)) {
            return Err(src.error_at(
                &ep.key("pmax"),
                format!("{} is not a probability in [0, 1]", e.pmax),
            ));
        }
        if e.kmin > e.kmax {
            return Err(src.error_at(
                &ep.key("kmin"),
                format!("kmin {} is above kmax {}", e.kmin, e.kmax),
            ));
        }
    }
    let pfc = &b.pfc;
    if pfc.enabled {
        let pp = p.key("pfc");
        if pfc.quanta == 0 {
            return Err(src.error_at(
                &pp.key("quanta"),
                "a pause of 0 quanta is an XON; give 1..65535".to_string(),
            ));
        }
        if pfc.deadlock_timeout == Time::ZERO {
            return Err(src.error_at(
                &pp.key("deadlock_timeout"),
                "must be greater than zero".to_string(),
            ));
        }
        if pfc.max_frame.bytes() < frame.saturating_sub(100) {
            return Err(src.error_at(
                &pp.key("max_frame"),
                format!(
                    "{} is smaller than one {}-byte MTU packet; headroom would be too small",
                    pfc.max_frame,
                    frame - 100
                ),
            ));
        }
    }
    Ok(())
}

/// A generated fabric: exactly one builder, its parameters in range, and no explicit lists
/// beside it.
fn check_topology(src: &Source, t: &TopologySpec) -> Result<(), ScenarioError> {
    let s = &src.scenario;
    let root = FieldPath::root();
    let err = |p: FieldPath, m: String| Err(src.error_at(&p, m));
    let tp = root.key("topology");
    let kinds = t.kinds();
    if kinds.len() != 1 {
        return err(
            tp,
            format!(
                "give exactly one of `star`, `ring`, `leaf_spine`, `fat_tree`, `torus`, `multi_dim`, `astra_sim` (found {}{})",
                kinds.len(),
                if kinds.is_empty() {
                    String::new()
                } else {
                    format!(": {}", kinds.join(", "))
                }
            ),
        );
    }
    if let Some(f) = &t.fat_tree {
        let fp = tp.key("fat_tree");
        if f.k < 2 || f.k % 2 == 1 {
            return err(
                fp.key("k"),
                format!("k = {} must be even and at least 2", f.k),
            );
        }
        if f.oversubscription == 0 {
            return err(fp.key("oversubscription"), "must be at least 1".into());
        }
        for (field, bw) in [
            ("host_bandwidth", Some(f.host_bandwidth)),
            ("fabric_bandwidth", Some(f.fabric_bandwidth)),
            ("core_bandwidth", f.core_bandwidth),
        ] {
            if bw.is_some_and(|b| b.bps() == 0) {
                return err(fp.key(field), "must be greater than zero".into());
            }
        }
    }
    if let Some(tor) = &t.torus {
        let p = tp.key("torus");
        if tor.dims.is_empty() {
            return err(p.key("dims"), "list at least one dimension".into());
        }
        for (i, &d) in tor.dims.iter().enumerate() {
            if d < 2 {
                return err(
                    p.key("dims").index(i),
                    format!("a dimension of size {d}; each needs at least 2 hosts"),
                );
            }
        }
        if tor.bandwidth.bps() == 0 {
            return err(p.key("bandwidth"), "must be greater than zero".into());
        }
    }
    if let Some(m) = &t.multi_dim {
        let p = tp.key("multi_dim").key("dimensions");
        if m.dimensions.is_empty() {
            return err(p, "list at least one dimension".into());
        }
        for (i, d) in m.dimensions.iter().enumerate() {
            if d.size < 2 {
                return err(
                    p.index(i).key("size"),
                    format!(
                        "a dimension of size {}; each needs at least 2 hosts",
                        d.size
                    ),
                );
            }
            if d.bandwidth.bps() == 0 {
                return err(
                    p.index(i).key("bandwidth"),
                    "must be greater than zero".into(),
                );
            }
        }
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
    Ok(())
}

/// An explicit fabric: hosts, and links with a bandwidth.
fn check_explicit_fabric(src: &Source) -> Result<(), ScenarioError> {
    let s = &src.scenario;
    let root = FieldPath::root();
    let err = |p: FieldPath, m: String| Err(src.error_at(&p, m));
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
    Ok(())
}

/// Refuses, before anything is built, a fabric or workload that would not fit in memory or
/// time.
fn check_sizes(src: &Source) -> Result<(), ScenarioError> {
    let s = &src.scenario;
    let root = FieldPath::root();
    let err = |p: FieldPath, m: String| Err(src.error_at(&p, m));
    // Sizes: refuse before building what would not fit in memory or time.
    let fabric_path = match &s.topology {
        Some(t) if t.star.is_some() => root.key("topology").key("star"),
        Some(t) if t.ring.is_some() => root.key("topology").key("ring"),
        Some(t) if t.leaf_spine.is_some() => root.key("topology").key("leaf_spine"),
        Some(t) if t.fat_tree.is_some() => root.key("topology").key("fat_tree"),
        Some(t) if t.torus.is_some() => root.key("topology").key("torus"),
        Some(t) if t.multi_dim.is_some() => root.key("topology").key("multi_dim"),
        Some(t) if t.astra_sim.is_some() => root.key("topology").key("astra_sim"),
        Some(_) => root.key("topology"),
        None => root.key("hosts"),
    };
    let too_big = |what: String| Err(src.error_at(&fabric_path, what));
    match fabric_size(src) {
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
    Ok(())
}

/// The failover delay given once, and routes only with `routing: explicit`.
fn check_routing(src: &Source) -> Result<(), ScenarioError> {
    let s = &src.scenario;
    let root = FieldPath::root();
    let err = |p: FieldPath, m: String| Err(src.error_at(&p, m));
    if s.failover.is_some() && s.routing.failover.is_some() {
        return err(
            root.key("failover"),
            "give the failover delay once: `routing: {failover: ...}` (the top-level `failover` is its older spelling)".into(),
        );
    }

    match s.routing.policy {
        Routing::Auto | Routing::ShortestPath | Routing::DimensionOrder if !s.routes.is_empty() => {
            return err(
                root.key("routes"),
                format!(
                    "routes are listed but `routing` is `{}`; set `routing: explicit`",
                    match s.routing.policy {
                        Routing::Auto => "auto",
                        Routing::ShortestPath => "shortest_path",
                        Routing::DimensionOrder => "dimension_order",
                        Routing::Explicit => "explicit",
                    }
                ),
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
    Ok(())
}

/// Every message within what one RDMA WRITE carries.
fn check_message_sizes(src: &Source) -> Result<(), ScenarioError> {
    let s = &src.scenario;
    let root = FieldPath::root();
    let err = |p: FieldPath, m: String| Err(src.error_at(&p, m));
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

/// Refuses what flow fidelity does not model, naming the field and the fidelity that does.
pub(crate) fn check_flow_fidelity(src: &Source) -> Result<(), ScenarioError> {
    let s = &src.scenario;
    let root = FieldPath::root();
    let refuse = |p: FieldPath, what: &str| {
        Err(src.error_at(
            &p,
            format!(
                "flow fidelity does not model {what}; run it at `fidelity: packet` (or \
                 `--fidelity packet`)"
            ),
        ))
    };
    if s.mode == super::Mode::Data {
        return refuse(
            root.key("mode"),
            "real payload bytes (`mode: data`): flows carry lengths only",
        );
    }
    if s.lossless {
        return refuse(
            root.key("lossless"),
            "drops, so it cannot check a lossless fabric",
        );
    }
    if s.nic.cc != fabemu_fabric::host::CongestionControl::None {
        return refuse(root.key("nic").key("cc"), "congestion control");
    }
    if s.nic.pfc.is_some() {
        return refuse(root.key("nic").key("pfc"), "PFC generation by NICs");
    }
    let check_buffer = |p: FieldPath, b: &fabemu_switch::buffer::BufferConfig| {
        // PFC is accepted: flows never fill a buffer, but the run estimates where senders
        // would, and warns where PFC would pause (see `crate::flow`).
        if b.ecn.is_some() {
            return refuse(p.key("ecn"), "ECN marking (flows never fill a queue)");
        }
        if b.per_queue.is_some() {
            return refuse(
                p.key("per_queue"),
                "finite queues that drop (flows never fill a queue)",
            );
        }
        Ok(())
    };
    check_buffer(root.key("switch_buffer"), &s.switch_buffer)?;
    if s.switch_scheduler.is_some() {
        return refuse(
            root.key("switch_scheduler"),
            "switch schedulers (rates are max-min fair)",
        );
    }
    for (i, sw) in s.switches.iter().enumerate() {
        let sp = root.key("switches").index(i);
        if let Some(b) = &sw.buffer {
            check_buffer(sp.key("buffer"), b)?;
        }
        if sw.scheduler.is_some() {
            return refuse(
                sp.key("scheduler"),
                "switch schedulers (rates are max-min fair)",
            );
        }
    }
    Ok(())
}
