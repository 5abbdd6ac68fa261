//! Real data for collectives: element types, reduction operators, the known input pattern and
//! the element-by-element check of every rank's output (nccl-tests' `#wrong`).
//!
//! Buffers are little-endian bytes, as they travel in packets. Every input element is a small
//! integer `v(rank, index)` in `[-8, 8]` ([`input_value`]), so any sum over up to 2^20 ranks is
//! an integer below 2^24 in magnitude: exact in `f32` whatever the order of additions. The
//! expected result is therefore a closed form of the operator and the positions, independent of
//! the algorithm; a wrong element means a routing, matching or executor bug, never rounding.
//!
//! The pattern has period [`PERIOD`] in both the rank and the index, so the reduction over all
//! ranks of element `i` depends only on `i mod PERIOD`: checking costs O(elements), not
//! O(ranks x elements).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::algorithms::all_to_all_blocks;
use crate::op::Collective;
use crate::program::Program;

/// Period of the input pattern in rank and in index.
pub const PERIOD: usize = 17;

/// An element type, named as nccl-tests prints it (`float`, `int32`, `double`, `int64`); the
/// Rust names (`f32`, `i32`, `f64`, `i64`) are accepted too.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DataType {
    /// 32-bit IEEE float.
    #[default]
    #[serde(rename = "float", alias = "f32", alias = "float32")]
    F32,
    /// 32-bit signed integer.
    #[serde(rename = "int32", alias = "i32")]
    I32,
    /// 64-bit IEEE float.
    #[serde(rename = "double", alias = "f64", alias = "float64")]
    F64,
    /// 64-bit signed integer.
    #[serde(rename = "int64", alias = "i64")]
    I64,
}

impl DataType {
    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DataType::F32 | DataType::I32 => 4,
            DataType::F64 | DataType::I64 => 8,
        }
    }

    /// The nccl-tests name.
    pub const fn name(self) -> &'static str {
        match self {
            DataType::F32 => "float",
            DataType::I32 => "int32",
            DataType::F64 => "double",
            DataType::I64 => "int64",
        }
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A reduction operator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReduceOp {
    /// Elementwise sum.
    #[default]
    Sum,
    /// Elementwise minimum.
    Min,
    /// Elementwise maximum.
    Max,
}

