//! Relaying: a host with several ports (rings, tori, multi-dimensional host fabrics) forwards
//! frames addressed to other hosts along its route table, through a bounded transit queue.
//!
//! **Failover.** The route table is not fixed: the scenario's faults hand a multi-port NIC the
//! tables to take after each failure or recovery (as the switches get theirs). From then on it
//! relays by the new table, and each of its own QPs is moved to the port the new table picks
//! for it (the same flow hash as at creation), so a sender routes around a failed link too.
//! Frames already queued on the old port stay there (the wire loses them if the link is down;
//! the transport retransmits them on the new port).

use super::*;

impl Nic {
    /// Route tables to switch to during the run: at each time, the table that replaces the
    /// current one. Call before the run; set only when faults can change routes, so a run
    /// without them has no extra events.
    pub fn schedule_routes(&mut self, reroutes: Vec<(Time, RouteTable)>) {
        self.reroutes = reroutes
            .into_iter()
            .map(|(t, mut table)| {
                table.compact();
                (t, Arc::new(table))
            })
            .collect();
    }

    /// Takes the `i`-th scheduled table and re-picks every QP's port by it.
    pub(super) fn on_reroute(&mut self, i: usize, ctx: &mut impl Context) {
        let Some((_, table)) = self.reroutes.get(i) else {
            return;
        };
        self.routes = Arc::clone(table);
        self.failed_over = true;
        if self.ports.len() < 2 {
            return;
        }
        for q in 0..self.qps.len() {
            let qp = &self.qps[q];
            let Some(paddr) = self.dir.get(qp.peer) else {
                continue;
            };
            // No route at all: the QP stays where it is (its frames are lost; its retry
            // limit ends it if the destination never comes back).
            let Some(port) = self.route_flow(self.addr.ip, paddr.ip, qp.udp_src_port) else {
                continue;
            };
            let old = qp.port();
            if port == old || port >= self.ports.len() {
                continue;
            }
            if qp.active {
                self.ports[old].retain_active(|x| x as usize != q);
            }
            let qp = &mut self.qps[q];
            qp.active = false;
            qp.set_port(port);
            self.activate(q);
        }
        for port in 0..self.ports.len() {
            self.pump(port, ctx);
        }
    }

    pub(super) fn forward(
        &mut self,
        in_port: usize,
        dst: Ipv4Addr,
        pkt: Packet,
        ctx: &mut impl Context,
    ) {
        // Hosts relay at the link layer, as an NPU's built-in switch does, and leave the TTL
        // alone: rings and tori have paths far longer than 64 hops, and their routes are
        // checked loop-free when they are built. Switches, which are IP routers, decrement it.
        let out = match (
            wire::ipv4_src(pkt.header()),
            wire::udp_src_port(pkt.header()),
        ) {
            (Some(s), Some(p)) => self.route_flow(s, dst, p),
            _ => self.routes.select(dst, 0),
        };
        self.relay_by(in_port, out, pkt, ctx);
    }

    /// The port this NIC sends a frame by (`frame` from its Ethernet header on): the route
    /// table's choice among the equal-cost ports toward the frame's destination by the hash
    /// of its flow, the rule of the NIC's own queue pairs and of the frames it relays, with
    /// the ECMP entropy a switch reads (a RoCEv2 frame's UDP source port, another IPv4
    /// frame's folded 5-tuple, [`wire::ip_flow`]). `None` for a frame that is not IPv4 or
    /// has no route.
    pub fn route_frame(&self, frame: &[u8]) -> Option<usize> {
        let flow = wire::peek_roce_flow(frame)
            .1
            .or_else(|| wire::ip_flow(frame))?;
        self.route_flow(flow.src, flow.dst, flow.udp_src_port)
    }

    /// The port toward `dst` of the flow from `src` with ECMP entropy `entropy`.
    #[inline]
    pub(super) fn route_flow(&self, src: Ipv4Addr, dst: Ipv4Addr, entropy: u16) -> Option<usize> {
        self.routes
            .select_by(dst, || flow_hash(src, dst, entropy, self.seed))
    }

    /// Relays a frame of any IPv4 protocol addressed to another host (a real program's TCP,
    /// UDP or ICMP in an emulation) as RoCEv2 frames are relayed: out of
    /// [`Nic::route_frame`]'s port, through that port's bounded transit queue, taking turns
    /// with the NIC's own data and honouring PFC pauses. True when it was queued; false when
    /// it was dropped (counted as for RoCEv2 frames: no route, a full relay buffer, or the way
    /// it came).
    pub fn relay(&mut self, in_port: usize, pkt: Packet, ctx: &mut impl Context) -> bool {
        let out = self.route_frame(pkt.header());
        self.relay_by(in_port, out, pkt, ctx)
    }

    /// Queues `pkt`, which arrived on `in_port`, for port `out` (its route), or drops and
    /// counts it; true when queued.
    fn relay_by(
        &mut self,
        in_port: usize,
        out: Option<usize>,
        pkt: Packet,
        ctx: &mut impl Context,
    ) -> bool {
        // A frame is never sent back where it came from — except after a failover, where the
        // way round a failure can start back the way a frame in flight came.
        match out {
            Some(out) if out != in_port || self.ports.len() == 1 || self.failed_over => {
                self.end_data_only();
                let Some(np) = self.ports.get_mut(out) else {
                    self.stats.dropped_invalid += 1;
                    return false;
                };
                let len = pkt.frame_len() as u64;
                if np.transit_bytes + len > self.cfg.relay_buffer.bytes() {
                    self.stats.relay_dropped += 1;
                    return false;
                }
                np.transit_bytes += len;
                np.transit.get_or_insert_default().push_back(pkt);
                self.stats.forwarded += 1;
                self.pump(out, ctx);
                true
            }
            // No route left after a failover: blackholed, as a switch counts it.
            None if self.failed_over => {
                self.stats.blackholed += 1;
                false
            }
            _ => {
                self.stats.dropped_invalid += 1;
                false
            }
        }
    }
}
