//! The receive side of the NIC: frames addressed to this host (data, ACK/NAK, CNP, PFC) and
//! the in-order delivery to the transport; frames for other hosts go to [`super::relay`].

use super::*;

impl Nic {
    /// Handles a frame that arrived on `port`.
    ///
    /// An ACK or a data frame without extension headers (nearly every frame) is classified,
    /// addressed and parsed in one pass ([`RoceRx::common_intact`]); any other frame, or one that pass
    /// refuses, takes [`Nic::receive_general`], which decides as before field by field.
    pub(super) fn receive(&mut self, port: usize, pkt: Packet, ctx: &mut impl Context) {
        if (pkt.is_corrupted() || self.verify_icrc) && self.damaged(&pkt) {
            self.stats.corrupted_discarded += 1;
            return;
        }
        // Intact: a frame a fault damaged was discarded just above (the FCS check), so its
        // IPv4 checksum is the one its last writer set and need not be recomputed.
        let Some(rx) = RoceRx::common_intact(pkt.header()) else {
            self.receive_general(port, pkt, ctx);
            return;
        };
        if rx.dst_ip != self.addr.ip {
            self.forward(port, rx.dst_ip, pkt, ctx);
            return;
        }
        // By reference unless the receive buffer may keep the frame (PFC): moved into the
        // handlers, the 128-byte packet was copied once per call it went through.
        if self.pfc {
            self.on_roce(port, &rx, pkt, ctx);
            return;
        }
        self.on_roce_now(&rx, Arrived::of(&pkt), ctx);
    }

    /// [`Nic::receive`] of a frame left in the engine's slab ([`Event::Frame`]: hosts hold
    /// frames). The common case (an intact timing-mode frame for this host, without PFC's
    /// receive buffer, telemetry or an ICRC check) is read where it lies: its headers parsed
    /// in the slot, the slot freed, and the transport given what it reads of the frame
    /// ([`Arrived`]); moved out to the NIC, the 128-byte packet was copied on its way and
    /// dropped by an out-of-line call. Any other frame is taken out for [`Nic::receive`].
    #[inline(always)]
    pub(super) fn receive_frame(&mut self, port: usize, frame: Frame, ctx: &mut impl Context) {
        if !self.verify_icrc && !self.pfc && !self.wants_int {
            if let Some(pkt) = ctx.frame(&frame) {
                if let (false, &Payload::Timing(len)) = (pkt.is_corrupted(), pkt.payload()) {
                    if let Some(rx) = RoceRx::common_intact(pkt.header()) {
                        if rx.dst_ip == self.addr.ip {
                            let created_at = pkt.meta.created_at;
                            ctx.drop_frame(frame);
                            let a = Arrived {
                                data: None,
                                len: len as usize,
                                created_at,
                                header: &[],
                            };
                            self.on_roce_now(&rx, a, ctx);
                            return;
                        }
                    }
                }
            }
        }
        if let Some(pkt) = ctx.take_frame(frame) {
            self.receive(port, pkt, ctx);
        }
    }

    /// [`Nic::receive`] of a frame of a rarer shape (PFC, a first or last packet with RETH or
    /// ImmDt, a CNP, anything malformed): classified, addressed and parsed in turn.
    #[inline(never)]
    fn receive_general(&mut self, port: usize, pkt: Packet, ctx: &mut impl Context) {
        match wire::frame_kind(pkt.header()) {
            FrameKind::RoceV2 => {}
            FrameKind::PfcPause => {
                self.stats.pause_frames_received += 1;
                self.on_pause(port, &pkt, ctx);
                return;
            }
            FrameKind::Other => {
                self.stats.dropped_invalid += 1;
                return;
            }
        }
        let Some(dst) = wire::ipv4_dst(pkt.header()) else {
            self.stats.dropped_invalid += 1;
            return;
        };
        if dst != self.addr.ip {
            self.forward(port, dst, pkt, ctx);
            return;
        }
        let Ok(repr) = RoceRepr::parse(pkt.header()) else {
            self.stats.dropped_invalid += 1;
            return;
        };
        self.on_roce(port, &RoceRx::from(&repr), pkt, ctx);
    }

