//! How the switch takes part in PFC: it pauses its neighbours when an ingress goes over XOFF
//! (and resumes them below XON), honours the pauses they send, and starts the watchdog on an
//! egress queue stuck behind one.

use super::*;

impl Switch {
    /// Ingress (`port`, `prio`) went over XOFF: owe its neighbour a pause, keep it refreshed.
    pub(super) fn enter_xoff(&mut self, port: usize, prio: u8, ctx: &mut impl Context) {
        let quanta = self.cfg.pfc.quanta.max(1);
        let st = &mut self.pfc[port];
        let bit = 1 << prio;
        if st.xoff & bit != 0 {
            return;
        }
        st.xoff |= bit;
        self.xoff_seen = true;
        self.flags[port].pending |= bit;
        if st.refresh_at.is_none() {
            let t = ctx.now().add(Time((st.pause_time(quanta).ps() / 2).max(1)));
            st.refresh_at = Some(t);
            ctx.set_timer(t, SwitchTimer::Refresh(port).token());
        }
        self.start_tx(port, ctx);
    }

    /// After bytes of ingress (`port`, `prio`) left: resume the neighbour if below XON.
    pub(super) fn check_xon(&mut self, port: usize, prio: u8, ctx: &mut impl Context) {
        let bit = 1 << prio;
        if self.pfc[port].xoff & bit != 0 && self.mmu.should_xon(port, prio) {
            self.pfc[port].xoff &= !bit;
            self.flags[port].pending |= bit;
            self.start_tx(port, ctx);
        }
    }

    /// A PFC frame arrived on `port` (`None`: one that did not parse). Out of line and cold:
    /// inlined, its loop and the pause frame's fields took registers and stack in
    /// [`Switch::on_packet`], which every frame paid in spills.
    #[cold]
    #[inline(never)]
    pub(super) fn on_pause(
        &mut self,
        port: usize,
        repr: Option<PfcPauseRepr>,
        ctx: &mut impl Context,
    ) {
        self.stats.pause_frames_received += 1;
        let Some(repr) = repr else {
            self.stats.malformed += 1;
            return;
        };
        if port >= self.pfc.len() {
            return;
        }
        let now = ctx.now();
        let mut resumed = false;
        for c in 0..PRIORITIES as u8 {
            if repr.class_enable & (1 << c) == 0 {
                continue;
            }
            let q = repr.quanta[usize::from(c)];
            let pp = &mut self.port_stats[port].priorities[usize::from(c)];
            if q == 0 {
                pp.xon_frames_received += 1;
            } else {
                pp.pause_frames_received += 1;
            }
            if !self.mmu.is_lossless(c) {
                continue;
            }
            if q == 0 {
                resumed |= self.resume(port, c, now);
            } else {
                self.pause(port, c, q, ctx);
            }
        }
        if resumed {
            self.start_tx(port, ctx);
        }
    }

    /// The neighbour paused (`port`, `c`) for `quanta` from now (a new pause reloads the timer).
    pub(super) fn pause(&mut self, port: usize, c: u8, quanta: u16, ctx: &mut impl Context) {
        let now = ctx.now();
        let st = &mut self.pfc[port];
        let until = now.add(st.pause_time(quanta));
        let bit = 1 << c;
        let flags = &mut self.flags[port];
        let was_paused = flags.paused & bit != 0;
        flags.paused |= bit;
        st.paused_until[usize::from(c)] = until;
        ctx.set_timer(until, SwitchTimer::Resume(port, c).token());
        if !was_paused {
            st.paused_since[usize::from(c)] = now;
            if self.mmu.egress_bytes(port, c) > 0 {
                self.block(port, c, now, ctx);
            }
        }
    }

    /// Ends the pause of (`port`, `c`); true when it was paused.
    pub(super) fn resume(&mut self, port: usize, c: u8, now: Time) -> bool {
        let bit = 1 << c;
        let flags = &mut self.flags[port];
        if flags.paused & bit == 0 {
            return false;
        }
        flags.paused &= !bit;
        let since = self.pfc[port].paused_since[usize::from(c)];
        self.port_stats[port].priorities[usize::from(c)].paused_time_ps +=
            now.saturating_sub(since).ps();
        self.watch[port].unblock(c);
        true
    }

    /// Egress (`port`, `c`) is paused and holds frames: start its watchdog.
    pub(super) fn block(&mut self, port: usize, c: u8, now: Time, ctx: &mut impl Context) {
        let timeout = self.cfg.pfc.deadlock_timeout;
        if let Some(at) = self.watch[port].block(c, now, timeout) {
            ctx.set_timer(at, SwitchTimer::Watchdog(port, c).token());
        }
    }

    /// Sends the PFC frame owed on `port`, if any; true when the port is now busy with it.
    pub(super) fn send_control(&mut self, port: usize, ctx: &mut impl Context) -> bool {
        let pending = std::mem::take(&mut self.flags[port].pending);
        let Some(repr) = self.pfc[port].take_frame(pending, self.cfg.pfc.quanta) else {
            return false;
        };
        let mut buf = [0u8; PFC_FRAME_LEN];
        if repr.emit(&mut buf).is_err() {
            return false;
        }
        let Ok(pkt) = Packet::new(&buf, Payload::Timing(0), &[]) else {
            return false;
        };
        for c in 0..PRIORITIES {
            if repr.class_enable & (1 << c) != 0 {
                let pp = &mut self.port_stats[port].priorities[c];
                if repr.quanta[c] == 0 {
                    pp.xon_frames_sent += 1;
                } else {
                    pp.pause_frames_sent += 1;
                }
            }
        }
        self.stats.pause_frames_sent += 1;
        if (0..PRIORITIES).all(|c| repr.class_enable & (1 << c) == 0 || repr.quanta[c] == 0) {
            self.stats.xon_frames_sent += 1;
        }
        let more = self.has_more(port);
        if ctx.transmit_then(port, pkt, more).is_err() {
            self.stats.tx_refused += 1;
        }
        true
    }
}
