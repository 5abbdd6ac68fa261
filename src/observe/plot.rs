//! Plots as PNG and SVG (plotters): series over time and the collective timeline.
//!
//! Text needs a TrueType font, and plotters is built without fontconfig (no system library
//! needed to build fabemu): the first font found among common paths (or `FABEMU_FONT`) is
//! registered once; without one the plots are still drawn, without title, axes labels or
//! legend.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::series::Table;
use super::ObserveError;

const SIZE: (u32, u32) = (1000, 560);
const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/Library/Fonts/Arial.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
    "C:\\Windows\\Fonts\\arial.ttf",
];

/// True when a font is registered and plots can carry text.
pub fn has_font() -> bool {
    static FONT: OnceLock<bool> = OnceLock::new();
    *FONT.get_or_init(|| {
        let env = std::env::var("FABEMU_FONT").ok();
        let candidates = env
            .iter()
            .map(String::as_str)
            .chain(FONT_PATHS.iter().copied());
        for path in candidates {
            if let Ok(bytes) = std::fs::read(path) {
                // Registered once per process for the rest of its life: leaking is the point.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return true;
                }
            }
        }
        tracing::warn!("no TrueType font found (set FABEMU_FONT): plots carry no text");
        false
    })
}

/// What a chart's y values are, which sets the axis' unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum YUnit {
    /// A share in [0, 1], drawn in percent.
    Share,
    /// Bytes, drawn in B, KB, MB or GB (powers of 10, as the summary counts) as they fit.
    Bytes,
    /// Bits per second, drawn in Kb/s, Mb/s or Gb/s as they fit.
    BitsPerSecond,
}

/// A chart of series over time.
pub struct LineChart<'a> {
    /// Title.
    pub title: String,
    /// What the y axis shows (its unit is added).
    pub y_label: String,
    /// The y values' unit.
    pub y_unit: YUnit,
    /// The series (time in ps on x).
    pub series: &'a Table,
    /// Fixed top of the y axis in the values' own unit (e.g. 1.0 for utilization); else the
    /// data's maximum.
    pub y_max: Option<f64>,
    /// Draw only this many series, those with the largest peaks.
    pub keep: usize,
    /// Time windows to shade behind the series, `[start, end)` in ps (fault windows).
    pub shade: &'a [(u64, u64)],
}

fn with_ext(base: &Path, ext: &str) -> PathBuf {
    let mut p = base.as_os_str().to_owned();
    p.push(".");
    p.push(ext);
    PathBuf::from(p)
}

