//! The screening pass of `fabemu search`: a candidate's iteration composed from its pieces
//! ([`fabemu_workload::estimate`]) instead of run in full.
//!
//! Only one pipeline is played (the ranks at data, tensor and expert index 0): the other
//! replicas do the same work on groups of the same shape at the same time. Compute is timed
//! by the device as in a full run. A collective's time is measured on the fabric at flow
//! fidelity, running it at once on every group of its family (all tensor-parallel groups,
//! all data-parallel groups, ...), so the links they share are shared as in the iteration;
//! the slowest group's time is taken. A pipeline message is measured the same way, every
//! pipeline sending across the same stage boundary at once. Each measurement is kept by
//! (operation, size, the hosts of every group) and reused by every candidate that needs it:
//! the tensor-parallel All-Reduces of two candidates with the same tp, micro-batch and
//! placement are measured once. A worker needing a measurement another is taking waits for
//! it rather than measuring it again, so each is measured exactly once whatever the number
//! of workers. Within a candidate, the time of each (operation, size, group) and each
//! (sender, receiver, size) is looked up once: the thousands of tensor-parallel nodes of a
//! pipeline share a few.
//!
//! What this leaves out (the error the search states against the full runs): contention
//! between different families (a data-parallel bucket and a pipeline message at the same
//! time), replicas drifting apart, and the stages of a family not all communicating at once.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use fabemu_fabric::units::Time;
use fabemu_workload::estimate::{estimate, Comm};
use fabemu_workload::model::{self, Groups};
use fabemu_workload::trace::CollKind;
use fabemu_workload::transformer;
use serde_yaml::{Mapping, Value};

use super::{Metrics, SearchError};
use crate::frontend::{self, Input};
use crate::scenario::{AlgorithmYaml, CollectiveStreams, Fidelity, Source};
use crate::training;

