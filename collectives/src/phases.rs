//! Collective phases over one *group* of ranks, the building blocks of every plan.
//!
//! A group is a list of global ranks; member `i` is `group[i]`. Flat algorithms run one phase
//! over the group of all ranks; hierarchical ones run phases over the groups of each dimension.
//! Blocks are [`Segs`], so the same code serves contiguous chunks and the scattered blocks of
//! chunked / hierarchical Reduce-Scatter.
//!
//! - Reduce-Scatter phase: every member holds (partial sums of) all `p` blocks; afterwards
//!   member `i` holds block `i` reduced over the group.
//!   * ring: round `s`, member `i` sends block `i - s - 1` to `i + 1` and adds block `i - s - 2`
//!     from `i - 1` (`p - 1` rounds of one block);
//!   * direct: round `k = 1..p`, member `i` sends block `i + k` to member `i + k` and adds
//!     block `i` from member `i - k` — shifted so no receiver is hit by all senders at once;
//!   * halving-doubling (recursive halving, `p` a power of two): with `m = p/2, p/4, .., 1`,
//!     member `i` exchanges with `i ^ m`, keeping the half of its current `2m` blocks that
//!     contains block `i` and sending the other half: `log2 p` rounds, data halving each round.
//! - All-Gather phase: member `i` holds block `i`; afterwards every member holds all blocks
//!   (ring: the mirror of the ring Reduce-Scatter; direct: member `i` sends block `i` to
//!   `i + k` in round `k`; recursive doubling with `m = 1, 2, .., p/2`).
//! - All-Reduce phase over a region: Reduce-Scatter then All-Gather on the region split evenly
//!   into `p` blocks; halving-doubling with `p` not a power of two first folds: with
//!   `2^k <= p < 2^(k+1)` and `rem = p - 2^k`, members `2j + 1 < 2 rem` send their region to
//!   `2j`, the `2^k` remaining members run halving-doubling, and the `2j` send the result back.
//! - Double binary tree All-Reduce (NCCL's shape): tree 0 is NCCL's in-order binary tree over
//!   member indices (member `i`'s level is its lowest set bit; member 0 is the root with a single
//!   child), tree 1 is the same tree shifted by one member (odd `p`) or mirrored `i -> p-1-i`
//!   (even `p`), so most interior members of one tree are leaves of the other. Each tree
//!   reduces, then broadcasts, one half of the region, cut into [`TREE_PIECES`] pieces that
//!   pipeline up and down the tree; tree `t` uses channel `ch + t`.
//! - Tree reduce / broadcast of pieces along any parent map: chains (pipeline) and binary heaps
//!   rooted anywhere, used by Broadcast and Reduce.

use crate::algorithms::AlgorithmError;
use crate::chunk::ChunkRange;
use crate::emit::Emitter;
use crate::plan::Algorithm;
use crate::segs::{concat, single, split, Segs};

/// Pieces each half of the buffer is cut into by the double binary tree, and the buffer by the
/// pipeline and tree Broadcast / Reduce: enough to keep every level of a tree (or every link of
/// a chain of up to 8 ranks) busy at once, few enough that per-message overhead stays small.
pub const TREE_PIECES: usize = 8;

/// `(i - back) mod p`, for `i < p`.
fn back(i: usize, back: usize, p: usize) -> usize {
    (i + p - back % p) % p
}

/// Concatenations of consecutive blocks, in O(1) when the blocks are laid out back to back
/// (the usual case), so halving-doubling costs O(log p) per rank rather than O(p).
struct Runs<'a> {
    blocks: &'a [Segs],
    /// Start of every block (and the end of the last), when contiguous.
    starts: Option<Vec<usize>>,
}

