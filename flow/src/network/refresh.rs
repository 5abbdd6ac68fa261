//! The refresh: recomputing the rates a batch of starts, finishes and reservation changes can
//! move, in rounds until no reservation moves any more ("How a step works" in the parent
//! module): each perturbed link's threshold, the region of flows at or above it, their
//! filling (in closed form for a flow alone on its links), and the rates, loads,
//! reservations and projected finishes that follow.

use super::{
    reservation_moved, round_tag, settle_link, sync_reservation, touch_reservation, Entry,
    FlowNetwork, MAX_RESERVATION_ROUNDS, NO_BIND, PS_PER_S_F, RESERVATION_EPSILON,
};

impl FlowNetwork {
    /// Recomputes the rates of every component that holds a dirty flow or link, in rounds until
    /// no reservation changes any more (see [`FlowNetwork::start_with_acks`]).
    pub(super) fn refresh(&mut self) {
        self.rounds = 0;
        self.refreshes = self.refreshes.wrapping_add(1);
        // The links whose last flow left since the last refresh and that are still without
        // one: what the refresh does to such a link but their finish did (see `emptied`).
        for &l in &self.emptied {
            let flag = &mut self.emptied_flag[l as usize];
            if *flag {
                *flag = false;
                self.removed_max[l as usize] = 0.0;
            }
        }
        self.emptied.clear();
        loop {
            self.apply_reservations();
            if self.dirty_flows.is_empty() && self.dirty_links.is_empty() {
                break;
            }
            self.refresh_round();
            self.rounds += 1;
        }
        self.project_finishes();
        self.compact_finishes();
    }

    /// Lets every link whose reservations changed since the last call apply their sum where
    /// `reservation_moved` says so, marking it dirty then. Checked once per round, after all of
    /// its updates (and once after a batch of finishes), not after each flow's: checked per
    /// update, a link would apply whichever partial sum first crossed the slack, which depends on
    /// the order its flows were filled in, so that links alike in every way would offer
    /// capacities apart by up to the slack.
    fn apply_reservations(&mut self) {
        let mut touched = std::mem::take(&mut self.res_touched);
        for &l in &touched {
            let link = &mut self.links[l as usize];
            link.res_touched = false;
            self.unchecked[l as usize] = false;
            if reservation_moved(link) && !link.dirty {
                link.dirty = true;
                self.dirty_links.push(l);
            }
        }
        touched.clear();
        self.res_touched = touched;
    }

