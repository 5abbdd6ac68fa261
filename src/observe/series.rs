//! Time series tables from the engine's samples: per directed link and per link class
//! utilization, per switch queue depth; and their CSV form.
//!
//! Row k stands for bucket k: utilization is the port's busy time in [k·I, (k+1)·I) over I
//! (exact, from serialization intervals), queue depth the bytes queued at the instant k·I.
//! The last bucket is divided by the whole interval even where the run ended inside it.

use std::fmt::Write as _;
use std::path::Path;

use fabemu_fabric::engine::Samples;
use fabemu_topologies::Graph;

use super::{io_err, ObserveError};

/// Columns of values over the same time axis.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    /// Time of each row in picoseconds (bucket start or snapshot instant).
    pub times_ps: Vec<u64>,
    /// Named columns, each as long as `times_ps`.
    pub columns: Vec<(String, Vec<f64>)>,
}

/// DCQCN: the rate of the first `max` queue pairs that were cut (in report order), in bit/s,
/// as steps: every rate change gives two rows at its instant, the rate before and after, so
/// a line through the rows is vertical at the change. Before its first cut a QP runs at its
/// host's line rate; after its last change it holds that rate. The series end at `end_ps`
/// (the traffic's end: rates keep recovering by timer after it), or at the last change when
/// `end_ps` is 0.
pub fn qp_rates(r: &crate::report::Report, max: usize, end_ps: u64) -> Table {
    let line = |host: &str| {
        r.links
            .iter()
            .find(|l| l.a == host || l.b == host)
            .map_or(0.0, |l| l.bandwidth_bps as f64)
    };
    let qps: Vec<(String, f64, &Vec<[u64; 2]>)> = r
        .nics
        .iter()
        .flat_map(|n| {
            n.qp_rates
                .iter()
                .map(move |q| (format!("{}->{}", n.name, q.peer), n.name.as_str(), q))
        })
        .filter(|(_, _, q)| !q.samples.is_empty())
        .take(max)
        .map(|(name, host, q)| (name, line(host), &q.samples))
        .collect();
    let mut instants: Vec<u64> = qps
        .iter()
        .flat_map(|(_, _, s)| s.iter().map(|x| x[0]))
        .collect();
    instants.sort_unstable();
    instants.dedup();
    if end_ps > 0 {
        instants.retain(|&t| t <= end_ps);
    }
    let last = if end_ps > 0 {
        end_ps
    } else {
        instants.last().copied().unwrap_or(0)
    };
    let mut times = vec![0];
    for &t in &instants {
        times.extend([t, t]);
    }
    times.push(last);
    let columns = qps
        .into_iter()
        .map(|(name, line_rate, samples)| {
            let mut values = Vec::with_capacity(times.len());
            let mut rate = line_rate;
            let mut next = samples.iter().peekable();
            values.push(rate);
            for &t in &instants {
                values.push(rate);
                while let Some(s) = next.next_if(|s| s[0] <= t) {
                    rate = s[1] as f64;
                }
                values.push(rate);
            }
            values.push(rate);
            (name, values)
        })
        .collect();
    Table {
        times_ps: times,
        columns,
    }
}

fn axis(s: &Samples) -> Vec<u64> {
    (0..s.buckets as u64).map(|k| k * s.interval.ps()).collect()
}

fn busy_of(s: &Samples, node: usize, port: usize) -> Option<&Vec<u64>> {
    s.busy_ps.get(node).and_then(|p| p.get(port))
}

/// Per directed link (`a->b`), the share of each interval its transmitter was busy; links that
/// carried nothing are left out.
pub fn link_utilization(g: &Graph, s: &Samples) -> Table {
    let i = s.interval.ps().max(1) as f64;
    let mut columns = Vec::new();
    for (li, l) in g.links().iter().enumerate() {
        for (from, to) in [(l.a, l.b), (l.b, l.a)] {
            let Some(port) = g.ports(from).iter().position(|p| p.link == li) else {
                continue;
            };
            let Some(busy) = busy_of(s, from, port) else {
                continue;
            };
            if busy.iter().all(|&b| b == 0) {
                continue;
            }
            columns.push((
                format!("{}->{}", g.node(from).name, g.node(to).name),
                busy.iter().map(|&b| b as f64 / i).collect(),
            ));
        }
    }
    Table {
        times_ps: axis(s),
        columns,
    }
}

