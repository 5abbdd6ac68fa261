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
            let h = flow_hash(self.addr.ip, paddr.ip, qp.udp_src_port, self.seed);
            // No route at all: the QP stays where it is (its frames are lost; its retry
            // limit ends it if the destination never comes back).
            let Some(port) = self.routes.select(paddr.ip, h) else {
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
        let h = match (
            wire::ipv4_src(pkt.header()),
            wire::udp_src_port(pkt.header()),
        ) {
            (Some(s), Some(p)) => flow_hash(s, dst, p, self.seed),
            _ => 0,
        };
        // A frame is never sent back where it came from — except after a failover, where the
        // way round a failure can start back the way a frame in flight came.
        match self.routes.select(dst, h) {
            Some(out) if out != in_port || self.ports.len() == 1 || self.failed_over => {
                self.end_data_only();
                let np = &mut self.ports[out];
                let len = pkt.frame_len() as u64;
                if np.transit_bytes + len > self.cfg.relay_buffer.bytes() {
                    self.stats.relay_dropped += 1;
                    return;
                }
                np.transit_bytes += len;
                np.transit.get_or_insert_default().push_back(pkt);
                self.stats.forwarded += 1;
                self.pump(out, ctx);
            }
            // No route left after a failover: blackholed, as a switch counts it.
            None if self.failed_over => self.stats.blackholed += 1,
            _ => self.stats.dropped_invalid += 1,
        }
    }
}
