//! The training iteration's breakdown as a plot (`breakdown.png`, `breakdown.svg`): one
//! stacked bar per rank, so stragglers, pipeline bubbles and exposed communication show at a
//! glance; the exposed communication is split by kind (tp, ep, pp, dp for the built-in model,
//! collective and p2p for a Chakra trace), as in the report.
//!
//! A rank's bar is its iteration time split into parts that do not overlap, so the bars are
//! as tall as the iteration: compute with nothing communicating, compute while communication
//! runs beside it (the communication hidden by overlap), communication while the compute
//! stream is idle (exposed), and idle (dependencies, bubbles, waiting for the last rank).
//! The report's `compute_ps` is the first two together.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::plot::{both, has_font, tick, time_unit};
use super::ObserveError;
use crate::training::{RankBreakdown, TrainingReport, KIND_ORDER};

/// A bar's parts below the exposed communication: legend and colour.
const COMPUTE: [(&str, RGBColor); 2] = [
    ("compute alone", RGBColor(31, 119, 180)),
    ("compute, communication hidden", RGBColor(44, 160, 44)),
];
/// Exposed communication by kind ([`KIND_ORDER`]), warm colours.
const KIND_COLORS: [RGBColor; 6] = [
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(188, 189, 34),
];
/// Exposed communication of no kind, and idle time.
const OTHER: RGBColor = RGBColor(120, 20, 20);
const IDLE: (&str, RGBColor) = ("idle", RGBColor(200, 200, 200));

/// A bar's parts, bottom first: legend and colour.
pub type Parts = Vec<(String, RGBColor)>;

/// The parts of the bars (compute alone, hidden, exposed communication by each kind any
/// rank has, exposed communication of no kind if any, idle) and per rank their heights in
/// picoseconds (see the module doc).
pub fn bar_parts(t: &TrainingReport) -> (Parts, Vec<(usize, Vec<u64>)>) {
    let kinds: Vec<usize> = (0..KIND_ORDER.len())
        .filter(|&k| {
            t.per_rank
                .iter()
                .flat_map(|r| &r.exposed_by_kind)
                .any(|e| e.kind == KIND_ORDER[k] && e.exposed_ps > 0)
        })
        .collect();
    let of_kind = |r: &RankBreakdown, k: usize| {
        r.exposed_by_kind
            .iter()
            .filter(|e| e.kind == KIND_ORDER[k])
            .map(|e| e.exposed_ps)
            .sum::<u64>()
    };
    let rest = |r: &RankBreakdown| {
        let by_kind: u64 = kinds.iter().map(|&k| of_kind(r, k)).sum();
        r.breakdown.exposed_comm_ps.saturating_sub(by_kind)
    };
    let mut parts: Parts = COMPUTE.iter().map(|(n, c)| (n.to_string(), *c)).collect();
    for &k in &kinds {
        parts.push((format!("exposed {}", KIND_ORDER[k]), KIND_COLORS[k]));
    }
    let any_rest = t.per_rank.iter().any(|r| rest(r) > 0);
    if any_rest {
        let name = if kinds.is_empty() {
            "exposed communication"
        } else {
            "exposed, other"
        };
        parts.push((name.to_string(), OTHER));
    }
    parts.push((IDLE.0.to_string(), IDLE.1));
    let bars = t
        .per_rank
        .iter()
        .map(|r| {
            let b = &r.breakdown;
            let hidden = b.hidden_comm_ps.min(b.compute_ps);
            let mut h = vec![b.compute_ps - hidden, hidden];
            h.extend(kinds.iter().map(|&k| of_kind(r, k)));
            if any_rest {
                h.push(rest(r));
            }
            h.push(b.idle_ps);
            (r.rank, h)
        })
        .collect();
    (parts, bars)
}

/// Writes `base.png` and `base.svg` with the breakdown of `t`.
pub fn breakdown_chart(base: &Path, t: &TrainingReport) -> Result<(), ObserveError> {
    let text = has_font();
    let (parts, bars) = bar_parts(t);
    let top = bars
        .iter()
        .map(|(_, p)| p.iter().sum::<u64>())
        .max()
        .unwrap_or(0);
    let unit = time_unit(top);
    let title = format!(
        "Iteration breakdown per rank ({} ranks{})",
        t.ranks,
        t.iteration_time_ps.map_or_else(String::new, |ps| {
            let (div, unit) = time_unit(ps);
            format!(", iteration {} {unit}", tick(&(ps as f64 / div)))
        })
    );
    both(
        base,
        |r| draw(r, &title, (&parts, &bars), (top, unit), text),
        |r| draw(r, &title, (&parts, &bars), (top, unit), text),
    )
}

/// The x axis of `n` bars: bar `i` is centred on `i`, so the axis' integer ticks fall on bar
/// centres and none lies past the last bar.
fn x_range(n: usize) -> std::ops::Range<f64> {
    -0.5..n.max(1) as f64 - 0.5
}