/// Per link class (`dim0`, `dim1`, ..., a tier, `explicit`), the busy share of all its links'
/// directions together in each interval.
pub fn dimension_utilization(g: &Graph, s: &Samples) -> Table {
    let i = s.interval.ps().max(1) as f64;
    let mut classes: Vec<_> = g.links().iter().map(|l| l.class).collect();
    classes.sort();
    classes.dedup();
    let mut columns = Vec::new();
    for class in classes {
        let mut sum = vec![0u64; s.buckets];
        let mut directions = 0u64;
        for (li, l) in g.links().iter().enumerate() {
            if l.class != class {
                continue;
            }
            for from in [l.a, l.b] {
                directions += 1;
                let port = g.ports(from).iter().position(|p| p.link == li);
                if let Some(busy) = port.and_then(|p| busy_of(s, from, p)) {
                    for (acc, b) in sum.iter_mut().zip(busy) {
                        *acc += b;
                    }
                }
            }
        }
        let d = directions.max(1) as f64;
        columns.push((
            class.to_string(),
            sum.iter().map(|&b| b as f64 / (i * d)).collect(),
        ));
    }
    Table {
        times_ps: axis(s),
        columns,
    }
}

/// Per queue an actor samples (a switch: one per egress port, named `switch->peer`), the bytes
/// queued at each boundary.
pub fn queue_depth(g: &Graph, s: &Samples) -> Table {
    let mut columns = Vec::new();
    for (node, v) in s.values.iter().enumerate() {
        for q in 0..v.width {
            let name = match g.ports(node).get(q) {
                Some(p) => format!("{}->{}", g.node(node).name, g.node(p.peer).name),
                None => format!("{}#{q}", g.node(node).name),
            };
            let col = (0..s.buckets)
                .map(|k| v.at(k).get(q).copied().unwrap_or(0) as f64)
                .collect();
            columns.push((name, col));
        }
    }
    Table {
        times_ps: axis(s),
        columns,
    }
}

/// Writes `t` as CSV: a `time_ps` column, then one per series. The header is written with
/// the `csv` crate, so a column named after nodes with commas or quotes in their names is
/// quoted as RFC 4180 says, not split; the cells are numbers, formatted here by hand (integers
/// as integers, shares with 6 decimals): the tables of a thousand-host fabric have millions of
/// cells, and an interrupted run must still write them in a moment (`{:.6}` alone took most
/// of the time after Ctrl-C).
pub fn write_csv(path: &Path, t: &Table) -> Result<(), ObserveError> {
    use std::io::Write as _;
    let mut header = csv::Writer::from_writer(Vec::new());
    header
        .write_record(std::iter::once("time_ps").chain(t.columns.iter().map(|(n, _)| n.as_str())))
        .map_err(csv_err(path))?;
    let header = header
        .into_inner()
        .map_err(|e| io_err(path)(e.into_error()))?;
    let file = std::fs::File::create(path).map_err(io_err(path))?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
    w.write_all(&header).map_err(io_err(path))?;
    let mut line = String::new();
    for (k, time) in t.times_ps.iter().enumerate() {
        line.clear();
        let _ = write!(line, "{time}");
        for (_, col) in &t.columns {
            line.push(',');
            cell(&mut line, col.get(k).copied().unwrap_or(0.0));
        }
        line.push('\n');
        w.write_all(line.as_bytes()).map_err(io_err(path))?;
    }
    w.flush().map_err(io_err(path))
}

/// Appends `v` as a CSV cell: `0`, an integer as such, else fixed-point with 6 decimals.
fn cell(out: &mut String, v: f64) {
    // Below 2^53 an integral value and its fixed-point digits are exact in integers.
    const EXACT: f64 = 9_007_199_254_740_992.0;
    let _ = if v == 0.0 {
        write!(out, "0")
    } else if v.fract() == 0.0 && v.abs() < EXACT {
        write!(out, "{}", v as i64)
    } else if v.fract() == 0.0 {
        write!(out, "{v:.0}")
    } else if v.abs() < 1e9 {
        let micro = (v.abs() * 1e6).round() as u64;
        let sign = if v < 0.0 && micro > 0 { "-" } else { "" };
        write!(out, "{sign}{}.{:06}", micro / 1_000_000, micro % 1_000_000)
    } else {
        write!(out, "{v:.6}")
    };
}

/// A CSV writer's error as an I/O error on `path` (what it is: formatting cannot fail).
pub(crate) fn csv_err(path: &Path) -> impl Fn(csv::Error) -> ObserveError + '_ {
    move |e| ObserveError::Io {
        path: path.to_path_buf(),
        source: e.into(),
    }
}

#[cfg(test)]
mod cell_tests {
    #[test]
    fn cells_read_as_the_standard_formatting_writes_them() {
        for v in [
            0.0,
            1.0,
            -3.0,
            123456.0,
            0.5,
            0.1234564,
            0.9999996,
            1e-7,
            -0.25,
            1e8 + 0.5,
            3e15,
            1e300,
            2.5e9 + 0.5,
        ] {
            let mut got = String::new();
            super::cell(&mut got, v);
            let want = if v == 0.0 {
                "0".to_string()
            } else if v.fract() == 0.0 {
                format!("{v:.0}")
            } else {
                format!("{v:.6}")
            };
            assert_eq!(got, want, "{v}");
        }
    }
}
