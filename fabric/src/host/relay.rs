//! Relaying: a host with several ports (rings, tori, multi-dimensional host fabrics) forwards
//! frames addressed to other hosts along its route table, through a bounded transit queue.

use super::*;

impl Nic {
    pub(super) fn forward(
        &mut self,
        in_port: usize,
        dst: Ipv4Addr,
        pkt: Packet,
        ctx: &mut Ctx<'_>,
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
        match self.routes.select(dst, h) {
            Some(out) if out != in_port || self.ports.len() == 1 => {
                let np = &mut self.ports[out];
                let len = pkt.frame_len() as u64;
                if np.transit_bytes + len > self.cfg.relay_buffer.bytes() {
                    self.stats.relay_dropped += 1;
                    return;
                }
                np.transit_bytes += len;
                np.transit.push_back(pkt);
                self.stats.forwarded += 1;
                self.pump(out, ctx);
            }
            _ => self.stats.dropped_invalid += 1,
        }
    }
}