    /// A RoCEv2 frame addressed to this host, by opcode, taken by value: a data frame goes
    /// into the receive buffer when the NIC generates PFC ([`Nic::rx_enqueue`]), and to the
    /// transport now otherwise ([`Nic::on_roce_now`], which handles every other frame too).
    fn on_roce(&mut self, port: usize, rx: &RoceRx, pkt: Packet, ctx: &mut impl Context) {
        // The flag first: `cfg` is on a line a frame otherwise leaves alone.
        let pfc = if self.pfc { self.cfg.pfc } else { None };
        if let (Some(cfg), true) = (pfc, opcode::is_write(rx.opcode)) {
            let Some(src) = self.dir.index_of(rx.src_ip) else {
                self.stats.dropped_invalid += 1;
                return;
            };
            self.on_data_mark(src, rx, ctx);
            self.rx_enqueue(cfg, port, pkt, ctx);
            return;
        }
        self.on_roce_now(rx, Arrived::of(&pkt), ctx);
    }

    /// [`Nic::on_roce`] of a frame the NIC does not keep (any frame but a data frame into the
    /// receive buffer), by reference: the caller drops it.
    #[inline(always)]
    fn on_roce_now(&mut self, rx: &RoceRx, pkt: Arrived<'_>, ctx: &mut impl Context) {
        let Some(src) = self.dir.index_of(rx.src_ip) else {
            self.stats.dropped_invalid += 1;
            return;
        };
        match rx.opcode {
            opcode::ACK => {
                let int = self.wants_int.then_some(pkt.header);
                self.on_ack_frame(src, rx, int, ctx)
            }
            opcode::CNP => self.on_cnp(src, rx.dest_qp, ctx),
            op if opcode::is_write(op) => {
                self.on_data_mark(src, rx, ctx);
                self.on_data_frame(src, rx, pkt, ctx);
            }
            _ => self.stats.dropped_invalid += 1,
        }
    }

    /// Whether a frame was damaged on the wire and must be discarded (see [`crate::fault`]).
    /// In data mode with `verify_icrc`, a frame with payload bytes addressed to this NIC is
    /// judged by its ICRC, recomputed over the bytes that arrived (counted in `icrc_errors`);
    /// every other frame by the MAC's FCS check ([`Packet::is_corrupted`]). HPCC's switches append
    /// telemetry inside the ICRC's coverage, so with HPCC only the FCS judges.
    fn damaged(&mut self, pkt: &Packet) -> bool {
        if let Payload::Data(d) = pkt.payload() {
            let h = pkt.header();
            if self.verify_icrc
                && !self.wants_int
                && wire::frame_kind(h) == FrameKind::RoceV2
                && wire::ipv4_dst(h) == Some(self.addr.ip)
                && {
                    // The pad (PadCnt's bytes, zeros as sent) is covered, before the ICRC.
                    let t = pkt.trailer();
                    let pad = t.len().saturating_sub(wire::ICRC_LEN);
                    let (want, n) = wire::padded_trailer(h, &d[..], pad);
                    want.get(..n) != Some(t)
                }
            {
                self.stats.icrc_errors += 1;
                return true;
            }
        }
        pkt.is_corrupted()
    }

