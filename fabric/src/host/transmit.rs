//! The transmit side of the NIC: per-port scheduling (PFC frames, then control frames, then
//! relayed and local data in turns, QPs round-robin), segmentation of messages into packets
//! with their RoCEv2 headers, the retransmission timer, and ACK/NAK/CNP generation.

use super::*;

impl Nic {
    /// Sends the next frame on `port` if it is idle: PFC frames first, then control, then
    /// round-robin data; frames of a paused priority wait.
    pub(super) fn pump(&mut self, port: usize, ctx: &mut impl Context) {
        if !ctx.port_idle(port) {
            return;
        }
        let now = ctx.now();
        let Some(np) = self.ports.get_mut(port) else {
            return;
        };
        if np.data_only {
            // No PFC frame, pause or relayed frame anywhere (see `NicPort::data_only`): what the
            // general path below does then, reading only the port's first line.
            if let Some(c) = np.control.pop_front() {
                self.send_frame(port, c, ctx);
                return;
            }
            let sent = self.send_local(port, ctx);
            self.ports[port].transit_turn = sent;
            return;
        }
        if let Some(pkt) = np.mac_control.as_mut().and_then(|q| q.pop_front()) {
            self.send(port, pkt, ctx);
            return;
        }
        // ACKs of a class QP travel in its class (receive.rs), the rest in `control_dscp`'s.
        if let Some(front) = np.control.front() {
            if !np.pause.any_paused(now)
                || !np
                    .pause
                    .is_paused(ctx.frame(&front.frame).map_or(0, frame_class), now)
            {
                if let Some(c) = np.control.pop_front() {
                    self.send_frame(port, c, ctx);
                    return;
                }
            }
        }
        // Relayed frames and the host's own data take turns, so neither starves the other.
        if self.ports[port].transit_turn && self.send_transit(port, ctx) {
            return;
        }
        if self.send_local(port, ctx) {
            self.ports[port].transit_turn = true;
            return;
        }
        self.send_transit(port, ctx);
    }

    /// Sends the oldest relayed frame on `port`, if any.
    pub(super) fn send_transit(&mut self, port: usize, ctx: &mut impl Context) -> bool {
        let now = ctx.now();
        let np = &mut self.ports[port];
        np.transit_turn = false;
        let Some(transit) = np.transit.as_deref_mut() else {
            return false;
        };
        let pkt = if np.pause.any_paused(now) {
            // The oldest frame of a priority that may go; paused ones keep their place.
            let pause = np.pause;
            transit
                .iter()
                .position(|p| !pause.is_paused(frame_class(p), now))
                .and_then(|i| transit.remove(i))
        } else {
            transit.pop_front()
        };
        let Some(pkt) = pkt else {
            return false;
        };
        np.transit_bytes = np.transit_bytes.saturating_sub(pkt.frame_len() as u64);
        self.send(port, pkt, ctx);
        true
    }

    /// Sends the next data packet of the port's QPs, round-robin; false when none may go now
    /// (a pacing timer is armed when a rate limiter holds them back).
    pub(super) fn send_local(&mut self, port: usize, ctx: &mut impl Context) -> bool {
        let now = ctx.now();
        // QPs of a paused priority keep their turn; the resume timer pumps the port again.
        // Copied only while a class is paused (rare): the copy read all of its line.
        let any_paused = !self.ports[port].data_only && self.ports[port].pause.any_paused(now);
        let pause = if any_paused {
            self.ports[port].pause
        } else {
            PortPause::default()
        };
        let mut earliest = Time::NEVER;
        let mtu = u64::from(self.mtu);
        for _ in 0..self.ports[port].active_len() {
            let Some(i) = self.ports[port].pop_active() else {
                break;
            };
            let Some(qp) = self.qps.get_mut(i as usize) else {
                continue;
            };
            if !qp.has_data() {
                qp.active = false;
                continue;
            }
            if any_paused && pause.is_paused(qp.dscp >> 3, now) {
                self.ports[port].push_active(i);
                continue;
            }
            if qp.next_send_time > now {
                earliest = earliest.min(qp.next_send_time);
                self.ports[port].push_active(i);
                continue;
            }
            // A congestion window full: the next ACK that frees room pumps the port again.
            if let Some(w) = self.qp_cc.get(i as usize).and_then(QpCc::window) {
                let inflight = qp.snd_nxt().saturating_sub(qp.snd_una()) * mtu;
                if inflight >= w {
                    self.ports[port].push_active(i);
                    continue;
                }
            }
            self.send_data(i as usize, port, ctx);
            return true;
        }
        if earliest != Time::NEVER {
            let np = &mut self.ports[port];
            if np.pace_timer_at.is_none_or(|t| t > earliest) {
                np.pace_timer_at = Some(earliest);
                ctx.set_timer(earliest, HostTimer::Pace(port).token());
            }
        }
        false
    }