impl ReduceOp {
    /// The nccl-tests name.
    pub const fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
        }
    }

    fn fold(self, a: i64, b: i64) -> i64 {
        match self {
            ReduceOp::Sum => a + b,
            ReduceOp::Min => a.min(b),
            ReduceOp::Max => a.max(b),
        }
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Input element `index` of rank `rank`: a small integer in `[-8, 8]`.
pub fn input_value(rank: usize, index: usize) -> i64 {
    ((rank % PERIOD) * 5 + (index % PERIOD) * 3 + 7) as i64 % PERIOD as i64 - 8
}

/// Every rank's input elements ([`input_value`] over its program's input range), as the
/// reference interpreter takes them.
pub(crate) fn reference_inputs(programs: &[Program]) -> Vec<Vec<i64>> {
    programs
        .iter()
        .enumerate()
        .map(|(r, p)| {
            (p.input.offset..p.input.offset + p.input.len)
                .map(|i| input_value(r, i))
                .collect()
        })
        .collect()
}

/// Writes `v` as one element of `dtype` into `out` (`dtype.size()` bytes).
fn put(dtype: DataType, v: i64, out: &mut [u8]) {
    match dtype {
        DataType::F32 => out.copy_from_slice(&(v as f32).to_le_bytes()),
        DataType::I32 => out.copy_from_slice(&(v as i32).to_le_bytes()),
        DataType::F64 => out.copy_from_slice(&(v as f64).to_le_bytes()),
        DataType::I64 => out.copy_from_slice(&v.to_le_bytes()),
    }
}

/// Reads one element; floats that are not integers map to a value no check expects.
fn get(dtype: DataType, b: &[u8]) -> Option<i64> {
    let mut w4 = [0u8; 4];
    let mut w8 = [0u8; 8];
    match dtype {
        DataType::F32 => {
            w4.copy_from_slice(b);
            let x = f32::from_le_bytes(w4);
            (x.fract() == 0.0 && x.abs() < 1e15).then_some(x as i64)
        }
        DataType::I32 => {
            w4.copy_from_slice(b);
            Some(i32::from_le_bytes(w4) as i64)
        }
        DataType::F64 => {
            w8.copy_from_slice(b);
            let x = f64::from_le_bytes(w8);
            (x.fract() == 0.0 && x.abs() < 1e15).then_some(x as i64)
        }
        DataType::I64 => {
            w8.copy_from_slice(b);
            Some(i64::from_le_bytes(w8))
        }
    }
}

/// A rank's starting buffer: `buffer_len` zero elements with the rank's input pattern written
/// over `program.input`.
pub fn initial_buffer(dtype: DataType, rank: usize, program: &Program) -> Vec<u8> {
    let es = dtype.size();
    let mut buf = vec![0u8; program.buffer_len * es];
    let input = program.input;
    for i in input.offset..input.offset + input.len {
        put(dtype, input_value(rank, i), &mut buf[i * es..(i + 1) * es]);
    }
    buf
}

/// Applies an incoming message to `dst` (same length): overwrite, or reduce elementwise with
/// `op` in the element type's own arithmetic (IEEE addition for floats, wrapping for integers).
pub fn apply(dtype: DataType, op: ReduceOp, reduce: bool, dst: &mut [u8], src: &[u8]) {
    if !reduce {
        dst.copy_from_slice(src);
        return;
    }
    macro_rules! fold {
        ($t:ty, $n:expr, $add:expr) => {
            for (d, s) in dst.chunks_exact_mut($n).zip(src.chunks_exact($n)) {
                let mut a = [0u8; $n];
                let mut b = [0u8; $n];
                a.copy_from_slice(d);
                b.copy_from_slice(s);
                let (x, y) = (<$t>::from_le_bytes(a), <$t>::from_le_bytes(b));
                let r: $t = match op {
                    ReduceOp::Sum => $add(x, y),
                    ReduceOp::Min => {
                        if y < x {
                            y
                        } else {
                            x
                        }
                    }
                    ReduceOp::Max => {
                        if y > x {
                            y
                        } else {
                            x
                        }
                    }
                };
                d.copy_from_slice(&r.to_le_bytes());
            }
        };
    }
    match dtype {
        DataType::F32 => fold!(f32, 4, |x: f32, y: f32| x + y),
        DataType::I32 => fold!(i32, 4, |x: i32, y: i32| x.wrapping_add(y)),
        DataType::F64 => fold!(f64, 8, |x: f64, y: f64| x + y),
        DataType::I64 => fold!(i64, 8, |x: i64, y: i64| x.wrapping_add(y)),
    }
}

/// The reduction over ranks `0..n` of element `index`, by residue (see the module doc).
struct ReducedTable {
    by_residue: [i64; PERIOD],
}

impl ReducedTable {
    fn new(n: usize, op: ReduceOp) -> ReducedTable {
        let mut by_residue = [0i64; PERIOD];
        for (res, slot) in by_residue.iter_mut().enumerate() {
            // Rank residues repeat every PERIOD ranks: count each residue's multiplicity.
            let mut acc: Option<i64> = None;
            for rr in 0..PERIOD.min(n) {
                let mult = (n - rr).div_ceil(PERIOD) as i64;
                let v = input_value(rr, res);
                let contrib = match op {
                    ReduceOp::Sum => v * mult,
                    ReduceOp::Min | ReduceOp::Max => v,
                };
                acc = Some(acc.map_or(contrib, |a| op.fold(a, contrib)));
            }
            *slot = acc.unwrap_or(0);
        }
        ReducedTable { by_residue }
    }

    fn get(&self, index: usize) -> i64 {
        self.by_residue[index % PERIOD]
    }
}

/// Counts the wrong output elements of a collective run in data mode, over all ranks.
///
/// `programs[r]` is rank `r`'s program (its `input`/`output` ranges say where the data is, by
/// the layout conventions of [`crate::program`]); `buffers[r]` its final buffer. The expected
/// values follow from the collective's definition and [`input_value`] alone. A rank whose buffer
/// is missing or has the wrong length counts all its output elements as wrong.
pub fn count_wrong(
    op: Collective,
    dtype: DataType,
    redop: ReduceOp,
    root: usize,
    programs: &[Program],
    buffers: &[Option<&[u8]>],
) -> u64 {
    let n = programs.len();
    let es = dtype.size();
    let reduced = ReducedTable::new(n, redop);
    // All-Gather: which rank contributed each global position.
    let owners: Vec<(usize, usize, usize)> = if op == Collective::AllGather {
        let mut v: Vec<_> = programs
            .iter()
            .enumerate()
            .map(|(r, p)| (p.input.offset, p.input.offset + p.input.len, r))
            .collect();
        v.sort_unstable();
        v
    } else {
        Vec::new()
    };
    let owner_of = |i: usize| -> Option<usize> {
        let k = owners.partition_point(|&(start, _, _)| start <= i);
        k.checked_sub(1)
            .map(|k| owners[k])
            .filter(|&(_, end, _)| i < end)
            .map(|(_, _, r)| r)
    };
    // All-To-All block layouts of every rank, computed once (not per element).
    let a2a_layouts: Vec<Vec<crate::chunk::ChunkRange>> = if op == Collective::AllToAll {
        let count = programs.first().map_or(0, |p| p.output.len);
        (0..n).map(|r| all_to_all_blocks(n, count, r)).collect()
    } else {
        Vec::new()
    };
    let mut wrong = 0u64;
    for (r, p) in programs.iter().enumerate() {
        let out = p.output;
        let Some(buf) = buffers
            .get(r)
            .copied()
            .flatten()
            .filter(|b| b.len() == p.buffer_len * es)
        else {
            wrong += out.len as u64;
            continue;
        };
        for k in 0..out.len {
            let pos = out.offset + k;
            let expected: Option<i64> = match op {
                Collective::AllReduce | Collective::ReduceScatter | Collective::Reduce => {
                    Some(reduced.get(pos))
                }
                Collective::AllGather => owner_of(pos).map(|o| input_value(o, pos)),
                Collective::Broadcast => Some(input_value(root, pos)),
                Collective::AllToAll => all_to_all_expected(&a2a_layouts, r, k),
            };
            let got = get(dtype, &buf[pos * es..(pos + 1) * es]);
            if expected.is_none() || got != expected {
                wrong += 1;
            }
        }
    }
    wrong
}

/// Element `k` of rank `r`'s All-To-All output: output block i came from rank i's input
/// block r (`layouts[rank]` is [`all_to_all_blocks`] of that rank).
fn all_to_all_expected(
    layouts: &[Vec<crate::chunk::ChunkRange>],
    r: usize,
    k: usize,
) -> Option<i64> {
    let blocks = layouts.get(r)?;
    let i = blocks.partition_point(|b| b.offset <= k).checked_sub(1)?;
    let within = k - blocks[i].offset;
    let src_block = layouts.get(i)?.get(r).copied()?;
    Some(input_value(i, src_block.offset + within))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms;
    use crate::interpret::run_local;

    fn run_bytes(programs: &[Program], dtype: DataType, op: ReduceOp) -> Vec<Option<Vec<u8>>> {
        // The interpreter works on i64; the pattern's sums are exact in every type.
        let inputs = reference_inputs(programs);
        assert_eq!(op, ReduceOp::Sum, "the reference interpreter only sums");
        let outs = run_local(programs, inputs).expect("programs run");
        programs
            .iter()
            .zip(outs)
            .map(|(p, out)| {
                let es = dtype.size();
                let mut buf = vec![0u8; p.buffer_len * es];
                for (k, v) in out.iter().enumerate() {
                    let pos = p.output.offset + k;
                    put(dtype, *v, &mut buf[pos * es..(pos + 1) * es]);
                }
                Some(buf)
            })
            .collect()
    }

    #[test]
    fn pattern_sums_are_exact_in_f32() {
        for n in [1, 2, 5, 17, 18, 1000] {
            let t = ReducedTable::new(n, ReduceOp::Sum);
            for i in 0..40 {
                let direct: i64 = (0..n).map(|r| input_value(r, i)).sum();
                assert_eq!(t.get(i), direct, "n {n} i {i}");
                assert!(direct.abs() <= 8 * n as i64);
            }
            for op in [ReduceOp::Min, ReduceOp::Max] {
                let t = ReducedTable::new(n, op);
                for i in 0..40 {
                    let vals = (0..n).map(|r| input_value(r, i));
                    let direct = if op == ReduceOp::Min {
                        vals.min()
                    } else {
                        vals.max()
                    };
                    assert_eq!(Some(t.get(i)), direct);
                }
            }
        }
    }

    #[test]
    fn check_accepts_correct_and_counts_corruption() {
        for (op, programs) in [
            (
                Collective::AllReduce,
                algorithms::ring_all_reduce(5, 23).unwrap(),
            ),
            (
                Collective::ReduceScatter,
                algorithms::ring_reduce_scatter(4, 10).unwrap(),
            ),
            (
                Collective::AllGather,
                algorithms::ring_all_gather(3, 11).unwrap(),
            ),
            (
                Collective::AllToAll,
                algorithms::direct_all_to_all(4, 13).unwrap(),
            ),
        ] {
            for dtype in [DataType::F32, DataType::I32, DataType::F64, DataType::I64] {
                let mut bufs = run_bytes(&programs, dtype, ReduceOp::Sum);
                let refs = |b: &[Option<Vec<u8>>]| {
                    count_wrong(
                        op,
                        dtype,
                        ReduceOp::Sum,
                        0,
                        &programs,
                        &b.iter().map(|x| x.as_deref()).collect::<Vec<_>>(),
                    )
                };
                assert_eq!(refs(&bufs), 0, "{op:?} {dtype}");
                // Corrupt one output element of rank 1.
                let es = dtype.size();
                let pos = programs[1].output.offset;
                if let Some(b) = bufs[1].as_mut() {
                    b[pos * es] ^= 0x40;
                }
                assert_eq!(refs(&bufs), 1);
                bufs[2] = None;
                assert!(refs(&bufs) > programs[2].output.len as u64);
            }
        }
    }

    #[test]
    fn apply_reduces_in_the_element_type() {
        let mut a = vec![0u8; 8];
        let mut b = vec![0u8; 8];
        put(DataType::I32, 5, &mut a[..4]);
        put(DataType::I32, -7, &mut a[4..]);
        put(DataType::I32, 3, &mut b[..4]);
        put(DataType::I32, 9, &mut b[4..]);
        let mut m = a.clone();
        apply(DataType::I32, ReduceOp::Min, true, &mut m, &b);
        assert_eq!(get(DataType::I32, &m[..4]), Some(3));
        assert_eq!(get(DataType::I32, &m[4..]), Some(-7));
        apply(DataType::I32, ReduceOp::Sum, true, &mut a, &b);
        assert_eq!(get(DataType::I32, &a[..4]), Some(8));
        assert_eq!(get(DataType::I32, &a[4..]), Some(2));
        let mut f = vec![0u8; 4];
        put(DataType::F32, 2, &mut f);
        let mut g = vec![0u8; 4];
        put(DataType::F32, -6, &mut g);
        apply(DataType::F32, ReduceOp::Max, true, &mut f, &g);
        assert_eq!(get(DataType::F32, &f), Some(2));
        apply(DataType::F32, ReduceOp::Sum, false, &mut f, &g);
        assert_eq!(get(DataType::F32, &f), Some(-6));
    }
}
