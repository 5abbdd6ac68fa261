//! DCQCN's reaction point on the NIC: a CNP cuts the QP's rate, the rate-increase timer
//! raises it again (the algorithm itself is in [`super::dcqcn`]).

use super::*;

impl Nic {
    /// Reaction point: a CNP from `src` for QP number `qpn` cuts the rate of that QP.
    pub(super) fn on_cnp(&mut self, src: u32, qpn: u32, ctx: &mut impl Context) {
        self.stats.cnps_received += 1;
        let Some(d) = self.cfg.cc.dcqcn() else {
            return;
        };
        let Some(&i) = self.reception.qp_index.get(&qp_key(src, qpn_class(qpn))) else {
            return;
        };
        let i = i as usize;
        let (Some(qp), Some(QpCc::Dcqcn { rp, .. })) = (self.qps.get(i), self.qp_cc.get_mut(i))
        else {
            return;
        };
        let Some(line) = ctx
            .channel(qp.port())
            .map(|c| c.rate.bandwidth().bps() as f64)
        else {
            return;
        };
        rp.on_cnp(d, line, ctx.now());
        self.stats.rate_decreases += 1;
        if !rp.timer_armed {
            rp.timer_armed = true;
            ctx.set_timer(rp.timer_deadline, HostTimer::Rate(i).token());
        }
    }

    /// DCQCN's rate-increase timer of QP `i` fired (possibly stale: the deadline moves on
    /// every CNP, and one pending event per QP follows it).
    pub(super) fn on_rate_timer(&mut self, i: usize, ctx: &mut impl Context) {
        let Some(d) = self.cfg.cc.dcqcn() else {
            return;
        };
        let (Some(qp), Some(QpCc::Dcqcn { rp, .. })) = (self.qps.get(i), self.qp_cc.get_mut(i))
        else {
            return;
        };
        rp.timer_armed = false;
        if !rp.limited() {
            return;
        }
        let now = ctx.now();
        if now >= rp.timer_deadline {
            let Some(line) = ctx
                .channel(qp.port())
                .map(|c| c.rate.bandwidth().bps() as f64)
            else {
                return;
            };
            if !rp.on_timer(d, line, now) {
                return;
            }
        }
        rp.timer_armed = true;
        ctx.set_timer(rp.timer_deadline, HostTimer::Rate(i).token());
    }
}