impl<'a> Runs<'a> {
    fn new(blocks: &'a [Segs]) -> Runs<'a> {
        let base = blocks
            .iter()
            .find_map(|b| b.first())
            .map_or(0, |r| r.offset);
        let mut starts = Vec::with_capacity(blocks.len() + 1);
        let mut at = base;
        let mut contiguous = true;
        for b in blocks {
            starts.push(at);
            match b.as_slice() {
                [] => {}
                [r] if r.offset == at => at += r.len,
                _ => contiguous = false,
            }
        }
        starts.push(at);
        Runs {
            blocks,
            starts: contiguous.then_some(starts),
        }
    }

    /// Blocks `a .. b` as one block.
    fn concat(&self, a: usize, b: usize) -> Segs {
        match &self.starts {
            Some(s) => single(ChunkRange::new(s[a], s[b] - s[a])),
            None => concat(&self.blocks[a..b]),
        }
    }
}

fn not_power_of_two(p: usize) -> AlgorithmError {
    AlgorithmError::NotPowerOfTwo { n: p }
}

/// Reduce-Scatter of `blocks` (one per member) over `group` with `algorithm`.
pub(crate) fn reduce_scatter(
    e: &mut Emitter,
    algorithm: Algorithm,
    group: &[usize],
    blocks: &[Segs],
    ch: u32,
) -> Result<(), AlgorithmError> {
    let p = group.len();
    if p <= 1 {
        return Ok(());
    }
    match algorithm {
        Algorithm::Ring => {
            for (i, &r) in group.iter().enumerate() {
                let (next, prev) = (group[(i + 1) % p], group[back(i, 1, p)]);
                for s in 0..p - 1 {
                    e.send(r, next, &blocks[back(i, s + 1, p)], ch)?;
                    e.recv(r, prev, &blocks[back(i, s + 2, p)], true, ch)?;
                }
            }
        }
        Algorithm::Direct => {
            for (i, &r) in group.iter().enumerate() {
                for k in 1..p {
                    let to = (i + k) % p;
                    e.send(r, group[to], &blocks[to], ch)?;
                    e.recv(r, group[back(i, k, p)], &blocks[i], true, ch)?;
                }
            }
        }
        Algorithm::HalvingDoubling => {
            if !p.is_power_of_two() {
                return Err(not_power_of_two(p));
            }
            let runs = Runs::new(blocks);
            for (i, &r) in group.iter().enumerate() {
                let mut m = p / 2;
                while m >= 1 {
                    let lo = i & !(2 * m - 1);
                    let (keep, give) = if i & m != 0 {
                        (lo + m, lo)
                    } else {
                        (lo, lo + m)
                    };
                    let peer = group[i ^ m];
                    e.send(r, peer, &runs.concat(give, give + m), ch)?;
                    e.recv(r, peer, &runs.concat(keep, keep + m), true, ch)?;
                    m /= 2;
                }
            }
        }
        other => return Err(AlgorithmError::NotAPhase { algorithm: other }),
    }
    Ok(())
}

/// All-Gather of `blocks` (member `i` holds block `i`) over `group` with `algorithm`.
pub(crate) fn all_gather(
    e: &mut Emitter,
    algorithm: Algorithm,
    group: &[usize],
    blocks: &[Segs],
    ch: u32,
) -> Result<(), AlgorithmError> {
    let p = group.len();
    if p <= 1 {
        return Ok(());
    }
    match algorithm {
        Algorithm::Ring => {
            for (i, &r) in group.iter().enumerate() {
                let (next, prev) = (group[(i + 1) % p], group[back(i, 1, p)]);
                for s in 0..p - 1 {
                    e.send(r, next, &blocks[back(i, s, p)], ch)?;
                    e.recv(r, prev, &blocks[back(i, s + 1, p)], false, ch)?;
                }
            }
        }
        Algorithm::Direct => {
            for (i, &r) in group.iter().enumerate() {
                for k in 1..p {
                    let from = back(i, k, p);
                    e.send(r, group[(i + k) % p], &blocks[i], ch)?;
                    e.recv(r, group[from], &blocks[from], false, ch)?;
                }
            }
        }
        Algorithm::HalvingDoubling => {
            if !p.is_power_of_two() {
                return Err(not_power_of_two(p));
            }
            let runs = Runs::new(blocks);
            for (i, &r) in group.iter().enumerate() {
                let mut m = 1;
                while m < p {
                    let own = i & !(m - 1);
                    let theirs = own ^ m;
                    let peer = group[i ^ m];
                    e.send(r, peer, &runs.concat(own, own + m), ch)?;
                    e.recv(r, peer, &runs.concat(theirs, theirs + m), false, ch)?;
                    m *= 2;
                }
            }
        }
        other => return Err(AlgorithmError::NotAPhase { algorithm: other }),
    }
    Ok(())
}

/// Channels an All-Reduce phase with `algorithm` uses, from its base channel on.
pub(crate) fn channels(algorithm: Algorithm) -> u32 {
    match algorithm {
        Algorithm::DoubleBinaryTree => 2,
        _ => 1,
    }
}

/// All-Reduce of `region` over `group` with `algorithm`.
pub(crate) fn all_reduce(
    e: &mut Emitter,
    algorithm: Algorithm,
    group: &[usize],
    region: &Segs,
    ch: u32,
) -> Result<(), AlgorithmError> {
    let p = group.len();
    if p <= 1 {
        return Ok(());
    }
    match algorithm {
        Algorithm::DoubleBinaryTree => double_binary_tree(e, group, region, ch),
        Algorithm::HalvingDoubling if !p.is_power_of_two() => {
            let p2 = 1usize << p.ilog2();
            let rem = p - p2;
            for j in 0..rem {
                let (even, odd) = (group[2 * j], group[2 * j + 1]);
                e.send(odd, even, region, ch)?;
                e.recv(even, odd, region, true, ch)?;
            }
            let survivors: Vec<usize> = (0..p2)
                .map(|v| {
                    if v < rem {
                        group[2 * v]
                    } else {
                        group[v + rem]
                    }
                })
                .collect();
            let blocks = split(region, p2);
            reduce_scatter(e, algorithm, &survivors, &blocks, ch)?;
            all_gather(e, algorithm, &survivors, &blocks, ch)?;
            for j in 0..rem {
                let (even, odd) = (group[2 * j], group[2 * j + 1]);
                e.send(even, odd, region, ch)?;
                e.recv(odd, even, region, false, ch)?;
            }
            Ok(())
        }
        _ => {
            let blocks = split(region, p);
            reduce_scatter(e, algorithm, group, &blocks, ch)?;
            all_gather(e, algorithm, group, &blocks, ch)
        }
    }
}

/// NCCL's binary tree over `n` members: the parent of member `r` (`None` for the root, 0).
fn btree_parent(n: usize, r: usize) -> Option<usize> {
    if r == 0 || r >= n {
        return None;
    }
    let bit = 1usize << r.trailing_zeros();
    let up = (r ^ bit) | (bit << 1);
    Some(if up >= n { r ^ bit } else { up })
}

/// Parent of member `r` in tree `t` (0 or 1) of the double binary tree over `n` members.
pub(crate) fn dbt_parent(n: usize, t: usize, r: usize) -> Option<usize> {
    match t {
        0 => btree_parent(n, r),
        _ if n % 2 == 1 => btree_parent(n, (r + n - 1) % n).map(|u| (u + 1) % n),
        _ => btree_parent(n, n - 1 - r).map(|u| n - 1 - u),
    }
}

/// Children lists from a parent map, each in ascending member order.
fn children_of(parents: &[Option<usize>]) -> Vec<Vec<usize>> {
    let mut children = vec![Vec::new(); parents.len()];
    for (i, p) in parents.iter().enumerate() {
        if let Some(p) = *p {
            children[p].push(i);
        }
    }
    children
}

fn double_binary_tree(
    e: &mut Emitter,
    group: &[usize],
    region: &Segs,
    ch: u32,
) -> Result<(), AlgorithmError> {
    let p = group.len();
    for (t, half) in split(region, 2).iter().enumerate() {
        let parents: Vec<Option<usize>> = (0..p).map(|i| dbt_parent(p, t, i)).collect();
        let pieces = split(half, TREE_PIECES);
        // t < 2, so the cast cannot truncate.
        let ch_t = ch + t as u32;
        tree_reduce(e, group, &parents, &pieces, ch_t)?;
        tree_broadcast(e, group, &parents, &pieces, ch_t)?;
    }
    Ok(())
}

/// Each piece is reduced towards the root of the tree given by `parents` (member indices):
/// a member adds each child's piece in, then sends the piece to its parent.
pub(crate) fn tree_reduce(
    e: &mut Emitter,
    group: &[usize],
    parents: &[Option<usize>],
    pieces: &[Segs],
    ch: u32,
) -> Result<(), AlgorithmError> {
    let children = children_of(parents);
    for (i, &r) in group.iter().enumerate() {
        for piece in pieces {
            for &c in &children[i] {
                e.recv(r, group[c], piece, true, ch)?;
            }
            if let Some(up) = parents[i] {
                e.send(r, group[up], piece, ch)?;
            }
        }
    }
    Ok(())
}

/// Each piece flows from the root of the tree given by `parents` to every member.
pub(crate) fn tree_broadcast(
    e: &mut Emitter,
    group: &[usize],
    parents: &[Option<usize>],
    pieces: &[Segs],
    ch: u32,
) -> Result<(), AlgorithmError> {
    let children = children_of(parents);
    for (i, &r) in group.iter().enumerate() {
        for piece in pieces {
            if let Some(up) = parents[i] {
                e.recv(r, group[up], piece, false, ch)?;
            }
            for &c in &children[i] {
                e.send(r, group[c], piece, ch)?;
            }
        }
    }
    Ok(())
}

/// The parent map of a chain from `root`: member `root + q` (mod `p`) receives from
/// `root + q - 1`.
pub(crate) fn chain_parents(p: usize, root: usize) -> Vec<Option<usize>> {
    (0..p)
        .map(|i| {
            let q = back(i, root, p);
            (q > 0).then(|| (root + q - 1) % p)
        })
        .collect()
}

/// The parent map of a binary heap rooted at `root`: with `q = i - root` (mod `p`), the parent
/// of `q` is `(q - 1) / 2`, so depth is `floor(log2 p)`.
pub(crate) fn heap_parents(p: usize, root: usize) -> Vec<Option<usize>> {
    (0..p)
        .map(|i| {
            let q = back(i, root, p);
            (q > 0).then(|| (root + (q - 1) / 2) % p)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Follows parents from every member; all must reach `root` within `p` hops.
    fn is_tree_rooted_at(parents: &[Option<usize>], root: usize) -> bool {
        (0..parents.len()).all(|mut i| {
            for _ in 0..=parents.len() {
                match parents[i] {
                    None => return i == root,
                    Some(p) => i = p,
                }
            }
            false
        })
    }

    #[test]
    fn double_binary_trees_are_trees_and_complementary() {
        for n in 1..=40 {
            for t in 0..2 {
                let parents: Vec<_> = (0..n).map(|r| dbt_parent(n, t, r)).collect();
                let roots: Vec<_> = (0..n).filter(|&r| parents[r].is_none()).collect();
                assert_eq!(roots.len(), 1, "n={n} t={t}");
                assert!(is_tree_rooted_at(&parents, roots[0]), "n={n} t={t}");
                assert!(children_of(&parents).iter().all(|c| c.len() <= 2));
            }
            // NCCL's point: for even n, every rank is a leaf in at least one tree.
            if n % 2 == 0 && n >= 2 {
                let kids: Vec<_> = (0..2)
                    .map(|t| children_of(&(0..n).map(|r| dbt_parent(n, t, r)).collect::<Vec<_>>()))
                    .collect();
                for (r, (a, b)) in kids[0].iter().zip(&kids[1]).enumerate() {
                    assert!(a.is_empty() || b.is_empty(), "n={n} r={r}");
                }
            }
        }
        // The 8-rank tree 0 of NCCL: 0 -> 4 -> {2, 6}, 2 -> {1, 3}, 6 -> {5, 7}.
        let p: Vec<_> = (0..8).map(|r| btree_parent(8, r)).collect();
        assert_eq!(
            p,
            [
                None,
                Some(2),
                Some(4),
                Some(2),
                Some(0),
                Some(6),
                Some(4),
                Some(6)
            ]
        );
    }

    #[test]
    fn runs_concatenate_in_constant_time_only_when_contiguous() {
        let c = ChunkRange::new;
        let back_to_back = vec![vec![c(10, 2)], vec![], vec![c(12, 3)], vec![c(15, 1)]];
        let runs = Runs::new(&back_to_back);
        assert!(runs.starts.is_some());
        assert_eq!(runs.concat(1, 3), [c(12, 3)]);
        assert_eq!(runs.concat(0, 4), [c(10, 6)]);
        assert!(runs.concat(1, 2).is_empty());
        let scattered = vec![vec![c(0, 2)], vec![c(5, 1)]];
        let runs = Runs::new(&scattered);
        assert!(runs.starts.is_none());
        assert_eq!(runs.concat(0, 2), [c(0, 2), c(5, 1)]);
    }

    #[test]
    fn chains_and_heaps_are_rooted_trees() {
        for p in 1..=12 {
            for root in 0..p {
                assert!(is_tree_rooted_at(&chain_parents(p, root), root));
                assert!(is_tree_rooted_at(&heap_parents(p, root), root));
            }
        }
        assert_eq!(chain_parents(4, 2), [Some(3), Some(0), None, Some(2)]);
    }
}