    /// An ACK or NAK from `src`; `int` is its header when HPCC looks for echoed telemetry.
    pub(super) fn on_ack_frame(
        &mut self,
        src: u32,
        rx: &RoceRx,
        int: Option<&[u8]>,
        ctx: &mut impl Context,
    ) {
        let Some(aeth) = rx.aeth else {
            self.stats.dropped_invalid += 1;
            return;
        };
        // The destination QP number names the class of the QP pair (`qp_number`).
        let class = qpn_class(rx.dest_qp);
        let Some(&i) = self.reception.qp_index.get(&qp_key(src, class)) else {
            self.stats.dropped_invalid += 1;
            return;
        };
        let i = i as usize;
        let qp = &mut self.qps[i];
        // Messages this ACK completes: a new vector each time (it allocates only when one
        // does, about once per message), which spares every ACK a read and a write of a
        // scratch vector kept in the NIC on a line it otherwise leaves alone.
        let mut done = Vec::new();
        let now = ctx.now();
        // Any response shows the peer alive: the retry count restarts (as RC's does).
        qp.retries = 0;
        let una_before = qp.snd_una();
        let mut rtt = None;
        if aeth.is_nak() {
            self.stats.naks_received += 1;
            if let Some(w) = self.watch.as_deref_mut() {
                w.loss(i, src, class, now, qp.snd_nxt());
            }
            if qp
                .on_nak(rx.psn, &mut done, u64::from(self.cfg.restart_window))
                .is_some()
            {
                let rto = qp.base_rto(self.reception.rto);
                qp.rto_deadline = now + qp.jittered(rto);
            }
        } else {
            self.stats.acks_received += 1;
            if qp.on_ack(rx.psn, &mut done) {
                rtt = qp.on_acked(now);
                let rto = qp.base_rto(self.reception.rto);
                qp.rto_deadline = now + qp.jittered(rto);
            }
        }
        let port = qp.port();
        let acked_psns = qp.snd_una().saturating_sub(una_before);
        if let Some(cc) = self.qp_cc.get_mut(i) {
            let sig = AckSignal {
                acked_bytes: acked_psns * self.cfg.mtu.bytes(),
                ece: rx.becn,
                rtt,
                hops: 64u32.saturating_sub(u32::from(rx.ttl)),
                snd_nxt: qp.snd_nxt(),
                snd_una: qp.snd_una(),
                int: int.and_then(wire::int::parse_int),
            };
            let line = ctx
                .channel(port)
                .map_or(0.0, |c| c.rate.bandwidth().bps() as f64);
            if cc.on_ack(&self.cfg.cc, line, &sig, now) {
                self.stats.rate_decreases += 1;
            }
        }
        let watch = if self.watched {
            self.watch.as_deref_mut()
        } else {
            None
        };
        if let Some(w) = watch {
            w.progress(i, qp.snd_una(), now);
            for _ in &done {
                w.acknowledged(i, now);
            }
        }
        // About one ACK in a message's packets completes one.
        if !done.is_empty() {
            self.sends_done(src, done);
        }
        self.activate(i);
        // Most ACKs arrive while the port sends: no call into `pump` to learn it.
        if ctx.port_idle(port) {
            self.pump(port, ctx);
        }
    }

    /// The completions of the sends to `dst` that an ACK finished (their tags, oldest first),
    /// out of line.
    #[inline(never)]
    fn sends_done(&mut self, dst: u32, done: Vec<u64>) {
        for tag in done {
            self.completions
                .push_back(Completion::SendDone { dst, tag });
        }
    }

    /// A data frame for this host arrived: the notification point looks at its ECN mark
    /// (DCQCN), before the transport takes the frame, now or after the receive buffer when the
    /// NIC generates PFC.
    #[inline(always)]
    fn on_data_mark(&mut self, src: u32, rx: &RoceRx, ctx: &mut impl Context) {
        let dcqcn = if self.dcqcn {
            self.cfg.cc.dcqcn()
        } else {
            None
        };
        if let (Some(interval), Ecn::Ce) = (dcqcn.map(|d| d.cnp_interval), rx.ecn) {
            self.stats.ce_received += 1;
            if let Some(i) = self.qp_entry(src, qpn_class(rx.dest_qp), ctx) {
                let now = ctx.now();
                if let Some(QpCc::Dcqcn { np, .. }) = self.qp_cc.get_mut(i) {
                    if np.on_ce(now, interval) {
                        self.send_cnp(i, ctx);
                    }
                }
            }
        }
    }

