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

/// Writes `t` as CSV: a `time_ps` column, then one per series. Written with the `csv` crate,
/// so a column named after nodes with commas or quotes in their names is quoted as RFC 4180
/// says, not split.
pub fn write_csv(path: &Path, t: &Table) -> Result<(), ObserveError> {
    let mut w = csv::Writer::from_path(path).map_err(csv_err(path))?;
    let header = std::iter::once("time_ps").chain(t.columns.iter().map(|(n, _)| n.as_str()));
    w.write_record(header).map_err(csv_err(path))?;
    // One buffer for every cell, and zeros (most cells of a large fabric) written as they
    // are: the tables of a thousand-host fabric have millions of cells, and an interrupted run
    // should still write them in a moment.
    let mut cell = String::new();
    for (k, time) in t.times_ps.iter().enumerate() {
        cell.clear();
        let _ = write!(cell, "{time}");
        w.write_field(&cell).map_err(csv_err(path))?;
        for (_, col) in &t.columns {
            let v = col.get(k).copied().unwrap_or(0.0);
            cell.clear();
            // Integers (queue bytes) stay integers; shares keep 6 decimals.
            let _ = if v == 0.0 {
                write!(cell, "0")
            } else if v.fract() == 0.0 {
                write!(cell, "{v:.0}")
            } else {
                write!(cell, "{v:.6}")
            };
            w.write_field(&cell).map_err(csv_err(path))?;
        }
        w.write_record(None::<&[u8]>).map_err(csv_err(path))?;
    }
    w.flush().map_err(io_err(path))
}

/// A CSV writer's error as an I/O error on `path` (what it is: formatting cannot fail).
pub(crate) fn csv_err(path: &Path) -> impl Fn(csv::Error) -> ObserveError + '_ {
    move |e| ObserveError::Io {
        path: path.to_path_buf(),
        source: e.into(),
    }
}