    pub(super) fn send(&mut self, port: usize, pkt: Packet, ctx: &mut impl Context) {
        match ctx.transmit(port, pkt) {
            Ok(()) => {}
            Err(TransmitError::Busy | TransmitError::NoSuchPort | TransmitError::NoSuchFrame) => {
                self.stats.dropped_invalid += 1;
            }
        }
    }

    /// Sends a frame held in the engine's slab (built there, see [`build_held`]).
    fn send_frame(&mut self, port: usize, c: ControlFrame, ctx: &mut impl Context) {
        match ctx.transmit_frame_len(port, c.frame, c.len, true) {
            Ok(()) => {}
            Err(TransmitError::Busy | TransmitError::NoSuchPort | TransmitError::NoSuchFrame) => {
                self.stats.dropped_invalid += 1;
            }
        }
    }

    pub(super) fn send_data(&mut self, i: usize, port: usize, ctx: &mut impl Context) {
        let now = ctx.now();
        let mtu = u64::from(self.mtu);
        let line = ctx.channel(port).map(|c| c.rate.bandwidth());
        let Some(qp) = self.qps.get_mut(i) else {
            return;
        };
        let Some(paddr) = self.dir.get(qp.peer) else {
            return;
        };
        let was_outstanding = qp.outstanding();
        // HPCC: an empty telemetry stack (no hops yet) that switches append to.
        let int: &[u8] = if self.wants_int {
            &[0; wire::int::INT_HEADER_LEN]
        } else {
            &[]
        };
        let Some(seg) = qp.next_segment(mtu) else {
            qp.active = false;
            return;
        };
        let fields = PacketFields {
            dst_mac: paddr.mac,
            dst_ip: paddr.ip,
            dscp: qp.dscp,
            ecn: if self.ecn_data {
                Ecn::Ect0
            } else {
                Ecn::NotEct
            },
            udp_src_port: qp.udp_src_port,
            dest_qp: qp.remote_qpn,
            opcode: seg.opcode,
            psn: (seg.psn & qp::PSN_MASK) as u32,
            ack_req: seg.ack_req,
            becn: false,
            ip_id: seg.psn as u16,
            reth: seg.dma_len.map(|len| RethRepr {
                va: 0,
                rkey: 0,
                dma_len: len,
            }),
            aeth: None,
            immdt: seg.imm,
            payload_len: seg.payload_len as usize + int.len(),
            // The message bytes padded to 4; HPCC's stack, which every switch lengthens by
            // a record, is left out of the count (see `wire::int`).
            pad: wire::pad_len(seg.payload_len as usize) as u8,
        };
        let payload = match seg.data {
            Some(d) => Payload::data(d),
            None => Payload::Timing(seg.payload_len),
        };
        // What size-based schedulers (SJF, SRPT) read; messages are below 4 GiB (RETH).
        let meta = PacketMeta {
            created_at: now,
            message_len: seg.msg_len as u32,
            message_remaining: seg.msg_remaining as u32,
        };
        let Some((frame, frame_len)) =
            build_held(ctx, &self.addr.sender(), &fields, payload, int, meta)
        else {
            self.stats.dropped_invalid += 1;
            return;
        };
        self.stats.data_packets_sent += 1;
        self.stats.data_bytes_sent += seg.payload_len as u64;
        if seg.retransmission {
            self.stats.retransmitted_packets += 1;
            self.stats.retransmitted_bytes += seg.payload_len as u64;
        }
        // Rate limiter: the next packet may start once this one would have finished at the
        // QP's rate (at line rate this never binds: the port itself is busy that long).
        // DCQCN's rate, when below line rate, caps the configured one.
        let cc = self.qp_cc.get_mut(i);
        let cc_rate = cc.as_ref().and_then(|c| c.rate()).map(dcqcn::to_bandwidth);
        let rate = match (self.qp_rate.or(line), cc_rate) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let (Some(rate), Some(line)) = (rate, line) {
            if rate < line {
                let wire = ctx.wire_bytes(frame_len as usize);
                qp.next_send_time = now.max(qp.next_send_time) + rate.serialization_time(wire);
            }
        }
        let dcqcn = if self.dcqcn {
            self.cfg.cc.dcqcn()
        } else {
            None
        };
        if let (Some(d), Some(QpCc::Dcqcn { rp, .. }), Some(line)) = (dcqcn, cc, line) {
            rp.on_sent(d, line.bps() as f64, u64::from(frame_len), now);
        }
        if qp.has_data() {
            self.ports[port].push_active(i as u32);
        } else {
            qp.active = false;
        }
        // The transport timer (as InfiniBand RC defines it) starts when a request goes out with nothing
        // outstanding and restarts on every ACK that makes progress; sending more does not
        // restart it. Armed lazily: one pending timer event per QP at a time.
        if !seg.retransmission {
            qp.on_first_send(seg.psn, now);
        }
        if let Some(cc) = self.qp_cc.get_mut(i) {
            cc.on_sent(seg.psn, seg.retransmission, now);
        }
        if !was_outstanding {
            let rto = qp.base_rto(self.reception.rto);
            qp.rto_deadline = now + qp.jittered(rto);
        }
        if !qp.rto_armed {
            qp.rto_armed = true;
            ctx.set_timer(qp.rto_deadline, HostTimer::Rto(i).token());
        }
        self.send_frame(
            port,
            ControlFrame {
                frame,
                len: frame_len,
            },
            ctx,
        );
    }