/// A measurement: (operation or `message`, bytes, the hosts of every group run at once).
type Key = (&'static str, u64, Vec<Vec<usize>>);

/// A measurement's result, shared: the first worker to need it measures, the others wait.
type Cell = Arc<OnceLock<Result<Time, String>>>;

/// A candidate's communication as it asks for it: (operation or `message`, bytes, group
/// name or empty, sender, receiver). Every node of the same shape takes the same time, so
/// the family or boundary behind it is worked out once per candidate.
type Ask = (&'static str, u64, String, usize, usize);

/// Screens candidates of one scenario, keeping what it measured.
pub(super) struct Screener<'a> {
    /// The scenario's YAML (the fabric and its settings are taken from it).
    doc: &'a Value,
    file: &'a str,
    host_names: Vec<String>,
    memo: Mutex<BTreeMap<Key, Cell>>,
    measured: AtomicUsize,
}

impl<'a> Screener<'a> {
    /// A screener for the scenario `src` (its YAML `doc`, named `file`).
    pub(super) fn new(
        src: &Source,
        doc: &'a Value,
        file: &'a str,
    ) -> Result<Screener<'a>, SearchError> {
        let (g, _) = crate::world::fabric(src)?;
        let host_names = g.hosts().map(|id| g.node(id).name.clone()).collect();
        Ok(Screener {
            doc,
            file,
            host_names,
            memo: Mutex::new(BTreeMap::new()),
            measured: AtomicUsize::new(0),
        })
    }

    /// Collectives and messages measured so far.
    pub(super) fn measured(&self) -> usize {
        self.measured.load(Ordering::Relaxed)
    }

    /// The candidate `text` (a scenario's YAML) screened.
    pub(super) fn screen(&self, text: &str) -> Result<Metrics, String> {
        let src = frontend::load(
            Input::Text {
                text,
                name: self.file,
            },
            &[],
            None,
            Some(Fidelity::Flow),
        )
        .map_err(|e| e.to_string())?;
        let Some(tr) = src.scenario.workload.training.as_ref() else {
            return Err("no `workload.training`".into());
        };
        let device = training::check_device(&src).map_err(|e| e.to_string())?;
        let (spec, figures) = training::model_spec(tr, device.map(|d| d.0)).map_err(|(_, m)| m)?;
        let Some(figures) = figures else {
            return Err("no `model`".into());
        };
        let hosts = self.host_names.len();
        let (ranks, groups) =
            model::build_pipeline(&spec, hosts, device.is_some()).map_err(|e| e.to_string())?;
        let concurrent =
            src.scenario.workload.collective_algorithms.streams == CollectiveStreams::Concurrent;
        let compute = |op: &_| transformer::node_time(device, op).map_err(String::from);
        let mut asked: HashMap<Ask, Result<Time, String>> = HashMap::new();
        let mut comm = |c: Comm<'_>| {
            let ask = match c {
                Comm::Collective { kind, bytes, group } => {
                    (kind.key(), bytes, group.to_string(), 0, 0)
                }
                Comm::Message { from, to, bytes } => ("message", bytes, String::new(), from, to),
            };
            asked
                .entry(ask)
                .or_insert_with(|| self.time_of(&src, &groups, c))
                .clone()
        };
        let e = estimate(&ranks, &compute, &mut comm, concurrent)?;
        let iteration = e.finish.0 / spec.iterations.max(1) as u64;
        if iteration == 0 {
            return Err("the iteration takes no time".into());
        }
        let secs = iteration as f64 / 1e12;
        let gpus = hosts as f64;
        Ok(Metrics {
            iteration_ps: iteration,
            tokens_per_s: figures.tokens as f64 / secs,
            tflops_per_gpu: figures.hardware_flops / secs / gpus / 1e12,
            mfu: figures
                .peak_flops
                .map(|p| figures.model_flops / secs / gpus / p),
            exposed_comm: e.exposed.0 as f64
                / ranks.len().max(1) as f64
                / spec.iterations.max(1) as f64
                / iteration as f64,
        })
    }

    /// The time of one collective or message of the candidate, measured or remembered.
    fn time_of(&self, src: &Source, groups: &Groups, c: Comm<'_>) -> Result<Time, String> {
        let key: Key = match c {
            Comm::Collective { kind, bytes, group } => {
                let members = groups.get(group).map_or(0, Vec::len);
                if members < 2 || (bytes == 0 && kind != CollKind::Barrier) {
                    return Ok(Time::ZERO);
                }
                (kind.key(), bytes, family(groups, group))
            }
            Comm::Message { from, to, bytes } => ("message", bytes, boundary(groups, from, to)),
        };
        let cell = match self.memo.lock() {
            Ok(mut m) => m.entry(key.clone()).or_default().clone(),
            Err(_) => Cell::default(),
        };
        cell.get_or_init(|| {
            self.measured.fetch_add(1, Ordering::Relaxed);
            self.measure(src, &key)
        })
        .clone()
    }

    /// Runs `key`'s communication on the fabric at flow fidelity: the slowest instance's time.
    fn measure(&self, src: &Source, (op, bytes, instances): &Key) -> Result<Time, String> {
        let name = |h: &usize| Value::String(self.host_names[*h].clone());
        let mut workload = Mapping::new();
        if *op == "message" {
            let list = instances
                .iter()
                .filter_map(|pair| match pair.as_slice() {
                    [a, b] => Some(entry(&[
                        ("src", name(a)),
                        ("dst", name(b)),
                        ("size", size(*bytes)),
                    ])),
                    _ => None,
                })
                .collect();
            workload.insert("messages".into(), Value::Sequence(list));
        } else {
            let kind = kind_of(op)?;
            let (coll, alg) = training::algorithm_of(&src.scenario, kind);
            let o = &src.scenario.workload.collective_algorithms;
            let bytes = if kind == CollKind::Barrier {
                4 * instances.first().map_or(1, Vec::len) as u64
            } else {
                bytes.div_ceil(4) * 4
            };
            let mut list = Vec::new();
            for hosts in instances {
                let mut fields = vec![
                    ("op", Value::String(coll.key().into())),
                    ("size", size(bytes)),
                    ("start", Value::String("0s".into())),
                    ("hosts", hosts.iter().map(name).collect()),
                ];
                if let Some(a) = alg {
                    fields.push(("algorithm", to_value(a)?));
                    if matches!(a, AlgorithmYaml::PerDim(_)) {
                        if let Some(x) = &o.scheme {
                            fields.push(("scheme", to_value(x)?));
                        }
                        if let Some(x) = &o.policy {
                            fields.push(("policy", to_value(x)?));
                        }
                    }
                }
                if let Some(c) = o.chunks {
                    fields.push(("chunks", Value::from(c as u64)));
                }
                if let Some(c) = o.chunks_in_flight {
                    fields.push(("chunks_in_flight", Value::from(c as u64)));
                }
                list.push(entry(&fields));
            }
            workload.insert("collectives".into(), Value::Sequence(list));
        }
        let mut doc = self.doc.clone();
        if let Value::Mapping(m) = &mut doc {
            m.insert("fidelity".into(), "flow".into());
            m.insert("workload".into(), Value::Mapping(workload));
        }
        let text = serde_yaml::to_string(&doc).map_err(|e| e.to_string())?;
        let src = frontend::load(
            Input::Text {
                text: &text,
                name: self.file,
            },
            &[],
            None,
            Some(Fidelity::Flow),
        )
        .map_err(|e| format!("measuring {op} of {bytes} B: {e}"))?;
        let report = crate::run_source(&src, 1, None)
            .map_err(|e| format!("measuring {op} of {bytes} B: {e}"))?;
        let times: Option<Vec<u64>> = if *op == "message" {
            report
                .messages
                .iter()
                .map(|m| m.completion_time_ps)
                .collect()
        } else {
            report
                .collectives
                .iter()
                .map(|c| Some(c.end_ps? - c.start_ps?))
                .collect()
        };
        times
            .and_then(|t| t.into_iter().max())
            .map(Time)
            .ok_or_else(|| format!("measuring {op} of {bytes} B: it did not finish"))
    }
}