/// How many x ticks to ask for: one per bar while they fit, else plotters picks a round step
/// (1, 2, 5, 10, ...) so that at most this many show. Never more than the bars, so the step
/// is never below one bar and no tick falls between two bars.
fn x_labels(n: usize) -> usize {
    n.clamp(1, 32)
}

/// The label of the x tick at `v`: the rank of the bar centred there, or nothing for a
/// position that is not a bar's centre.
fn rank_label(bars: &[(usize, Vec<u64>)], v: f64) -> String {
    let i = v.round();
    if (v - i).abs() > 1e-9 || i < 0.0 {
        return String::new();
    }
    bars.get(i as usize)
        .map_or_else(String::new, |(rank, _)| rank.to_string())
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    (parts, bars): (&Parts, &[(usize, Vec<u64>)]),
    (top, (t_div, t_unit)): (u64, (f64, &str)),
    text: bool,
) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(e)?;
    let mut b = ChartBuilder::on(root);
    b.margin(15);
    if text {
        b.caption(title, ("sans-serif", 22))
            .x_label_area_size(45)
            .y_label_area_size(80);
    }
    // Room above the bars for the legend.
    let y_max = (top as f64 / t_div).max(1e-6) * if text { 1.3 } else { 1.02 };
    let mut chart = b
        .build_cartesian_2d(x_range(bars.len()), 0f64..y_max)
        .map_err(e)?;
    if text {
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_desc("rank")
            .y_desc(format!("time ({t_unit})"))
            .x_labels(x_labels(bars.len()))
            .x_label_formatter(&|v| rank_label(bars, *v))
            .y_label_formatter(&tick)
            .draw()
            .map_err(e)?;
    }
    // Narrow gaps between bars while they are wide enough to show them.
    let gap = if bars.len() <= 64 { 0.1 } else { 0.0 };
    for (k, (name, color)) in parts.iter().enumerate() {
        let color = *color;
        let rects = bars.iter().enumerate().map(|(x, (_, parts))| {
            let below: u64 = parts[..k].iter().sum();
            let (lo, hi) = (below as f64 / t_div, (below + parts[k]) as f64 / t_div);
            let x = x as f64;
            Rectangle::new([(x - 0.5 + gap, lo), (x + 0.5 - gap, hi)], color.filled())
        });
        let drawn = chart.draw_series(rects).map_err(e)?;
        if text {
            drawn.label(name.as_str()).legend(move |(px, py)| {
                Rectangle::new([(px, py - 5), (px + 16, py + 5)], color.filled())
            });
        }
    }
    if text {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(e)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use plotters::coord::ranged1d::Ranged;
    use plotters::coord::types::RangedCoordf64;

    /// The ticks plotters draws on the x axis of `n` bars, with their labels.
    fn ticks(n: usize) -> Vec<(f64, String)> {
        let bars: Vec<(usize, Vec<u64>)> = (0..n).map(|r| (r, vec![1, 0, 0, 0])).collect();
        let axis: RangedCoordf64 = x_range(n).into();
        axis.key_points(x_labels(n))
            .into_iter()
            .map(|v| (v, rank_label(&bars, v)))
            .collect()
    }

    #[test]
    fn one_label_per_rank_and_none_past_the_last_bar() {
        for n in [1, 2, 3, 4, 7, 8, 16, 32] {
            let labels: Vec<String> = ticks(n).into_iter().map(|(_, l)| l).collect();
            let want: Vec<String> = (0..n).map(|r| r.to_string()).collect();
            assert_eq!(labels, want, "{n} ranks");
        }
    }

    #[test]
    fn many_ranks_get_whole_rank_ticks_on_bar_centres() {
        for n in [33, 64, 100, 1000, 1024, 4096] {
            let t = ticks(n);
            assert!(
                t.len() >= 2 && t.len() <= x_labels(n),
                "{n}: {} ticks",
                t.len()
            );
            let mut seen = std::collections::BTreeSet::new();
            for (v, l) in t {
                assert!(
                    v >= 0.0 && v <= (n - 1) as f64,
                    "{n}: tick {v} off the bars"
                );
                assert_eq!(l, format!("{}", v as usize), "{n}: tick {v}");
                assert!(seen.insert(l), "{n}: a label twice");
            }
        }
    }

    #[test]
    fn labels_name_the_rank_not_the_position() {
        let bars = [(4, vec![1, 0, 0, 0]), (9, vec![1, 0, 0, 0])];
        assert_eq!(rank_label(&bars, 0.0), "4");
        assert_eq!(rank_label(&bars, 1.0), "9");
        assert_eq!(rank_label(&bars, 0.5), "");
        assert_eq!(rank_label(&bars, 2.0), "");
        assert_eq!(rank_label(&bars, -1.0), "");
    }
}
