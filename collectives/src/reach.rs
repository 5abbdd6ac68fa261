//! Reachability in a program's step DAG: for every step, the set of steps it (transitively)
//! depends on. Used by [`crate::program::ProgramBuilder`] to keep dependency lists minimal and
//! by [`crate::program::validate`] to check that conflicting accesses are ordered.
//!
//! Step `i` only has ancestors among steps `0..i`, so its set holds `i` bits; a program of `s`
//! steps costs about `s^2 / 16` bytes.

/// A fixed-capacity set of step indices.
#[derive(Debug, Clone, Default)]
pub(crate) struct BitSet {
    words: Vec<u64>,
}

impl BitSet {
    /// An empty set able to hold indices `0..bits`.
    pub(crate) fn new(bits: usize) -> BitSet {
        BitSet {
            words: vec![0; bits.div_ceil(64)],
        }
    }

    /// Adds `i`; ignored if `i` is beyond the capacity.
    pub(crate) fn insert(&mut self, i: usize) {
        if let Some(w) = self.words.get_mut(i / 64) {
            *w |= 1 << (i % 64);
        }
    }

    /// Whether `i` is in the set.
    pub(crate) fn contains(&self, i: usize) -> bool {
        self.words
            .get(i / 64)
            .is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    /// Adds every element of `other` that fits.
    pub(crate) fn union_with(&mut self, other: &BitSet) {
        for (w, o) in self.words.iter_mut().zip(&other.words) {
            *w |= o;
        }
    }
}

/// The ancestor set of a step with index `index` whose direct dependencies are `deps`, given
/// the ancestor sets of all earlier steps. Dependencies that are not earlier steps are ignored
/// (validation reports them).
pub(crate) fn ancestors_of(
    index: usize,
    deps: impl IntoIterator<Item = usize>,
    earlier: &[BitSet],
) -> BitSet {
    let mut set = BitSet::new(index);
    for d in deps {
        if d < index {
            if let Some(anc) = earlier.get(d) {
                set.insert(d);
                set.union_with(anc);
            }
        }
    }
    set
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transitive_ancestors() {
        // 0 <- 1 <- 2, 3 independent, 4 <- {2, 3}
        let mut anc = Vec::new();
        for (i, deps) in [vec![], vec![0], vec![1], vec![], vec![2, 3]]
            .into_iter()
            .enumerate()
        {
            let set = ancestors_of(i, deps, &anc);
            anc.push(set);
        }
        assert!(
            anc[4].contains(0) && anc[4].contains(1) && anc[4].contains(2) && anc[4].contains(3)
        );
        assert!(anc[2].contains(0) && !anc[2].contains(3));
        assert!(!anc[3].contains(0));
        assert!(!anc[0].contains(0));
    }
}