/// Draws on a PNG and an SVG: `base` + `.png` and `.svg` (one drawing function per backend,
/// both the same generic function at the call site).
pub(super) fn both(
    base: &Path,
    draw_png: impl Fn(&DrawingArea<BitMapBackend<'_>, Shift>) -> Result<(), String>,
    draw_svg: impl Fn(&DrawingArea<SVGBackend<'_>, Shift>) -> Result<(), String>,
) -> Result<(), ObserveError> {
    let png = with_ext(base, "png");
    let fail = |path: &Path, message: String| ObserveError::Plot {
        path: path.to_path_buf(),
        message,
    };
    {
        let root = BitMapBackend::new(&png, SIZE).into_drawing_area();
        draw_png(&root).map_err(|m| fail(&png, m))?;
        root.present().map_err(|e| fail(&png, e.to_string()))?;
    }
    let svg = with_ext(base, "svg");
    let root = SVGBackend::new(&svg, SIZE).into_drawing_area();
    draw_svg(&root).map_err(|m| fail(&svg, m))?;
    root.present().map_err(|e| fail(&svg, e.to_string()))
}

/// Writes `base.png` and `base.svg` with the chart.
pub fn line_chart(base: &Path, c: &LineChart<'_>) -> Result<(), ObserveError> {
    let text = has_font();
    let mut order: Vec<usize> = (0..c.series.columns.len()).collect();
    let peak = |i: usize| c.series.columns[i].1.iter().copied().fold(0.0f64, f64::max);
    // Largest peak first; ties keep the table order (stable sort), so output is deterministic.
    order.sort_by(|&a, &b| peak(b).total_cmp(&peak(a)));
    order.truncate(c.keep);
    let (t_div, t_unit) = time_unit(c.series.times_ps.last().copied().unwrap_or(0));
    let x: Vec<f64> = c
        .series
        .times_ps
        .iter()
        .map(|&t| t as f64 / t_div)
        .collect();
    let x_max = x.last().copied().unwrap_or(0.0).max(1e-6);
    let data_max = c
        .y_max
        .unwrap_or_else(|| order.iter().map(|&i| peak(i)).fold(0.0, f64::max));
    let (y_scale, y_unit) = match c.y_unit {
        YUnit::Share => (100.0, "%"),
        YUnit::Bytes => byte_unit(data_max),
        YUnit::BitsPerSecond => rate_unit(data_max),
    };
    let y_max = (data_max * y_scale).max(1e-9) * 1.05;
    let shade: Vec<(f64, f64)> = c
        .shade
        .iter()
        .map(|&(a, b)| (a as f64 / t_div, (b as f64 / t_div).min(x_max)))
        .filter(|(a, b)| a < b)
        .collect();
    let axes = Axes {
        x_max,
        y_max,
        y_scale,
        shade,
        x_desc: format!("simulated time ({t_unit})"),
        y_desc: format!("{} ({y_unit})", c.y_label),
    };
    both(
        base,
        |r| draw_lines(r, c, &order, &x, &axes, text),
        |r| draw_lines(r, c, &order, &x, &axes, text),
    )
}

/// A line chart's axes as drawn: ranges in the drawn units, the factor from values to drawn
/// y, and the axis titles with their units.
struct Axes {
    x_max: f64,
    y_max: f64,
    y_scale: f64,
    /// Windows to shade, in the x axis' unit.
    shade: Vec<(f64, f64)>,
    x_desc: String,
    y_desc: String,
}

/// The unit a time axis ending at `max_ps` reads best in: picoseconds per unit and its name.
pub fn time_unit(max_ps: u64) -> (f64, &'static str) {
    match max_ps {
        t if t >= 1_000_000_000_000 => (1e12, "s"),
        t if t >= 1_000_000_000 => (1e9, "ms"),
        t if t >= 1_000_000 => (1e6, "us"),
        t if t >= 1_000 => (1e3, "ns"),
        _ => (1.0, "ps"),
    }
}

/// The factor and unit a byte axis reaching `max` reads best in (powers of 10).
pub fn byte_unit(max: f64) -> (f64, &'static str) {
    match max {
        m if m >= 1e10 => (1e-9, "GB"),
        m if m >= 1e7 => (1e-6, "MB"),
        m if m >= 1e4 => (1e-3, "KB"),
        _ => (1.0, "B"),
    }
}

/// The factor and unit a bit-rate axis reaching `max` bit/s reads best in.
pub fn rate_unit(max: f64) -> (f64, &'static str) {
    match max {
        m if m >= 1e10 => (1e-9, "Gb/s"),
        m if m >= 1e7 => (1e-6, "Mb/s"),
        m if m >= 1e4 => (1e-3, "Kb/s"),
        _ => (1.0, "b/s"),
    }
}

/// A tick label: the number with at most 3 decimals and no trailing zeros (`2`, not `2.0`).
pub fn tick(v: &f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_string()
    } else {
        s.to_string()
    }
}

fn draw_lines<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    c: &LineChart<'_>,
    order: &[usize],
    x: &[f64],
    axes: &Axes,
    text: bool,
) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(e)?;
    let mut b = ChartBuilder::on(root);
    b.margin(15);
    if text {
        b.caption(&c.title, ("sans-serif", 22))
            .x_label_area_size(45)
            .y_label_area_size(80);
    }
    let mut chart = b
        .build_cartesian_2d(0f64..axes.x_max, 0f64..axes.y_max)
        .map_err(e)?;
    if text {
        chart
            .configure_mesh()
            .x_desc(axes.x_desc.as_str())
            .y_desc(axes.y_desc.as_str())
            .x_label_formatter(&tick)
            .y_label_formatter(&tick)
            .draw()
            .map_err(e)?;
    }
    // Fault windows: light red bands under the lines, so what a fault did lines up with when.
    chart
        .draw_series(
            axes.shade
                .iter()
                .map(|&(a, b)| Rectangle::new([(a, 0.0), (b, axes.y_max)], RED.mix(0.12).filled())),
        )
        .map_err(e)?;
    for (n, &i) in order.iter().enumerate() {
        let (name, ys) = &c.series.columns[i];
        let color = Palette99::pick(n).to_rgba();
        let s = chart
            .draw_series(LineSeries::new(
                x.iter().copied().zip(ys.iter().map(|y| y * axes.y_scale)),
                color.stroke_width(2),
            ))
            .map_err(e)?;
        if text {
            s.label(name.as_str()).legend(move |(px, py)| {
                PathElement::new(vec![(px, py), (px + 20, py)], color.stroke_width(2))
            });
        }
    }
    if text && !order.is_empty() {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(e)?;
    }
    Ok(())
}