    /// One round of [`FlowNetwork::refresh`]: every region around a perturbed link, once.
    ///
    /// A link is *perturbed* when a flow started on it or left it, or its capacity moved (a
    /// reservation). Each perturbed link gets a threshold (`FlowNetwork::threshold`) below
    /// which the progressive filling of the new problem freezes the same flows at the same
    /// levels as the last one; its region is what a search from it reaches through flows at or
    /// above the threshold, and only those flows are refilled. Links are taken by rising
    /// threshold: a region found at a lower threshold contains every region it touches at a
    /// higher one (a flow at or above the higher threshold is at or above the lower), so a link
    /// already reached is done.
    fn refresh_round(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            // After 2^32 refreshes: clear the marks so an old mark cannot look current.
            self.links.iter_mut().for_each(|l| {
                l.mark = 0;
                l.pmark = 0;
            });
            self.flow_mark.iter_mut().for_each(|m| *m = 0);
            // 2, not 1: the flows listed for this round carry the tag of epoch 0.
            self.epoch = 2;
        }
        let epoch = self.epoch;
        let tag = round_tag(epoch);
        let mut dirty_flows = std::mem::take(&mut self.dirty_flows);
        let mut dirty_links = std::mem::take(&mut self.dirty_links);
        // Links' flags down and reservations synced first (no link is marked dirty during a
        // round: only between rounds, by `apply_reservations`). The links a start touched were
        // synced at the start (`start_with_acks`), the links a finish left here: a filling sees
        // the capacities of this round only. A link that carries no flow (listed for its
        // reservations; one its last flow left is not listed, see `FlowNetwork::emptied`) is
        // done here too, and only the others stay listed: nothing in the round reaches a link
        // without flows, and settling it before a reserving flow's filling settles it again at
        // the same time gives the same bits as after (the second settling adds nothing).
        let mut kept = 0;
        for k in 0..dirty_links.len() {
            let l = dirty_links[k];
            let link = &mut self.links[l as usize];
            link.dirty = false;
            sync_reservation(link);
            if link.flows.is_empty() {
                link.mark = epoch;
                self.removed_max[l as usize] = 0.0;
                if link.load != 0.0 {
                    settle_link(link, self.now);
                    link.load = 0.0;
                }
            } else {
                dirty_links[kept] = l;
                kept += 1;
            }
        }
        dirty_links.truncate(kept);
        let mut pert = std::mem::take(&mut self.pert);
        pert.clear();
        for &slot in &dirty_flows {
            let flow = &mut self.flows[slot as usize];
            // Its flag goes down as the round reaches it, unless this round already listed it
            // for the next one (`round_tag`).
            if flow.dirty == tag {
                flow.dirty = 0;
            }
            if !flow.active || self.flow_mark[slot as usize] == epoch {
                continue;
            }
            if flow.n_use == 0 {
                // Only its cap bounds it: a region of its own.
                let cap = flow.cap;
                self.set_rate(slot, cap);
                continue;
            }
            if self.fill_alone(slot) {
                continue;
            }
            let flow = &self.flows[slot as usize];
            for &Entry { link: l, .. } in flow.usage() {
                let link = &mut self.links[l as usize];
                link.new_cap = link.new_cap.min(flow.cap);
                if link.pmark != epoch {
                    link.pmark = epoch;
                    pert.push((0.0, l));
                }
            }
        }
        for &l in &dirty_links {
            let link = &mut self.links[l as usize];
            if link.pmark == epoch || link.mark == epoch {
                continue;
            }
            // Every link left here carries a flow (the others were done above).
            if let [(g, _)] = link.flows[..] {
                if self.flow_mark[g as usize] == epoch
                    || self.keeps_rate(l, g)
                    || self.fill_alone(g)
                {
                    continue;
                }
            }
            let link = &mut self.links[l as usize];
            link.pmark = epoch;
            pert.push((0.0, l));
        }
        for p in pert.iter_mut() {
            p.0 = self.threshold(p.1);
        }
        // Thresholds are >= 0 (or +inf): their bits order like their values.
        pert.sort_unstable_by_key(|&(t, l)| (t.to_bits(), l));
        for &(theta, l) in &pert {
            if self.links[l as usize].mark == epoch {
                continue;
            }
            self.collect_region(l, theta);
            self.fill_region(if theta < f64::INFINITY { theta } else { 0.0 });
        }
        self.pert = pert;
        // Keep the larger buffers; the lists of the next round (if any) are in `self`.
        dirty_flows.clear();
        dirty_links.clear();
        if self.dirty_flows.is_empty() {
            self.dirty_flows = dirty_flows;
        }
        if self.dirty_links.is_empty() {
            self.dirty_links = dirty_links;
        }
    }

    /// Fills flow `slot` at once if it is a connected component of its own (each of its links
    /// carries it alone: a ring's flows, once ACKs reserve instead of sharing), marking it and
    /// its links as done; false (nothing done) otherwise. Alone, its filling needs no threshold:
    /// nothing else can move.
    fn fill_alone(&mut self, slot: u32) -> bool {
        let epoch = self.epoch;
        let flow = &self.flows[slot as usize];
        // `fill_single` at floor 0, its levels computed while checking that the flow is alone
        // (one pass over the links where there were three: this is every filling of a ring),
        // computed the same way.
        let mut rate = flow.cap;
        let mut bind = NO_BIND;
        for &Entry { link: l, w, .. } in flow.usage() {
            let link = &self.links[l as usize];
            if link.flows.len() != 1 {
                return false;
            }
            // Its base is 0 (no other flow): `C - 0` is `C`, bit for bit.
            let level = link.data_capacity() / w;
            // `<` skips a NaN level, as the filling turns it into the floor.
            if level < rate {
                rate = level;
                bind = l;
            }
        }
        self.flow_mark[slot as usize] = epoch;
        if rate.is_nan() || rate < 0.0 {
            rate = 0.0;
            bind = NO_BIND;
        }
        self.set_rate(slot, rate);
        self.solo[slot as usize].bind = bind;
        let now = self.now;
        let (flows, links, removed_max) = (&self.flows, &mut self.links, &mut self.removed_max);
        for &Entry { link: l, w, .. } in flows[slot as usize].usage() {
            // Marked after `set_rate`, which reads none of these.
            removed_max[l as usize] = 0.0;
            let link = &mut links[l as usize];
            link.mark = epoch;
            link.new_cap = f64::INFINITY;
            // `0 + w r` is `w r` bit for bit: `w r` is not -0 (w > 0, rate >= 0).
            let load = w * rate;
            if load.to_bits() != link.load.to_bits() {
                settle_link(link, now);
                link.load = load;
            }
        }
        true
    }

    /// Whether refilling flow `g`, the lone flow of dirty link `l`, would leave everything as it
    /// is, so that it is skipped (and `l`'s refresh scratch reset, as the filling would): `g`
    /// was last filled alone (`fill_alone`) and is still alone, its rate was set by another link
    /// or its cap, `l`'s level is not below that rate now, and `l`'s load is already the one the
    /// filling would set (no flow left it since). Then the smallest level of `g`'s links (the
    /// links other than `l` did not move, or they are dirty and checked on their own) is the same
    /// value, so `fill_alone` would give the same bits and set the same loads; and `set_rate` at
    /// an unchanged rate moves nothing while no reservation was left off by the round limit.
    /// Where a neighbour's ACK reservation moves on the link that does not bound a ring's flow,
    /// this skips a quarter of the ring's fillings.
    fn keeps_rate(&mut self, l: u32, g: u32) -> bool {
        let solo = self.solo[g as usize];
        if solo.shared != 0 || solo.bind == NO_BIND || solo.bind == l || self.res_capped {
            return false;
        }
        let r = self.fill_rate[g as usize];
        let link = &mut self.links[l as usize];
        let w = link.flows[0].1;
        if link.data_capacity() / w < r || link.load.to_bits() != (w * r).to_bits() {
            return false;
        }
        link.new_cap = f64::INFINITY;
        self.removed_max[l as usize] = 0.0;
        true
    }

    /// The threshold of perturbed link `l`: a level below which the filling of the new problem
    /// (flows, weights and capacities as they are now) freezes exactly the flows the last
    /// filling froze there, at the same rates; resets the link's per-refresh scratch.
    ///
    /// Progressive filling is a process in the level `x`: below a level at which no perturbed
    /// link saturates, in the last problem or in the new one, the same links saturate in the
    /// same order and freeze the same flows. In the last filling, `l` saturated (if it did) at
    /// the largest rate of its flows, the removed ones included: at least `old_max`. In the new
    /// one, with the flows below the threshold at their last rates and the new flows unfrozen,
    /// its load at level `y` is `sum w min(r, y) + W_new y`, which rises with `y`: it saturates
    /// where that reaches its capacity. The threshold is the smaller of the two (and of the
    /// caps of new flows, which freeze a flow by themselves), 0 for a full recomputation.
    fn threshold(&mut self, l: u32) -> f64 {
        let mut old_max = std::mem::take(&mut self.removed_max[l as usize]);
        let link = &mut self.links[l as usize];
        let new_cap = link.new_cap;
        link.new_cap = f64::INFINITY;
        if self.full {
            return 0.0;
        }
        let link = &self.links[l as usize];
        let c = link.data_capacity();
        let mut w_new = 0.0;
        self.rates_scratch.clear();
        for &(g, w) in &link.flows {
            let r = self.fill_rate[g as usize];
            if r < f64::INFINITY {
                old_max = old_max.max(r);
                self.rates_scratch.push((r, w));
            } else {
                w_new += w;
            }
        }
        let theta = if old_max > 0.0 {
            old_max
        } else {
            f64::INFINITY
        }
        .min(new_cap);
        if theta < f64::INFINITY {
            let mut load = w_new * theta;
            for &(r, w) in &self.rates_scratch {
                load += w * r.min(theta);
            }
            if load <= c {
                return theta;
            }
        } else if w_new == 0.0 {
            return theta;
        }
        // Where the new load reaches the capacity: walk the rates upwards, the flows below
        // the candidate level at their rates, the others (and the new ones) at the level.
        self.rates_scratch
            .sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
        let mut low = 0.0;
        let mut high = w_new;
        for &(_, w) in &self.rates_scratch {
            high += w;
        }
        let mut y = f64::INFINITY;
        for &(r, w) in &self.rates_scratch {
            let at = (c - low) / high;
            if at <= r {
                y = at;
                break;
            }
            low += w * r;
            high -= w;
        }
        if y == f64::INFINITY && w_new > 0.0 {
            y = (c - low) / w_new;
        }
        // `max` also turns a NaN (a weight sum worn down to nothing) into 0: a full region.
        theta.min(y).max(0.0)
    }

    /// Collects into `comp_flows` and `comp_links` the region of link `start` at threshold
    /// `theta`: the flows at or above it (and the new ones) reachable from `start` through
    /// links and such flows, and their links; each link's `base` is the load of its flows
    /// below the threshold (summed in the link's order, which is deterministic).
    fn collect_region(&mut self, start: u32, theta: f64) {
        let epoch = self.epoch;
        self.comp_flows.clear();
        self.comp_links.clear();
        self.links[start as usize].mark = epoch;
        self.comp_links.push(start);
        let mut next = 0;
        while next < self.comp_links.len() {
            let l = self.comp_links[next] as usize;
            next += 1;
            let mut base = 0.0;
            for k in 0..self.links[l].flows.len() {
                let (g, w) = self.links[l].flows[k];
                let r = self.fill_rate[g as usize];
                if r < theta {
                    base += w * r;
                    continue;
                }
                let mark = &mut self.flow_mark[g as usize];
                if *mark == epoch {
                    continue;
                }
                *mark = epoch;
                self.comp_flows.push(g);
                for &Entry { link: l2, .. } in self.flows[g as usize].usage() {
                    let link = &mut self.links[l2 as usize];
                    if link.mark != epoch {
                        link.mark = epoch;
                        self.comp_links.push(l2);
                    }
                }
            }
            self.link_base[l] = base;
        }
    }

    /// Fills the collected region in canonical order (flows by slot, links by index), each
    /// link offering its data capacity less its `base`, the level starting at `floor` (the
    /// region's threshold), and applies the rates and loads that changed.
    fn fill_region(&mut self, floor: f64) {
        match self.comp_flows.len() {
            0 => {
                for i in 0..self.comp_links.len() {
                    let l = self.comp_links[i];
                    self.set_load(l, self.link_base[l as usize]);
                }
            }
            1 => self.fill_single(floor),
            _ => {
                self.comp_flows.sort_unstable();
                self.comp_links.sort_unstable();
                let filler = &mut self.filler;
                filler.clear();
                for (i, &l) in self.comp_links.iter().enumerate() {
                    self.link_local[l as usize] = i as u32;
                    let link = &self.links[l as usize];
                    filler.add_link(link.data_capacity() - self.link_base[l as usize]);
                }
                for &f in &self.comp_flows {
                    let flow = &self.flows[f as usize];
                    for &Entry { link: l, w, .. } in flow.usage() {
                        // Usage is sorted by link id, and local ids preserve that order.
                        filler.push_use(self.link_local[l as usize], w);
                    }
                    filler.end_flow(flow.cap);
                }
                filler.solve_from(floor);
                for i in 0..self.comp_flows.len() {
                    self.set_rate(self.comp_flows[i], self.filler.rate(i));
                }
                for i in 0..self.comp_links.len() {
                    let l = self.comp_links[i];
                    let load = self.link_base[l as usize] + self.filler.load(i);
                    self.set_load(l, load);
                }
            }
        }
    }

    /// [`FlowNetwork::fill_region`] of a region of one flow (a ring's flows, once ACKs
    /// reserve instead of sharing): the filling's result without its heap. Alone, the flow
    /// freezes at the smallest of its links' levels `(C_l - base_l) / w_l` (computed as the
    /// filling does, its load starting at 0) and its cap, never below `floor`, and loads each
    /// link with `base_l + w_l * rate`: bit for bit what [`Filler::solve_from`] gives.
    fn fill_single(&mut self, floor: f64) {
        let f = self.comp_flows[0] as usize;
        let mut rate = self.flows[f].cap;
        for &Entry { link: l, w, .. } in self.flows[f].usage() {
            let link = &self.links[l as usize];
            let level = (link.data_capacity() - self.link_base[l as usize]) / w;
            // `<` skips a NaN level, as the filling turns it into the floor.
            if level < rate {
                rate = level;
            }
        }
        if rate.is_nan() || rate < floor {
            rate = floor;
        }
        self.set_rate(f as u32, rate);
        for k in 0..usize::from(self.flows[f].n_use) {
            let Entry { link: l, w, .. } = self.flows[f].usage()[k];
            let load = self.link_base[l as usize] + w * rate;
            self.set_load(l, load);
        }
    }

    /// Sets link `l`'s load from a filling, settling its carried bytes if it changed.
    fn set_load(&mut self, l: u32, load: f64) {
        let link = &mut self.links[l as usize];
        if load.to_bits() != link.load.to_bits() {
            settle_link(link, self.now);
            link.load = load;
        }
    }

    /// Gives flow `f` its newly filled rate: settles its progress, projects its finish and
    /// updates its reservations when the rate moved beyond [`RESERVATION_EPSILON`].
    fn set_rate(&mut self, f: u32, rate: f64) {
        let now = self.now;
        self.fill_rate[f as usize] = rate;
        // `Solo::bind` is not reset here: only `fill_alone` fills a flow whose `shared` is 0,
        // and `bind` is forgotten whenever `shared` moves, so a `bind` that `keeps_rate` reads
        // (at `shared` 0) is always its last filling's. Writing it here cost a million-flow
        // all-to-all a cache line per filling (8 bytes a flow, written at random).
        let flow = &mut self.flows[f as usize];
        let changed = rate.to_bits() != flow.rate.to_bits();
        // A damped reservation (below) may still be off at an unchanged rate.
        if !changed && !flow.reserves() {
            return;
        }
        let old = flow.rate;
        if changed {
            let sent = flow.rate * (now - flow.last_change) as f64 / PS_PER_S_F;
            flow.remaining = (flow.remaining - sent).max(0.0);
            flow.last_change = now;
            flow.rate = rate;
        }
        if flow.reserves() {
            let rho = flow.reserved_rate;
            let miss = rate - rho;
            let off = miss.abs() > RESERVATION_EPSILON * rho;
            let update = self.rounds < MAX_RESERVATION_ROUNDS && off;
            if off && !update {
                self.res_capped = true;
            }
            if !changed && !update {
                // Neither the rate nor its reservations move: nothing below has work to do
                // (a quarter of the fillings on a ring, whose neighbours' refills often give the
                // same rate again).
                return;
            }
            // The rate the reservations move to: the new rate, unless the updates of this
            // refresh overshoot. A reservation feeds back on its own flow's rate through the
            // flows on its link, and the gain `g` of that loop (the flow's rate falls by `g` per
            // unit of reserved rate) is not always small: a flow with a small weight on a link
            // it shares with a flow the reservation slows takes what that flow frees at the
            // ratio of their weights (2.5 to 1/32 in the case the property test found, which
            // turned an ACK weight of 0.082 into g = 1.9). Set at each new rate, a reservation
            // with g > 1 swings between two rates for ever and never meets its flow's ACK load.
            // A miss of the other sign than the last one and not at least halved is such an
            // overshoot: from then on only half as large a share `s` of each miss is applied.
            // The miss then shrinks by `1 - s (1 + g)` per round, and `s` is halved until that
            // is below 1/2 in size. A miss of the same sign and not at least halved is a crawl
            // (a loop gain near +1, or damped too much once coupled flows moved): `s` doubles
            // back towards 1, as the plain update converges there. With g small (the usual ACK
            // ratio), every miss is far below half the last one and the updates are the plain
            // ones, bit for bit.
            let mut target = rate;
            if update {
                let damp = &mut self.damp[f as usize];
                if damp.refresh != self.refreshes {
                    damp.refresh = self.refreshes;
                    damp.miss = 0.0;
                    damp.gain = 1.0;
                }
                if miss.abs() > 0.5 * damp.miss.abs() {
                    if miss * damp.miss < 0.0 {
                        damp.gain *= 0.5;
                    } else if damp.gain < 1.0 {
                        // Crawling the same way: damped too much (or no longer needed).
                        damp.gain = (damp.gain * 2.0).min(1.0);
                    }
                }
                damp.miss = miss;
                if damp.gain < 1.0 {
                    target = rho + damp.gain * miss;
                }
            }
            for &Entry { link: l, w: a, .. } in flow.reserve() {
                let link = &mut self.links[l as usize];
                if changed {
                    settle_link(link, now);
                    link.ack_load += a * (rate - old);
                }
                if update {
                    link.reserved += a * (target - rho);
                    touch_reservation(link, l, &mut self.res_touched);
                }
            }
            if update {
                flow.reserved_rate = target;
                // Damped, the reservation is still off: refill the flow next round even if no
                // link of its own moves, so that the next share of the miss is applied.
                let tag = round_tag(self.epoch.wrapping_add(1));
                if target.to_bits() != rate.to_bits() && flow.dirty != tag {
                    flow.dirty = tag;
                    self.dirty_flows.push(f);
                }
            }
        }
        if !changed {
            return;
        }
        let v = &mut self.version[f as usize];
        *v = v.wrapping_add(1);
        let flow = &mut self.flows[f as usize];
        if !flow.projecting {
            flow.projecting = true;
            self.projecting.push(f);
        }
    }

    /// Pushes the projected finish of every flow whose rate changed in the refresh that ends,
    /// once per flow at its last rate. Why at the end: the rounds of one refresh often move a
    /// rate twice or more (a start's first filling, then its reservations' feedback, and a
    /// release and a new reservation at one finish instant move its neighbours' back), and each
    /// push would leave a stale entry for a later pop. Time stands still within a refresh, so the
    /// progress settled at the last change and the finish projected from it are the same as when
    /// every change pushed.
    fn project_finishes(&mut self) {
        let now = self.now;
        for &f in &self.projecting {
            let flow = &mut self.flows[f as usize];
            flow.projecting = false;
            let rate = flow.rate;
            if flow.active && rate > 0.0 {
                let ps = crate::round_up(flow.remaining * PS_PER_S_F / rate);
                // A finish beyond u64 picoseconds is never.
                if ps < u64::MAX as f64 {
                    self.finishes
                        .push(now.saturating_add(ps as u64), f, self.version[f as usize]);
                }
            }
        }
        self.projecting.clear();
    }
}
