//! A rank's trace as fabemu runs it: typed operations and a checked dependency DAG.
//!
//! [`RankTrace::from_nodes`] reads each Chakra node's type and attributes into an [`Op`]
//! (the attribute names are the ones Chakra's converters and ASTRA-sim use: `comm_type`,
//! `comm_size`, `comm_src`, `comm_dst`, `comm_tag`, `pg_name`, `num_ops`, `tensor_size`),
//! joins control and data dependencies (fabemu waits for both alike), and refuses what
//! cannot run: an unknown node type, a duplicate id, a dependency on a node the trace does
//! not have, a cycle. Every error names the file and the node id ([`ChakraError`]).
//! [`load_traces`] reads `PREFIX.0.et`, `PREFIX.1.et`, ... for a number of ranks.

use std::collections::BTreeMap;
use std::path::Path;

use fabemu_fabric::units::{Time, PS_PER_US};

use crate::chakra::{self, CollectiveCommType, NodeType, StreamError};

/// A collective operation of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CollKind {
    /// All-Reduce.
    AllReduce,
    /// Reduce to the root.
    Reduce,
    /// All-Gather (size: the gathered output).
    AllGather,
    /// Broadcast from the root.
    Broadcast,
    /// All-To-All (size: one rank's send buffer).
    AllToAll,
    /// Reduce-Scatter (size: the input); also Chakra's `REDUCE_SCATTER_BLOCK`.
    ReduceScatter,
    /// Barrier (no payload).
    Barrier,
}

impl CollKind {
    /// The name reports use (`all_reduce`, ...).
    pub fn key(self) -> &'static str {
        match self {
            CollKind::AllReduce => "all_reduce",
            CollKind::Reduce => "reduce",
            CollKind::AllGather => "all_gather",
            CollKind::Broadcast => "broadcast",
            CollKind::AllToAll => "all_to_all",
            CollKind::ReduceScatter => "reduce_scatter",
            CollKind::Barrier => "barrier",
        }
    }
}

/// What a node does.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// A computation: its recorded run time, or work for a device model.
    Compute {
        /// Chakra's `is_cpu_op`: a host (CPU) operator, which runs on the rank's CPU stream
        /// beside the GPU's kernels rather than after them (as ASTRA-sim schedules it).
        cpu: bool,
        /// `duration_micros` when non-zero.
        duration: Option<Time>,
        /// `num_ops` (floating-point operations).
        num_ops: Option<u64>,
        /// `tensor_size` (bytes the computation reads and writes).
        tensor_bytes: Option<u64>,
    },
    /// A memory load or store.
    Memory {
        /// Store (else load).
        store: bool,
        /// `duration_micros` when non-zero.
        duration: Option<Time>,
        /// `tensor_size` in bytes.
        bytes: Option<u64>,
    },
    /// A collective over the node's process group (or every rank).
    Collective {
        /// The operation.
        kind: CollKind,
        /// `comm_size` in bytes.
        bytes: u64,
        /// `pg_name`: the communicator group, when the trace names one.
        group: Option<String>,
    },
    /// Sends `bytes` to rank `peer`.
    Send {
        /// Destination rank (`comm_dst`).
        peer: u32,
        /// `comm_size`.
        bytes: u64,
        /// `comm_tag` (0 when absent).
        tag: u64,
    },
    /// Receives a message from rank `peer` with this tag.
    Recv {
        /// Source rank (`comm_src`).
        peer: u32,
        /// `comm_size`.
        bytes: u64,
        /// `comm_tag` (0 when absent).
        tag: u64,
    },
    /// A metadata, storage, batch or checkpoint node: takes its `duration_micros` (if any)
    /// off every stream.
    Marker {
        /// `duration_micros` when non-zero.
        duration: Option<Time>,
    },
}

/// One node of a rank's trace.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceNode {
    /// Chakra node id.
    pub id: u64,
    /// Operator name.
    pub name: String,
    /// What it does.
    pub op: Op,
    /// Indices (into [`RankTrace::nodes`]) of the nodes it waits for.
    pub deps: Vec<u32>,
}

/// A rank's checked trace.
#[derive(Clone, Debug, PartialEq)]
pub struct RankTrace {
    /// The file it was read from (for messages).
    pub file: String,
    /// The schema version of its metadata.
    pub version: String,
    /// The nodes, in file order.
    pub nodes: Vec<TraceNode>,
}

