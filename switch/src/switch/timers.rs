//! The switch's timers: one token type, and what each timer does when it fires.

use super::*;

/// A timer of the switch, as its token carries it: the kind in the top byte, the priority in
/// the next, the port (or a route change's index) in the low 32 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SwitchTimer {
    /// A shaper of `port`'s custom scheduler may release a frame.
    Wake(usize),
    /// The neighbour's pause of (`port`, priority) may have run out.
    Resume(usize, u8),
    /// The XOFF owed on `port` is due for a refresh.
    Refresh(usize),
    /// The deadlock watchdog checks (`port`, priority).
    Watchdog(usize, u8),
    /// A scheduled route change (failover), by its index.
    Reroute(usize),
}

impl SwitchTimer {
    /// The token to arm.
    pub(super) fn token(self) -> u64 {
        let (kind, port, priority) = match self {
            SwitchTimer::Wake(port) => (0, port, 0),
            SwitchTimer::Resume(port, p) => (1, port, p),
            SwitchTimer::Refresh(port) => (2, port, 0),
            SwitchTimer::Watchdog(port, p) => (3, port, p),
            SwitchTimer::Reroute(i) => (4, i, 0),
        };
        kind << 56 | u64::from(priority & 7) << 48 | (port as u64 & 0xFFFF_FFFF)
    }

    /// The timer a fired token stands for (`None`: not one of the switch's).
    pub(super) fn of(token: u64) -> Option<SwitchTimer> {
        let (port, priority) = ((token & 0xFFFF_FFFF) as usize, (token >> 48) as u8 & 7);
        Some(match token >> 56 {
            0 => SwitchTimer::Wake(port),
            1 => SwitchTimer::Resume(port, priority),
            2 => SwitchTimer::Refresh(port),
            3 => SwitchTimer::Watchdog(port, priority),
            4 => SwitchTimer::Reroute(port),
            _ => return None,
        })
    }
}

impl Switch {
    /// Out of line and cold: inlined into [`Actor::handle`], its register saves and stack frame
    /// were paid by every frame and completion (handle's other arms are tail calls).
    #[cold]
    #[inline(never)]
    pub(super) fn on_timer(&mut self, token: u64, ctx: &mut impl Context) {
        let Some(timer) = SwitchTimer::of(token) else {
            return;
        };
        let now = ctx.now();
        match timer {
            SwitchTimer::Reroute(i) => {
                if let Some((_, table)) = self.reroutes.get_mut(i) {
                    self.routes = std::mem::take(table);
                    self.failed_over = true;
                }
            }
            SwitchTimer::Wake(port) if port < self.lanes.len() => {
                self.wake_at[port] = None;
                self.start_tx(port, ctx);
            }
            // A stale timer of a pause since reloaded or ended: ignored.
            SwitchTimer::Resume(port, prio)
                if port < self.lanes.len()
                    && self.flags[port].paused & (1 << prio) != 0
                    && self.pfc[port].paused_until[usize::from(prio)] == now
                    && self.resume(port, prio, now) =>
            {
                self.start_tx(port, ctx);
            }
            SwitchTimer::Refresh(port) if port < self.lanes.len() => {
                if self.pfc[port].refresh_at != Some(now) {
                    return;
                }
                let quanta = self.cfg.pfc.quanta.max(1);
                let st = &mut self.pfc[port];
                st.refresh_at = None;
                if st.xoff != 0 {
                    self.flags[port].pending |= st.xoff;
                    let t = now.add(Time((st.pause_time(quanta).ps() / 2).max(1)));
                    st.refresh_at = Some(t);
                    ctx.set_timer(t, SwitchTimer::Refresh(port).token());
                    self.start_tx(port, ctx);
                }
            }
            SwitchTimer::Watchdog(port, prio) if port < self.lanes.len() => {
                let timeout = self.cfg.pfc.deadlock_timeout;
                if self.watch[port].check(prio, now, timeout) {
                    self.stats.deadlock_detected_at.get_or_insert(now);
                    // A deadlock never clears: stop the run (the root names the cycle of
                    // paused ports from `stalled()` and the wiring, and exits 3).
                    ctx.halt();
                }
            }
            _ => {}
        }
    }
}