    pub(super) fn on_rto(&mut self, i: usize, ctx: &mut impl Context) {
        let now = ctx.now();
        let Some(qp) = self.qps.get_mut(i) else {
            return;
        };
        qp.rto_armed = false;
        if !qp.outstanding() {
            return;
        }
        if now < qp.rto_deadline {
            qp.rto_armed = true;
            ctx.set_timer(qp.rto_deadline, HostTimer::Rto(i).token());
            return;
        }
        qp.retries += 1;
        self.stats.timeouts += 1;
        if qp.retries > self.cfg.retry_limit {
            // RC's error state: the QP's unfinished messages never complete, and the run
            // reports them; a peer that cannot be reached no longer keeps the run going.
            qp.failed = true;
            self.stats.qps_failed += 1;
            return;
        }
        if let Some(w) = self.watch.as_deref_mut() {
            w.loss(i, qp.peer, qpn_class(qp.remote_qpn), now, qp.snd_nxt());
        }
        qp.on_timeout(u64::from(self.cfg.restart_window));
        // Back off exponentially while timeouts repeat (the retry count is reset by any
        // response): synchronized go-back-N retransmissions would otherwise refill the same
        // overflowing buffer every `rto`.
        let backed_off = Time(
            qp.base_rto(self.reception.rto)
                .ps()
                .saturating_mul(1 << qp.retries.min(16)),
        );
        qp.rto_deadline = now + qp.jittered(backed_off);
        qp.rto_armed = true;
        ctx.set_timer(qp.rto_deadline, HostTimer::Rto(i).token());
        let port = qp.port();
        self.activate(i);
        self.pump(port, ctx);
    }

    /// Where a control frame (ACK, NAK, CNP) for QP `i` goes: the peer's address, and the
    /// QP's port, UDP source port and remote QP number (control frames follow their QP's path).
    pub(super) fn control_route(&self, i: usize) -> Option<(HostAddr, &Qp)> {
        let qp = self.qps.get(i)?;
        let paddr = self.dir.get(qp.peer).copied()?;
        Some((paddr, qp))
    }

