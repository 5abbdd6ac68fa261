//! Who last touched each element of a buffer: the data hazards of a step list in O(log s) per
//! step instead of comparing every pair of steps.
//!
//! The buffer is kept as disjoint segments, each remembering its last writer and the steps that
//! read it since. A new step must come after the last writer of everything it reads (RAW) and,
//! for everything it writes, after the readers since the last write — or the last writer itself
//! if nobody read since (WAR / WAW). Those readers already come after that writer, so the
//! writer is implied. If every step is ordered after its hazards, every pair of conflicting
//! steps is ordered (by induction along the list), which is what both
//! [`crate::program::ProgramBuilder`] (to derive dependencies) and
//! [`crate::program::validate`] (to check them) need.

use std::collections::BTreeMap;

use crate::chunk::ChunkRange;

#[derive(Clone, Debug)]
struct Seg {
    end: usize,
    writer: Option<usize>,
    readers: Vec<usize>,
}

/// Last accesses per buffer segment (see the module docs).
#[derive(Clone, Debug, Default)]
pub(crate) struct Hazards {
    /// Keyed by segment start; segments are disjoint, untouched elements have none.
    segs: BTreeMap<usize, Seg>,
}

fn bounds(r: ChunkRange) -> (usize, usize) {
    (r.offset, r.offset.saturating_add(r.len))
}

impl Hazards {
    /// Starts of the segments overlapping `[a, b)`, ascending.
    fn overlapping(&self, a: usize, b: usize) -> Vec<usize> {
        let mut out: Vec<usize> = self
            .segs
            .range(..b)
            .rev()
            .take_while(|(_, s)| s.end > a)
            .map(|(&start, _)| start)
            .collect();
        out.reverse();
        out
    }

    /// Appends to `out` the steps an access reading `reads` and writing `writes` must follow.
    pub(crate) fn conflicts(
        &self,
        reads: Option<ChunkRange>,
        writes: Option<ChunkRange>,
        out: &mut Vec<usize>,
    ) {
        for r in reads.into_iter().filter(|r| r.len > 0) {
            let (a, b) = bounds(r);
            for start in self.overlapping(a, b) {
                out.extend(self.segs[&start].writer);
            }
        }
        for w in writes.into_iter().filter(|w| w.len > 0) {
            let (a, b) = bounds(w);
            for start in self.overlapping(a, b) {
                let s = &self.segs[&start];
                if s.readers.is_empty() {
                    out.extend(s.writer);
                } else {
                    out.extend(&s.readers);
                }
            }
        }
    }

    /// Cuts the segment containing `x` (if any) in two at `x`.
    fn split_at(&mut self, x: usize) {
        let Some((&start, seg)) = self.segs.range(..x).next_back() else {
            return;
        };
        if seg.end > x {
            let tail = Seg {
                end: seg.end,
                writer: seg.writer,
                readers: seg.readers.clone(),
            };
            if let Some(s) = self.segs.get_mut(&start) {
                s.end = x;
            }
            self.segs.insert(x, tail);
        }
    }

    /// Records that `step` reads `reads` and writes `writes` (which must not overlap).
    pub(crate) fn record(
        &mut self,
        step: usize,
        reads: Option<ChunkRange>,
        writes: Option<ChunkRange>,
    ) {
        for r in reads.into_iter().filter(|r| r.len > 0) {
            let (a, b) = bounds(r);
            self.split_at(a);
            self.split_at(b);
            let mut at = a;
            for start in self.overlapping(a, b) {
                if start > at {
                    self.segs.insert(
                        at,
                        Seg {
                            end: start,
                            writer: None,
                            readers: vec![step],
                        },
                    );
                }
                if let Some(s) = self.segs.get_mut(&start) {
                    s.readers.push(step);
                    at = s.end;
                }
            }
            if at < b {
                self.segs.insert(
                    at,
                    Seg {
                        end: b,
                        writer: None,
                        readers: vec![step],
                    },
                );
            }
        }
        for w in writes.into_iter().filter(|w| w.len > 0) {
            let (a, b) = bounds(w);
            self.split_at(a);
            self.split_at(b);
            for start in self.overlapping(a, b) {
                self.segs.remove(&start);
            }
            self.segs.insert(
                a,
                Seg {
                    end: b,
                    writer: Some(step),
                    readers: Vec::new(),
                },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(o: usize, l: usize) -> Option<ChunkRange> {
        Some(ChunkRange::new(o, l))
    }

    fn deps(h: &Hazards, reads: Option<ChunkRange>, writes: Option<ChunkRange>) -> Vec<usize> {
        let mut v = Vec::new();
        h.conflicts(reads, writes, &mut v);
        v.sort_unstable();
        v.dedup();
        v
    }

    #[test]
    fn tracks_partial_overlaps() {
        let mut h = Hazards::default();
        h.record(0, None, c(0, 10)); // write [0, 10)
        assert_eq!(deps(&h, c(5, 10), None), [0]);
        h.record(1, c(5, 10), None); // read [5, 15)
                                     // Writing [0, 6): [0, 5) was last written by 0, [5, 6) read by 1 since.
        assert_eq!(deps(&h, None, c(0, 6)), [0, 1]);
        h.record(2, None, c(0, 6));
        // Reading [4, 12): writer 2 on [4, 6), writer 0 on [6, 10), nobody on [10, 12).
        assert_eq!(deps(&h, c(4, 8), None), [0, 2]);
        // Writing [12, 14): only reader 1 touched it.
        assert_eq!(deps(&h, None, c(12, 2)), [1]);
        assert!(deps(&h, c(20, 5), c(30, 0)).is_empty());
    }
}