/// A YAML mapping of `fields`.
fn entry(fields: &[(&str, Value)]) -> Value {
    Value::Mapping(
        fields
            .iter()
            .map(|(k, v)| (Value::String((*k).into()), v.clone()))
            .collect(),
    )
}

/// A size in bytes as the scenario writes it.
fn size(bytes: u64) -> Value {
    Value::String(format!("{bytes}B"))
}

fn to_value<T: serde::Serialize>(x: &T) -> Result<Value, String> {
    serde_yaml::to_value(x).map_err(|e| e.to_string())
}

/// The operation of a collective's key.
fn kind_of(op: &str) -> Result<CollKind, String> {
    [
        CollKind::AllReduce,
        CollKind::AllGather,
        CollKind::ReduceScatter,
        CollKind::AllToAll,
        CollKind::Broadcast,
        CollKind::Reduce,
        CollKind::Barrier,
    ]
    .into_iter()
    .find(|k| k.key() == op)
    .ok_or_else(|| format!("no collective {op}"))
}

/// The shape of a group's name: its letters and how many indices follow (`tp0.3` and
/// `tp1.0` are one family, `dp0.1` and `dp0.1.2` are not).
fn shape(name: &str) -> (&str, usize) {
    let letters = &name[..name
        .find(|c: char| c.is_ascii_digit())
        .unwrap_or(name.len())];
    (letters, name.matches('.').count())
}

/// The hosts of every group of `group`'s family (ranks are hosts in the built-in model).
fn family(groups: &Groups, group: &str) -> Vec<Vec<usize>> {
    let s = shape(group);
    groups
        .iter()
        .filter(|(name, members)| shape(name) == s && members.len() > 1)
        .map(|(_, members)| members.clone())
        .collect()
}

/// The stage of `rank`: the index after the letters of the data-parallel group holding it.
fn stage_of(groups: &Groups, rank: usize) -> Option<&str> {
    groups
        .iter()
        .find(|(name, members)| name.starts_with("dp") && members.contains(&rank))
        .and_then(|(name, _)| name[2..].split('.').next())
}

/// The pairs that send across the stage boundary of `from` -> `to` at once: every pipeline's
/// ranks of the two stages, matched in rank order (the ranks of a stage are the same
/// mixed-radix offsets from its first).
fn boundary(groups: &Groups, from: usize, to: usize) -> Vec<Vec<usize>> {
    let ranks_of = |rank: usize| -> Vec<usize> {
        let Some(p) = stage_of(groups, rank) else {
            return vec![rank];
        };
        let prefix = format!("dp{p}.");
        let mut v: Vec<usize> = groups
            .iter()
            .filter(|(name, _)| name.starts_with(&prefix))
            .flat_map(|(_, m)| m.iter().copied())
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let (a, b) = (ranks_of(from), ranks_of(to));
    if a.len() != b.len() {
        return vec![vec![from, to]];
    }
    a.into_iter().zip(b).map(|(x, y)| vec![x, y]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_letters_and_index_count() {
        assert_eq!(shape("tp0.3"), ("tp", 1));
        assert_eq!(shape("dp12.1.2"), ("dp", 2));
        assert_eq!(shape("ep0.0.1"), ("ep", 2));
    }

    #[test]
    fn a_boundary_pairs_every_pipeline() {
        let mut g = Groups::new();
        g.insert("dp0.0".into(), vec![0, 2]);
        g.insert("dp0.1".into(), vec![1, 3]);
        g.insert("dp1.0".into(), vec![4, 6]);
        g.insert("dp1.1".into(), vec![5, 7]);
        assert_eq!(
            boundary(&g, 0, 4),
            vec![vec![0, 4], vec![1, 5], vec![2, 6], vec![3, 7]]
        );
    }
}