/// A trace that cannot run, named by file and node.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChakraError {
    /// The file cannot be read.
    #[error("{file}: cannot read the trace: {why}")]
    Io {
        /// The file.
        file: String,
        /// The OS's reason.
        why: String,
    },
    /// The bytes are not a Chakra stream.
    #[error("{file}: {err}")]
    Stream {
        /// The file.
        file: String,
        /// What is wrong, where.
        err: StreamError,
    },
    /// A node's type is not one of Chakra's.
    #[error("{file}: node {node}: unknown node type {value}")]
    UnknownNodeType {
        /// The file.
        file: String,
        /// Node id.
        node: u64,
        /// The type value found.
        value: i32,
    },
    /// Two nodes share an id.
    #[error("{file}: node {node}: the id is used by another node too")]
    DuplicateId {
        /// The file.
        file: String,
        /// Node id.
        node: u64,
    },
    /// A dependency names a node the trace does not have.
    #[error("{file}: node {node} depends on node {dep}, which is not in the trace")]
    MissingDependency {
        /// The file.
        file: String,
        /// Node id.
        node: u64,
        /// The missing parent's id.
        dep: u64,
    },
    /// Dependencies form a cycle.
    #[error("{file}: node {node} is on a dependency cycle: {cycle}")]
    Cycle {
        /// The file.
        file: String,
        /// A node on the cycle.
        node: u64,
        /// The cycle's node ids, `a -> b -> ... -> a` (each waits for the next).
        cycle: String,
    },
    /// A node lacks an attribute it needs or has a wrong value.
    #[error("{file}: node {node}: {what}")]
    BadNode {
        /// The file.
        file: String,
        /// Node id.
        node: u64,
        /// What is wrong.
        what: String,
    },
    /// A rank's file is missing while later ranks have theirs.
    #[error("{file}: missing: the trace of rank {rank} (traces of later ranks exist)")]
    MissingRankFile {
        /// The file expected.
        file: String,
        /// Its rank.
        rank: usize,
    },
    /// The number of trace files differs from the number of ranks.
    #[error("{prefix}.*.et: {found} trace files (ranks 0..{found}) for {expected} ranks")]
    RankCountMismatch {
        /// The traces' prefix.
        prefix: String,
        /// Consecutive files found from rank 0.
        found: usize,
        /// Ranks expected.
        expected: usize,
    },
}

fn micros(us: u64) -> Option<Time> {
    (us > 0).then(|| Time(us.saturating_mul(PS_PER_US)))
}

impl RankTrace {
    /// Reads and checks the trace in `bytes`; `file` names it in errors.
    pub fn decode(bytes: &[u8], file: &str) -> Result<RankTrace, ChakraError> {
        let (meta, nodes) = chakra::decode_stream(bytes).map_err(|err| ChakraError::Stream {
            file: file.to_string(),
            err,
        })?;
        RankTrace::from_nodes(
            meta.version,
            nodes.into_iter().map(|l| l.node).collect(),
            file,
        )
    }

    /// Types and checks decoded nodes (see the module doc).
    pub fn from_nodes(
        version: String,
        nodes: Vec<chakra::Node>,
        file: &str,
    ) -> Result<RankTrace, ChakraError> {
        let index = index_by_id(&nodes, file)?;
        let mut out = Vec::with_capacity(nodes.len());
        // The node (by position) that last listed each parent: repeated parents are dropped in
        // one pass, whatever their number.
        let mut listed_by = vec![usize::MAX; nodes.len()];
        for (at, n) in nodes.iter().enumerate() {
            let ty = NodeType::try_from(n.r#type).map_err(|_| ChakraError::UnknownNodeType {
                file: file.to_string(),
                node: n.id,
                value: n.r#type,
            })?;
            let op = node_op(&Attrs { node: n, ty, file })?;
            let deps = node_deps(n, at, &index, &mut listed_by, file)?;
            out.push(TraceNode {
                id: n.id,
                name: n.name.clone(),
                op,
                deps,
            });
        }
        check_acyclic(&out, file)?;
        Ok(RankTrace {
            file: file.to_string(),
            version,
            nodes: out,
        })
    }
}

/// The position of every node by its id; an id used twice is an error.
fn index_by_id(nodes: &[chakra::Node], file: &str) -> Result<BTreeMap<u64, u32>, ChakraError> {
    let mut index = BTreeMap::new();
    for (i, n) in nodes.iter().enumerate() {
        if index.insert(n.id, i as u32).is_some() {
            return Err(ChakraError::DuplicateId {
                file: file.to_string(),
                node: n.id,
            });
        }
    }
    Ok(index)
}

