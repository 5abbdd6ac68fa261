//! The training iteration's breakdown as a plot (`breakdown.png`, `breakdown.svg`): one
//! stacked bar per rank, so stragglers, pipeline bubbles and exposed communication show at a
//! glance.
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
use crate::training::TrainingReport;

/// The parts of a bar, bottom first: legend and colour.
const PARTS: [(&str, RGBColor); 4] = [
    ("compute alone", RGBColor(31, 119, 180)),
    ("compute, communication hidden", RGBColor(44, 160, 44)),
    ("exposed communication", RGBColor(214, 39, 40)),
    ("idle", RGBColor(200, 200, 200)),
];

/// Per rank, the heights of its parts in picoseconds (see the module doc).
pub fn bar_parts(t: &TrainingReport) -> Vec<(usize, [u64; 4])> {
    t.per_rank
        .iter()
        .map(|r| {
            let b = &r.breakdown;
            let hidden = b.hidden_comm_ps.min(b.compute_ps);
            (
                r.rank,
                [b.compute_ps - hidden, hidden, b.exposed_comm_ps, b.idle_ps],
            )
        })
        .collect()
}

/// Writes `base.png` and `base.svg` with the breakdown of `t`.
pub fn breakdown_chart(base: &Path, t: &TrainingReport) -> Result<(), ObserveError> {
    let text = has_font();
    let bars = bar_parts(t);
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
        |r| draw(r, &title, &bars, (top, unit), text),
        |r| draw(r, &title, &bars, (top, unit), text),
    )
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    bars: &[(usize, [u64; 4])],
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
    let n = bars.len().max(1) as f64;
    // Room above the bars for the legend.
    let y_max = (top as f64 / t_div).max(1e-6) * if text { 1.3 } else { 1.02 };
    let mut chart = b.build_cartesian_2d(0f64..n, 0f64..y_max).map_err(e)?;
    if text {
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_desc("rank")
            .y_desc(format!("time ({t_unit})"))
            .x_label_formatter(&|v| format!("{}", v.floor() as u64))
            .y_label_formatter(&tick)
            .draw()
            .map_err(e)?;
    }
    // Narrow gaps between bars while they are wide enough to show them.
    let gap = if bars.len() <= 64 { 0.1 } else { 0.0 };
    for (k, &(name, color)) in PARTS.iter().enumerate() {
        let rects = bars.iter().enumerate().map(|(x, (_, parts))| {
            let below: u64 = parts[..k].iter().sum();
            let (lo, hi) = (below as f64 / t_div, (below + parts[k]) as f64 / t_div);
            let x = x as f64;
            Rectangle::new([(x + gap, lo), (x + 1.0 - gap, hi)], color.filled())
        });
        let drawn = chart.draw_series(rects).map_err(e)?;
        if text {
            drawn.label(name).legend(move |(px, py)| {
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