    /// A data frame the transport takes now: in order, acknowledged (or NAKed); by reference,
    /// the caller drops it.
    pub(super) fn on_data_frame(
        &mut self,
        src: u32,
        rx: &RoceRx,
        pkt: Arrived<'_>,
        ctx: &mut impl Context,
    ) {
        let ack_every = self.reception.ack_every;
        let Some(i) = self.qp_entry(src, qpn_class(rx.dest_qp), ctx) else {
            self.stats.dropped_invalid += 1;
            return;
        };
        let qp = &mut self.qps[i];
        let data = pkt.data;
        let mut received = None;
        let action = qp.on_data(
            rx.psn,
            rx.opcode,
            rx.ack_req,
            rx.dma_len,
            rx.immdt,
            data,
            pkt.len,
            ack_every,
            &mut received,
        );
        let (ack_psn, exp_psn, msn) = (qp.ack_psn(), qp.expected_psn(), qp.msn);
        // HPCC: the ACK echoes the data frame's telemetry stack as it arrived (read from the
        // frame itself: a zeroed copy cost a memset of its 100-odd bytes per data frame).
        let int: &[u8] = if self.wants_int {
            wire::int::int_bytes(pkt.header)
                .map_or(&[], |b| &b[..b.len().min(wire::int::INT_MAX_LEN)])
        } else {
            &[]
        };
        // DCTCP's notification point: a CE mark is echoed (BTH BECN) in the next ACK.
        let mut becn = false;
        if self.echoes_ecn {
            if rx.ecn == Ecn::Ce {
                self.stats.ce_received += 1;
            }
            if let Some(cc) = self.qp_cc.get_mut(i) {
                becn = cc.echo_ce(rx.ecn == Ecn::Ce, &action);
            }
        }
        match action {
            RxAction::Accepted { ack } => {
                self.stats.data_packets_received += 1;
                let latency = ctx.now().saturating_sub(pkt.created_at).ps();
                self.stats.latency_sum_ps += latency;
                self.stats.latency.record(latency);
                if ack {
                    self.stats.acks_sent += 1;
                    self.send_control(i, AethRepr::ack(msn), ack_psn, becn, int, ctx);
                }
            }
            RxAction::Nak => {
                self.stats.out_of_order_dropped += 1;
                self.stats.naks_sent += 1;
                let nak = AethRepr::nak_psn_sequence_error(msn);
                self.send_control(i, nak, exp_psn, false, &[], ctx);
            }
            RxAction::DropOutOfOrder => self.stats.out_of_order_dropped += 1,
            RxAction::Duplicate => {
                self.stats.duplicates_received += 1;
                self.stats.acks_sent += 1;
                self.send_control(i, AethRepr::ack(msn), ack_psn, becn, int, ctx);
            }
        }
        if let Some(r) = received {
            if r.len != r.dma_len {
                self.stats.length_mismatches += 1;
            }
            self.completions.push_back(Completion::Received {
                src,
                imm: r.imm,
                len: r.len,
                data: r.data,
            });
        }
    }
}

/// What the transport reads of an arrived frame besides its parsed headers ([`RoceRx`]): from
/// a packet ([`Arrived::of`]), or copied out of a frame read in the slab
/// ([`Nic::receive_frame`], whose frames have no payload bytes and need no header).
#[derive(Clone, Copy)]
pub(super) struct Arrived<'a> {
    /// The payload's bytes (data mode).
    pub(super) data: Option<&'a Bytes>,
    /// The payload's length.
    pub(super) len: usize,
    /// When the frame was built.
    pub(super) created_at: Time,
    /// The frame's header (read for telemetry, HPCC).
    pub(super) header: &'a [u8],
}

impl<'a> Arrived<'a> {
    /// What the transport reads of `pkt`.
    #[inline(always)]
    pub(super) fn of(pkt: &'a Packet) -> Arrived<'a> {
        Arrived {
            data: pkt.payload().bytes(),
            len: pkt.payload().len(),
            created_at: pkt.meta.created_at,
            header: pkt.header(),
        }
    }
}