/// One node of a type, read attribute by attribute with errors that name it.
struct Attrs<'a> {
    node: &'a chakra::Node,
    ty: NodeType,
    file: &'a str,
}

impl Attrs<'_> {
    fn bad(&self, what: String) -> ChakraError {
        ChakraError::BadNode {
            file: self.file.to_string(),
            node: self.node.id,
            what,
        }
    }

    /// Attribute `name` as a non-negative integer, if the node has it.
    fn int(&self, name: &str) -> Result<Option<u64>, ChakraError> {
        match self.node.attr(name) {
            None => Ok(None),
            Some(a) => match a.as_i128().map(u64::try_from) {
                Some(Ok(v)) => Ok(Some(v)),
                _ => Err(self.bad(format!("attribute `{name}` must be a non-negative integer"))),
            },
        }
    }

    /// Attribute `name`, which the node's type needs.
    fn need(&self, name: &str) -> Result<u64, ChakraError> {
        let ty = self.ty;
        self.int(name)?
            .ok_or_else(|| self.bad(format!("a {ty:?} node needs the `{name}` attribute")))
    }

    /// Attribute `name` as a rank.
    fn rank(&self, name: &str) -> Result<u32, ChakraError> {
        u32::try_from(self.need(name)?).map_err(|_| self.bad(format!("`{name}` is not a rank")))
    }
}

/// What a node does, by its type and attributes.
fn node_op(a: &Attrs<'_>) -> Result<Op, ChakraError> {
    let n = a.node;
    Ok(match a.ty {
        NodeType::InvalidNode => {
            return Err(ChakraError::UnknownNodeType {
                file: a.file.to_string(),
                node: n.id,
                value: n.r#type,
            })
        }
        NodeType::CompNode => Op::Compute {
            cpu: n
                .attr("is_cpu_op")
                .and_then(chakra::AttributeProto::as_i128)
                .is_some_and(|v| v != 0),
            duration: micros(n.duration_micros),
            num_ops: a.int("num_ops")?,
            tensor_bytes: a.int("tensor_size")?,
        },
        NodeType::MemLoadNode | NodeType::MemStoreNode => Op::Memory {
            store: a.ty == NodeType::MemStoreNode,
            duration: micros(n.duration_micros),
            bytes: a.int("tensor_size")?,
        },
        NodeType::CommCollNode => collective_op(a)?,
        NodeType::CommSendNode => Op::Send {
            peer: a.rank("comm_dst")?,
            bytes: a.need("comm_size")?,
            tag: a.int("comm_tag")?.unwrap_or(0),
        },
        NodeType::CommRecvNode => Op::Recv {
            peer: a.rank("comm_src")?,
            bytes: a.need("comm_size")?,
            tag: a.int("comm_tag")?.unwrap_or(0),
        },
        NodeType::MetadataNode
        | NodeType::StorageNode
        | NodeType::BatchNode
        | NodeType::CheckpointNode => Op::Marker {
            duration: micros(n.duration_micros),
        },
    })
}

/// A collective node: its kind, its size (checked as a scenario's collectives are) and group.
fn collective_op(a: &Attrs<'_>) -> Result<Op, ChakraError> {
    let t = a.need("comm_type")?;
    let kind = i32::try_from(t)
        .ok()
        .and_then(|t| CollectiveCommType::try_from(t).ok())
        .ok_or_else(|| a.bad(format!("unknown comm_type {t}")))?;
    let kind = match kind {
        CollectiveCommType::AllReduce => CollKind::AllReduce,
        CollectiveCommType::Reduce => CollKind::Reduce,
        CollectiveCommType::AllGather => CollKind::AllGather,
        CollectiveCommType::Broadcast => CollKind::Broadcast,
        CollectiveCommType::AllToAll => CollKind::AllToAll,
        CollectiveCommType::ReduceScatter | CollectiveCommType::ReduceScatterBlock => {
            CollKind::ReduceScatter
        }
        CollectiveCommType::Barrier => CollKind::Barrier,
        CollectiveCommType::Gather | CollectiveCommType::Scatter => {
            return Err(a.bad(format!(
                "collective {kind:?} is not supported (fabemu runs \
                 All-Reduce, Reduce, All-Gather, Reduce-Scatter, \
                 All-To-All, Broadcast and Barrier)"
            )))
        }
    };
    let bytes = if kind == CollKind::Barrier {
        a.int("comm_size")?.unwrap_or(0)
    } else {
        a.need("comm_size")?
    };
    if bytes > MAX_COLLECTIVE_BYTES {
        return Err(a.bad(format!(
            "comm_size {bytes} B: a collective is at most \
             {MAX_COLLECTIVE_BYTES} B (1 TiB) in fabemu"
        )));
    }
    // As a scenario's own collectives: a positive whole number of floats (a
    // collective of nothing would neither run nor be reported).
    if kind != CollKind::Barrier && (bytes == 0 || bytes % COLLECTIVE_ELEMENT_BYTES != 0) {
        return Err(a.bad(format!(
            "comm_size {bytes} B is not a positive multiple of the float \
             element size ({COLLECTIVE_ELEMENT_BYTES}B): fabemu runs a \
             trace's collectives in floats, as it runs a scenario's \
             (`workload.collectives`)"
        )));
    }
    Ok(Op::Collective {
        kind,
        bytes,
        group: a
            .node
            .attr("pg_name")
            .and_then(|a| a.as_str())
            .filter(|s| !s.is_empty())
            .map(str::to_string),
    })
}