/// One rank's steps: (label, start ps, end ps).
pub type RankSteps = (u32, Vec<(String, u64, u64)>);

/// Writes `base.png` and `base.svg`: one row per rank, a bar per step from its start to its end
/// (colour by step position), time on x.
pub fn collective_timeline(
    base: &Path,
    title: &str,
    ranks: &[RankSteps],
) -> Result<(), ObserveError> {
    let text = has_font();
    let end = ranks
        .iter()
        .flat_map(|(_, s)| s.iter().map(|x| x.2))
        .max()
        .unwrap_or(0);
    let unit = time_unit(end);
    let x_max = (end as f64 / unit.0).max(1e-6);
    both(
        base,
        |r| draw_timeline(r, title, ranks, (x_max, unit), text),
        |r| draw_timeline(r, title, ranks, (x_max, unit), text),
    )
}

fn draw_timeline<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    ranks: &[RankSteps],
    (x_max, (t_div, t_unit)): (f64, (f64, &str)),
    text: bool,
) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(e)?;
    let n = ranks.len().max(1) as u32;
    let mut b = ChartBuilder::on(root);
    b.margin(15);
    if text {
        b.caption(title, ("sans-serif", 22))
            .x_label_area_size(45)
            .y_label_area_size(80);
    }
    // One segment per row, so each rank gets its own label at the row's centre; room on the
    // right for the legend, which would otherwise cover the last bars.
    let room = if text { 1.3 } else { 1.02 };
    let mut chart = b
        .build_cartesian_2d(0f64..x_max * room, (0u32..n).into_segmented())
        .map_err(e)?;
    if text {
        let names: Vec<String> = ranks.iter().map(|(r, _)| format!("rank {r}")).collect();
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_desc(format!("simulated time ({t_unit})"))
            .x_label_formatter(&tick)
            .y_labels(ranks.len().min(64))
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(row) => {
                    names.get(*row as usize).cloned().unwrap_or_default()
                }
                _ => String::new(),
            })
            .draw()
            .map_err(e)?;
    }
    // One series per step position (its colour) over all ranks, so the legend can say what the
    // colours are: the first steps by name, the rest summed up in one entry.
    let steps_max = ranks.iter().map(|(_, s)| s.len()).max().unwrap_or(0);
    const NAMED: usize = 6;
    for j in 0..steps_max {
        let color = Palette99::pick(j).to_rgba();
        let bars = ranks.iter().enumerate().filter_map(|(row, (_, steps))| {
            let (_, s, t) = steps.get(j)?;
            let row = row as u32;
            Some([
                (*s as f64 / t_div, SegmentValue::Exact(row)),
                (*t as f64 / t_div, SegmentValue::Exact(row + 1)),
            ])
        });
        // Filled bar, then a white outline that keeps neighbouring bars apart.
        let drawn = chart
            .draw_series(bars.flat_map(|corners| {
                [
                    Rectangle::new(corners.clone(), color.filled()),
                    Rectangle::new(corners, WHITE.stroke_width(3)),
                ]
            }))
            .map_err(e)?;
        let label = match j {
            _ if j < NAMED => format!("receive step {}", j + 1),
            _ if j == NAMED => format!("steps {}..{steps_max}: a colour each", NAMED + 1),
            _ => continue,
        };
        if text {
            drawn.label(label).legend(move |(px, py)| {
                Rectangle::new([(px, py - 5), (px + 16, py + 5)], color.filled())
            });
        }
    }
    if text && steps_max > 0 {
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

    fn png_ok(p: &Path) -> bool {
        std::fs::read(p).is_ok_and(|b| b.starts_with(b"\x89PNG\r\n\x1a\n"))
    }

    #[test]
    fn charts_are_written_as_png_and_svg() {
        // Deleted with what the test wrote when dropped, also when the test fails.
        let tmp = match tempfile::Builder::new().prefix("fabemu-plot-").tempdir() {
            Ok(t) => t,
            Err(e) => panic!("cannot create a temporary directory: {e}"),
        };
        let dir = tmp.path();
        let t = Table {
            times_ps: (0..50).map(|k| k * 1_000_000).collect(),
            columns: vec![
                (
                    "dim0".into(),
                    (0..50).map(|k| (k as f64 / 10.0).sin().abs()).collect(),
                ),
                ("dim1".into(), (0..50).map(|k| k as f64 / 50.0).collect()),
            ],
        };
        let chart = LineChart {
            title: "Link utilization per dimension".into(),
            y_label: "utilization".into(),
            y_unit: YUnit::Share,
            series: &t,
            y_max: Some(1.0),
            keep: 8,
            shade: &[],
        };
        if let Err(e) = line_chart(&dir.join("lines"), &chart) {
            panic!("{e}");
        }
        assert!(png_ok(&dir.join("lines.png")));
        let svg = std::fs::read_to_string(dir.join("lines.svg")).unwrap_or_default();
        assert!(svg.contains("<svg") && svg.contains("polyline"));
        if has_font() {
            // 49 us of series: a microsecond axis, utilization in percent, no `.0` ticks.
            assert!(svg.contains("simulated time (us)"), "{svg}");
            assert!(svg.contains("utilization (%)"), "{svg}");
            assert!(!svg.contains(".0<"), "{svg}");
        }
        // A 4-rank ring: 3 steps per rank, each 2 us, rank r starts r*0.5 us late.
        let ranks: Vec<RankSteps> = (0..4u32)
            .map(|r| {
                let steps = (0..3u64)
                    .map(|j| {
                        let s = r as u64 * 500_000 + j * 2_000_000;
                        (format!("step {j}"), s, s + 1_800_000)
                    })
                    .collect();
                (r, steps)
            })
            .collect();
        if let Err(e) = collective_timeline(&dir.join("timeline"), "All-Reduce, ring", &ranks) {
            panic!("{e}");
        }
        assert!(png_ok(&dir.join("timeline.png")));
        let svg = std::fs::read_to_string(dir.join("timeline.svg")).unwrap_or_default();
        if has_font() {
            // A legend names the colours.
            assert!(svg.contains("receive step 1") && svg.contains("receive step 3"));
        }
    }

    #[test]
    fn axes_pick_units_that_fit() {
        assert_eq!(time_unit(999), (1.0, "ps"));
        assert_eq!(time_unit(49_000_000), (1e6, "us"));
        assert_eq!(time_unit(3_789_000_000), (1e9, "ms"));
        assert_eq!(time_unit(999_999_999), (1e6, "us"));
        assert_eq!(time_unit(37_890_000_000), (1e9, "ms"));
        assert_eq!(time_unit(12_000_000_000_000), (1e12, "s"));
        assert_eq!(byte_unit(500.0).1, "B");
        assert_eq!(byte_unit(64_000.0).1, "KB");
        assert_eq!(byte_unit(2.5e7).1, "MB");
        for (v, s) in [
            (2.0, "2"),
            (0.5, "0.5"),
            (1.25, "1.25"),
            (0.0, "0"),
            (100.0, "100"),
        ] {
            assert_eq!(tick(&v), s);
        }
    }
}