    /// Queues a control frame (ACK/NAK) for QP `i`'s peer on the QP's port. A QP whose class
    /// sets a DSCP answers in that DSCP, as a RoCE responder sends its responses with its QP's
    /// traffic class; the others answer with `control_dscp`. `becn` echoes a CE mark (DCTCP's
    /// ECN echo); `int` is an echoed telemetry stack (HPCC), placed after the AETH.
    pub(super) fn send_control(
        &mut self,
        i: usize,
        aeth: AethRepr,
        psn: u32,
        becn: bool,
        int: &[u8],
        ctx: &mut impl Context,
    ) {
        let Some((paddr, qp)) = self.control_route(i) else {
            return;
        };
        let (port, dest_qp) = (qp.port(), qp.remote_qpn);
        let dscp = self
            .reception
            .classes
            .get(qpn_class(dest_qp))
            .dscp
            .unwrap_or(self.control_dscp);
        let fields = PacketFields {
            dst_mac: paddr.mac,
            dst_ip: paddr.ip,
            dscp,
            ecn: Ecn::NotEct,
            udp_src_port: qp.udp_src_port,
            dest_qp,
            opcode: opcode::ACK,
            psn,
            ack_req: false,
            becn,
            ip_id: psn as u16,
            reth: None,
            aeth: Some(aeth),
            immdt: None,
            payload_len: int.len(),
            pad: 0,
        };
        let meta = PacketMeta {
            created_at: ctx.now(),
            ..PacketMeta::default()
        };
        let payload = self.control_payload();
        let Some((frame, len)) = build_held(ctx, &self.addr.sender(), &fields, payload, int, meta)
        else {
            self.stats.dropped_invalid += 1;
            return;
        };
        self.queue_control_frame(port, ControlFrame { frame, len }, ctx);
    }

    /// Builds a header-only control frame and queues it on `port`'s control queue.
    /// `int` (usually empty) follows the transport headers, counted in `repr.payload_len`.
    pub(super) fn queue_control(
        &mut self,
        port: usize,
        repr: &RoceRepr,
        int: &[u8],
        ctx: &mut impl Context,
    ) {
        let Some(mut pkt) = build(repr, self.control_payload(), int) else {
            self.stats.dropped_invalid += 1;
            return;
        };
        pkt.meta.created_at = ctx.now();
        let len = u32::try_from(pkt.frame_len()).unwrap_or(u32::MAX);
        let frame = ctx.hold(pkt);
        self.queue_control_frame(port, ControlFrame { frame, len }, ctx);
    }

    /// A control frame's payload: none (an empty data payload in data mode, so receivers
    /// check its ICRC).
    fn control_payload(&self) -> Payload {
        if self.data_mode {
            Payload::data(Bytes::new())
        } else {
            Payload::Timing(0)
        }
    }

    /// Queues a control frame held in the slab on `port`'s control queue (4 + 4 bytes, where
    /// the packet itself was 128). Inlined into its two callers.
    #[inline(always)]
    fn queue_control_frame(&mut self, port: usize, c: ControlFrame, ctx: &mut impl Context) {
        let Some(np) = self.ports.get_mut(port) else {
            ctx.drop_frame(c.frame);
            self.stats.dropped_invalid += 1;
            return;
        };
        np.control.push_back(c);
        // Most control frames are queued while the port sends: no call into `pump` to learn it.
        if ctx.port_idle(port) {
            self.pump(port, ctx);
        }
    }

    /// Notification point: a CNP to the peer's QP of QP `i`'s pair (the QP number ACKs carry),
    /// on the control priority whatever the QP's class (RoCE NICs send CNPs with their own
    /// DSCP), not ECN-capable.
    pub(super) fn send_cnp(&mut self, i: usize, ctx: &mut impl Context) {
        let Some((paddr, qp)) = self.control_route(i) else {
            return;
        };
        let (port, udp, dest_qp) = (qp.port(), qp.udp_src_port, qp.remote_qpn);
        let mut repr = RoceRepr::cnp(
            self.addr.mac,
            paddr.mac,
            self.addr.ip,
            paddr.ip,
            udp,
            dest_qp,
        );
        repr.dscp = self.control_dscp;
        self.stats.cnps_sent += 1;
        self.queue_control(port, &repr, &[], ctx);
    }
}