/// The positions of the nodes node `at` (`n`) waits for, control and data dependencies, each
/// once.
fn node_deps(
    n: &chakra::Node,
    at: usize,
    index: &BTreeMap<u64, u32>,
    listed_by: &mut [usize],
    file: &str,
) -> Result<Vec<u32>, ChakraError> {
    let mut deps = Vec::with_capacity(n.ctrl_deps.len() + n.data_deps.len());
    for &d in n.ctrl_deps.iter().chain(&n.data_deps) {
        let &i = index
            .get(&d)
            .ok_or_else(|| ChakraError::MissingDependency {
                file: file.to_string(),
                node: n.id,
                dep: d,
            })?;
        if listed_by[i as usize] != at {
            listed_by[i as usize] = at;
            deps.push(i);
        }
    }
    Ok(deps)
}

/// Kahn's algorithm; on a cycle, walks parents among the unfinished nodes until one repeats.
fn check_acyclic(nodes: &[TraceNode], file: &str) -> Result<(), ChakraError> {
    let n = nodes.len();
    let mut pending: Vec<usize> = nodes.iter().map(|x| x.deps.len()).collect();
    let mut children: Vec<Vec<u32>> = vec![Vec::new(); n];
    for (i, x) in nodes.iter().enumerate() {
        for &d in &x.deps {
            children[d as usize].push(i as u32);
        }
    }
    let mut stack: Vec<usize> = (0..n).filter(|&i| pending[i] == 0).collect();
    let mut done = 0;
    while let Some(i) = stack.pop() {
        done += 1;
        for &c in &children[i] {
            pending[c as usize] -= 1;
            if pending[c as usize] == 0 {
                stack.push(c as usize);
            }
        }
    }
    if done == n {
        return Ok(());
    }
    // Every unfinished node has an unfinished parent: follow them until one repeats.
    let Some(mut at) = (0..n).find(|&i| pending[i] > 0) else {
        return Ok(());
    };
    let mut seen = vec![usize::MAX; n];
    let mut path = Vec::new();
    while seen[at] == usize::MAX {
        seen[at] = path.len();
        path.push(at);
        match nodes[at].deps.iter().find(|&&d| pending[d as usize] > 0) {
            Some(&d) => at = d as usize,
            None => break,
        }
    }
    let start = seen[at].min(path.len().saturating_sub(1));
    let mut ids: Vec<String> = path[start..]
        .iter()
        .map(|&i| nodes[i].id.to_string())
        .collect();
    ids.push(nodes[path[start]].id.to_string());
    Err(ChakraError::Cycle {
        file: file.to_string(),
        node: nodes[path[start]].id,
        cycle: ids.join(" -> "),
    })
}

/// The file of rank `rank` of traces `prefix`: `PREFIX.RANK.et`.
pub fn rank_file(prefix: &Path, rank: usize) -> std::path::PathBuf {
    let mut s = prefix.as_os_str().to_owned();
    s.push(format!(".{rank}.et"));
    s.into()
}

/// The largest Chakra trace file read (per rank): far above the traces of real training
/// steps, and a bound on what a hostile or endless file (`/dev/zero`) can cost.
pub const MAX_TRACE_BYTES: u64 = 1 << 30;

/// The largest collective a trace may ask for (`comm_size`): 1 TiB, far beyond any training
/// step's, and small enough that the messages it is cut into stay countable.
pub const MAX_COLLECTIVE_BYTES: u64 = 1 << 40;

/// The element a trace's collective is counted in (a float): its `comm_size` must be a
/// positive multiple of it, as the size of a scenario's collective of `type: float`.
pub const COLLECTIVE_ELEMENT_BYTES: u64 = 4;

/// Reads the traces of `ranks` ranks, `PREFIX.0.et` to `PREFIX.{ranks-1}.et`; refuses a
/// missing rank and a different number of files.
pub fn load_traces(prefix: &Path, ranks: usize) -> Result<Vec<RankTrace>, ChakraError> {
    let found = (0..)
        .take_while(|&r| rank_file(prefix, r).is_file())
        .count();
    if found != ranks {
        // A gap (rank `found` missing while a later one exists) is a missing file.
        if found < ranks && (found + 1..=ranks).any(|r| rank_file(prefix, r).is_file()) {
            return Err(ChakraError::MissingRankFile {
                file: rank_file(prefix, found).display().to_string(),
                rank: found,
            });
        }
        return Err(ChakraError::RankCountMismatch {
            prefix: prefix.display().to_string(),
            found,
            expected: ranks,
        });
    }
    (0..ranks)
        .map(|r| {
            let path = rank_file(prefix, r);
            let file = path.display().to_string();
            let bytes = crate::input::read_limited(&path, MAX_TRACE_BYTES, "a Chakra trace")
                .map_err(|e| ChakraError::Io {
                    file: file.clone(),
                    why: e.to_string(),
                })?;
            RankTrace::decode(&bytes, &file)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chakra::{AttributeProto, Node};

    fn node(id: u64, ty: NodeType, deps: &[u64]) -> Node {
        Node {
            id,
            name: format!("n{id}"),
            r#type: ty as i32,
            data_deps: deps.to_vec(),
            duration_micros: 5,
            ..Node::default()
        }
    }

    #[test]
    fn cycles_and_missing_parents_are_named() {
        let nodes = vec![
            node(1, NodeType::CompNode, &[]),
            node(2, NodeType::CompNode, &[1, 4]),
            node(3, NodeType::CompNode, &[2]),
            node(4, NodeType::CompNode, &[3]),
        ];
        let e = RankTrace::from_nodes("0.0.4".into(), nodes, "t.0.et").unwrap_err();
        assert_eq!(
            e.to_string(),
            "t.0.et: node 2 is on a dependency cycle: 2 -> 4 -> 3 -> 2"
        );
        let e = RankTrace::from_nodes(
            "0.0.4".into(),
            vec![node(7, NodeType::CompNode, &[9])],
            "t.0.et",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "t.0.et: node 7 depends on node 9, which is not in the trace"
        );
    }

    #[test]
    fn attributes_become_ops() {
        let mut c = node(3, NodeType::CommCollNode, &[]);
        c.attr = vec![
            AttributeProto::int("comm_type", 7),
            AttributeProto::int("comm_size", 4096),
            AttributeProto::string("pg_name", "1"),
        ];
        let mut bad = node(4, NodeType::CommSendNode, &[]);
        bad.attr = vec![AttributeProto::int("comm_size", 8)];
        let t = RankTrace::from_nodes("0.0.4".into(), vec![c], "x").unwrap();
        assert_eq!(
            t.nodes[0].op,
            Op::Collective {
                kind: CollKind::ReduceScatter,
                bytes: 4096,
                group: Some("1".into())
            }
        );
        let e = RankTrace::from_nodes("0.0.4".into(), vec![bad], "x").unwrap_err();
        assert_eq!(
            e.to_string(),
            "x: node 4: a CommSendNode node needs the `comm_dst` attribute"
        );
    }

    #[test]
    fn collectives_of_no_bytes_or_a_part_of_a_float_are_refused() {
        for (comm_type, bytes) in [(6, 4097), (0, 0), (6, 0), (0, 2)] {
            let mut c = node(5, NodeType::CommCollNode, &[]);
            c.attr = vec![
                AttributeProto::int("comm_type", comm_type),
                AttributeProto::int("comm_size", bytes),
            ];
            let e = RankTrace::from_nodes("0.0.4".into(), vec![c], "x").unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "x: node 5: comm_size {bytes} B is not a positive multiple of the float \
                     element size (4B): fabemu runs a trace's collectives in floats, as it runs \
                     a scenario's (`workload.collectives`)"
                )
            );
        }
        // A barrier moves no data of its own.
        let mut b = node(6, NodeType::CommCollNode, &[]);
        b.attr = vec![AttributeProto::int("comm_type", 9)];
        assert!(RankTrace::from_nodes("0.0.4".into(), vec![b], "x").is_ok());
    }
}
