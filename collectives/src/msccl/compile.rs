//! From the parsed algorithm to one program per rank, checked by running it in memory.

use std::collections::BTreeSet;

use super::{
    err, Buffer, Gpu, Loc, MStep, Msccl, MscclError, StepType, ThreadBlock, MAX_CHECK_CHUNKS,
};
use crate::chunk::ChunkRange;
use crate::data::input_value;
use crate::interpret::{run_local, RunError};
use crate::op::Collective;
use crate::program::{Program, ProgramBuilder, StepId, StepKind, ValidationError};

impl Msccl {
    /// The collective `coll` names, if fabemu has it.
    pub fn collective(&self) -> Option<Collective> {
        match self.coll.as_str() {
            "allreduce" => Some(Collective::AllReduce),
            "allgather" => Some(Collective::AllGather),
            "reducescatter" => Some(Collective::ReduceScatter),
            "alltoall" => Some(Collective::AllToAll),
            _ => None,
        }
    }

    /// Compiles the algorithm into one program per rank for `op` over `ranks` ranks and
    /// `count` elements, and checks that it computes `op` (see the [module docs](crate::msccl)).
    ///
    /// # Errors
    /// [`MscclError`]: `ngpus` differs from `ranks`, `coll` is not `op` (`allreduce`,
    /// `allgather`, `reducescatter`, `alltoall`), `count` is not a
    /// multiple of `nchunksperloop`, a declared buffer size does not fit the collective, a
    /// step type fabemu cannot run (`re`), a dependency cycle, or the in-memory check failed
    /// (deadlock, mismatched message, wrong result).
    pub fn compile(
        &self,
        op: Collective,
        ranks: usize,
        count: usize,
    ) -> Result<Vec<Program>, MscclError> {
        let n = self.gpus.len();
        if n != ranks {
            return Err(err(
                &self.at,
                format!("ngpus is {n} but the collective runs on {ranks} ranks"),
            ));
        }
        match self.collective() {
            Some(c) if c == op => {}
            _ => {
                return Err(err(
                    &self.at,
                    format!(
                        "coll is `{}`; this collective is {} (fabemu reads MSCCL allreduce, \
                         allgather, reducescatter and alltoall)",
                        self.coll,
                        op.key()
                    ),
                ))
            }
        }
        let c = self.nchunksperloop;
        if op != Collective::AllReduce && c % n != 0 {
            return Err(err(
                &self.at,
                format!(
                    "nchunksperloop ({c}) must be a multiple of ngpus ({n}) for {}",
                    op.key()
                ),
            ));
        }
        // The in-memory check with one element per chunk, then the real size.
        let chunks: usize = self
            .gpus
            .iter()
            .map(|g| {
                let temps: usize = g.tbs.iter().flat_map(|t| &t.steps).map(|s| s.cnt).sum();
                c.saturating_mul(2)
                    .saturating_add(g.s_chunks)
                    .saturating_add(temps)
            })
            .fold(0usize, usize::saturating_add);
        if chunks > MAX_CHECK_CHUNKS {
            return Err(err(
                &self.at,
                format!(
                    "the ranks' buffers hold {chunks} chunks in all (limit {MAX_CHECK_CHUNKS}); \
                     use fewer chunks or scratch"
                ),
            ));
        }
        let check = self.build(op, c)?;
        self.verify(op, &check)?;
        if count % c != 0 {
            return Err(MscclError {
                at: None,
                message: format!(
                    "{count} elements do not split into nchunksperloop = {c} equal chunks; \
                     use a size that is a multiple of {c} elements"
                ),
            });
        }
        if count == c {
            return Ok(check.into_iter().map(|(p, _)| p).collect());
        }
        Ok(self.build(op, count)?.into_iter().map(|(p, _)| p).collect())
    }

    /// The programs for `count` elements (a multiple of `nchunksperloop`), each with the XML
    /// step every IR step came from.
    fn build(&self, op: Collective, count: usize) -> Result<Vec<(Program, Vec<Loc>)>, MscclError> {
        let n = self.gpus.len();
        let c = self.nchunksperloop;
        let len = count / c;
        let block = c / n.max(1);
        let mut out = Vec::with_capacity(n);
        for (r, gpu) in self.gpus.iter().enumerate() {
            // Chunks of the rank's input and output, and where they sit globally (in chunks).
            let (i_chunks, i_base, o_chunks, o_base) = match op {
                Collective::AllGather => (block, r * block, c, 0),
                Collective::ReduceScatter => (c, 0, block, r * block),
                _ => (c, 0, c, 0),
            };
            self.check_buffer_sizes(gpu, op, i_chunks, o_chunks)?;
            // In place (or no output buffer declared), `o` is the input's global view.
            let separate_o = !self.inplace && gpu.o_chunks != 0;
            // Layout (elements): global [0, count), own output region, scratch, temporaries.
            // All-To-All's output is [count, 2 count) by the IR's convention, so its output
            // region always exists.
            let a2a = op == Collective::AllToAll;
            let temps: usize = gpu
                .tbs
                .iter()
                .flat_map(|t| &t.steps)
                .filter(|s| s.kind == StepType::RecvReduceSend)
                .map(|s| s.cnt)
                .sum();
            // Every region is at most this many chunks in all (`c` for the collective, at most
            // `c` for the output region), so once it fits, no position below overflows.
            (2 * c)
                .checked_add(gpu.s_chunks)
                .and_then(|k| k.checked_add(temps))
                .and_then(|k| k.checked_mul(len))
                .ok_or_else(|| err(&gpu.at, "the buffers are too large for this size"))?;
            let o_region = count;
            let s_region = if separate_o || a2a {
                o_region + o_chunks * len
            } else {
                o_region
            };
            let t_region = s_region + gpu.s_chunks * len;
            let buffer_len = t_region + temps * len;
            let view = |(buf, off): (Buffer, usize), cnt: usize| -> ChunkRange {
                let start = match buf {
                    Buffer::Input => (i_base + off) * len,
                    Buffer::Output if separate_o => o_region + off * len,
                    // In place: the output is its global positions.
                    Buffer::Output => (o_base + off) * len,
                    Buffer::Scratch => s_region + off * len,
                };
                ChunkRange::new(start, cnt * len)
            };
            let input = ChunkRange::new(i_base * len, i_chunks * len);
            let output = if a2a {
                ChunkRange::new(o_region, count)
            } else {
                ChunkRange::new(o_base * len, o_chunks * len)
            };
            let mut b = ProgramBuilder::new(r, buffer_len, input, output);
            let mut origin: Vec<Loc> = Vec::new();
            // The completion of each XML step: the IR steps a later step must wait for.
            let mut done: Vec<Vec<Vec<StepId>>> = gpu
                .tbs
                .iter()
                .map(|t| vec![Vec::new(); t.steps.len()])
                .collect();
            let mut next_temp = t_region;
            for (tb, s) in topological(gpu)? {
                let t = &gpu.tbs[tb];
                let st = &t.steps[s];
                let mut after: Vec<StepId> = Vec::new();
                if s > 0 {
                    after.extend_from_slice(&done[tb][s - 1]);
                }
                if let Some((db, ds)) = st.dep {
                    after.extend_from_slice(&done[db][ds]);
                }
                let src = view(st.src, st.cnt);
                let dst = view(st.dst, st.cnt);
                let seq = ir_kinds(st, t, src, dst, len, &mut next_temp)?;
                if seq.is_empty() {
                    // Nothing to run (a nop, a copy onto itself): later steps wait for what
                    // this one waited for.
                    after.sort_unstable();
                    after.dedup();
                    done[tb][s] = after;
                    continue;
                }
                let mut last = None;
                for kind in seq {
                    let deps: Vec<StepId> = match last {
                        Some(l) => vec![l],
                        None => after.clone(),
                    };
                    last = Some(b.push(kind, &deps));
                    origin.push(st.at.clone());
                }
                done[tb][s] = last.into_iter().collect();
            }
            let result = view((Buffer::Output, 0), o_chunks);
            if result != output {
                // Move the result to the rank's output positions.
                b.copy(result, output);
                origin.push(gpu.at.clone());
            }
            out.push((b.finish(), origin));
        }
        Ok(out)
    }

    /// `gpu`'s declared input and output sizes against what `op` has: `i_chunks` input and
    /// `o_chunks` output chunks; no steps on `o` where it has none.
    fn check_buffer_sizes(
        &self,
        gpu: &Gpu,
        op: Collective,
        i_chunks: usize,
        o_chunks: usize,
    ) -> Result<(), MscclError> {
        let n = self.gpus.len();
        let c = self.nchunksperloop;
        if gpu.i_chunks != i_chunks {
            return Err(err(
                &gpu.at,
                format!(
                    "i_chunks is {}; {} with nchunksperloop {c} on {n} ranks has {i_chunks} \
                     input chunks",
                    gpu.i_chunks,
                    op.key()
                ),
            ));
        }
        if gpu.o_chunks != 0 && gpu.o_chunks != o_chunks {
            return Err(err(
                &gpu.at,
                format!(
                    "o_chunks is {}; {} with nchunksperloop {c} on {n} ranks has \
                     {o_chunks} output chunks",
                    gpu.o_chunks,
                    op.key()
                ),
            ));
        }
        if gpu.o_chunks == 0 && !self.inplace {
            // Not in place and no output buffer: only an algorithm that never touches `o`
            // could mean that; treat `o` as the input's view, as in place.
            let uses_o = gpu.tbs.iter().flat_map(|t| &t.steps).any(|s| {
                (s.kind.reads_src() && s.src.0 == Buffer::Output)
                    || (s.kind.writes_dst() && s.dst.0 == Buffer::Output)
            });
            if uses_o {
                return Err(err(&gpu.at, "steps use buffer `o` but o_chunks is 0"));
            }
        }
        Ok(())
    }

    /// Runs `programs` in memory and checks every output element.
    fn verify(&self, op: Collective, programs: &[(Program, Vec<Loc>)]) -> Result<(), MscclError> {
        let progs: Vec<Program> = programs.iter().map(|(p, _)| p.clone()).collect();
        let step_at = |rank: usize, step: StepId| -> Option<Loc> {
            programs.get(rank).and_then(|(_, o)| o.get(step.0)).cloned()
        };
        let inputs = crate::data::reference_inputs(&progs);
        let outputs = run_local(&progs, inputs).map_err(|e| match e {
            RunError::Invalid(v) => {
                let (rank, step) = match &v {
                    ValidationError::UnmatchedSend { src, step, .. } => (*src, *step),
                    ValidationError::UnmatchedRecv { dst, step, .. } => (*dst, *step),
                    ValidationError::LengthMismatch { dst, recv_step, .. } => (*dst, *recv_step),
                    ValidationError::Race { rank, second, .. } => (*rank, *second),
                    _ => (usize::MAX, StepId(0)),
                };
                MscclError {
                    at: step_at(rank, step),
                    message: format!("the algorithm is inconsistent: {v}"),
                }
            }
            RunError::Deadlock { blocked, .. } => {
                let at = blocked.first().and_then(|b| step_at(b.rank, b.step));
                MscclError {
                    at,
                    message: format!(
                        "deadlock: no rank can go on ({} steps wait for messages that are only \
                         sent after them)",
                        blocked.len()
                    ),
                }
            }
            other => MscclError {
                at: None,
                message: other.to_string(),
            },
        })?;
        let n = progs.len();
        for (r, (p, got)) in progs.iter().zip(&outputs).enumerate() {
            for (k, &v) in got.iter().enumerate() {
                let pos = p.output.offset + k;
                let want: i64 = match op {
                    Collective::AllToAll => {
                        // Output block b comes from rank b's input block r.
                        let blk = (self.nchunksperloop / n.max(1)).max(1);
                        input_value(k / blk, r * blk + k % blk)
                    }
                    Collective::AllGather => {
                        let owner = pos / (self.nchunksperloop / n.max(1)).max(1);
                        input_value(owner, pos)
                    }
                    _ => (0..n).map(|q| input_value(q, pos)).sum(),
                };
                if v != want {
                    let what = match op {
                        Collective::AllToAll => "the matching chunk of a peer's input",
                        Collective::AllGather => "its owner's input chunk",
                        _ => "the sum of that chunk over all ranks",
                    };
                    return Err(err(
                        &self.gpus[r].at,
                        format!(
                            "wrong result: after the algorithm, rank {r}'s output chunk {k} \
                             does not hold {what}"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The steps of `gpu` as `(block, step)` in an order that respects every block's sequence and
/// every dependency: Kahn's algorithm, taking the ready step with the lowest step number, then
/// block (blocks advance together, as they run concurrently).
fn topological(gpu: &Gpu) -> Result<Vec<(usize, usize)>, MscclError> {
    let mut waiting: Vec<Vec<usize>> = gpu.tbs.iter().map(|t| vec![0; t.steps.len()]).collect();
    let mut dependents: Vec<Vec<Vec<(usize, usize)>>> = gpu
        .tbs
        .iter()
        .map(|t| vec![Vec::new(); t.steps.len()])
        .collect();
    for (b, t) in gpu.tbs.iter().enumerate() {
        for (s, st) in t.steps.iter().enumerate() {
            if s > 0 {
                waiting[b][s] += 1;
                dependents[b][s - 1].push((b, s));
            }
            if let Some((db, ds)) = st.dep {
                waiting[b][s] += 1;
                dependents[db][ds].push((b, s));
            }
        }
    }
    let mut ready: BTreeSet<(usize, usize)> = BTreeSet::new();
    for (b, w) in waiting.iter().enumerate() {
        if w.first() == Some(&0) {
            ready.insert((0, b));
        }
    }
    let total: usize = gpu.tbs.iter().map(|t| t.steps.len()).sum();
    let mut order = Vec::with_capacity(total);
    while let Some((s, b)) = ready.pop_first() {
        order.push((b, s));
        for &(nb, ns) in &dependents[b][s] {
            waiting[nb][ns] -= 1;
            if waiting[nb][ns] == 0 {
                ready.insert((ns, nb));
            }
        }
    }
    if order.len() < total {
        // A step still waiting lies on a cycle or behind one; name the first such.
        for (b, t) in gpu.tbs.iter().enumerate() {
            for (s, st) in t.steps.iter().enumerate() {
                if waiting[b][s] > 0 && st.dep.is_some() {
                    return Err(err(
                        &st.at,
                        "dependency cycle: this step waits, through its thread block's order \
                         and depid/deps, on itself",
                    ));
                }
            }
        }
        return Err(err(&gpu.at, "dependency cycle among this gpu's steps"));
    }
    Ok(order)
}

/// The IR steps that run MSCCL step `st` of block `t`, whose chunks are `src` and `dst`
/// (`len` elements a chunk); an `rrs` takes its temporary at `next_temp` and moves it on.
fn ir_kinds(
    st: &MStep,
    t: &ThreadBlock,
    src: ChunkRange,
    dst: ChunkRange,
    len: usize,
    next_temp: &mut usize,
) -> Result<Vec<StepKind>, MscclError> {
    let (sp, rp, ch) = (t.send.unwrap_or(0), t.recv.unwrap_or(0), t.chan);
    let mut seq: Vec<StepKind> = Vec::new();
    let copy_into_dst = |seq: &mut Vec<StepKind>| -> Result<(), MscclError> {
        if src != dst {
            if src.overlaps(dst) {
                return Err(err(&st.at, "src and dst chunks overlap"));
            }
            seq.push(StepKind::Copy {
                src,
                dst,
                reduce: false,
            });
        }
        Ok(())
    };
    match st.kind {
        StepType::Nop => {}
        StepType::Send => seq.push(StepKind::Send {
            peer: sp,
            chunk: src,
            channel: ch,
        }),
        StepType::Recv => seq.push(StepKind::Recv {
            peer: rp,
            chunk: dst,
            reduce: false,
            channel: ch,
        }),
        StepType::RecvReduceCopy => {
            copy_into_dst(&mut seq)?;
            seq.push(StepKind::Recv {
                peer: rp,
                chunk: dst,
                reduce: true,
                channel: ch,
            });
        }
        StepType::RecvCopySend => {
            seq.push(StepKind::Recv {
                peer: rp,
                chunk: dst,
                reduce: false,
                channel: ch,
            });
            seq.push(StepKind::Send {
                peer: sp,
                chunk: dst,
                channel: ch,
            });
        }
        StepType::RecvReduceCopySend => {
            copy_into_dst(&mut seq)?;
            seq.push(StepKind::Recv {
                peer: rp,
                chunk: dst,
                reduce: true,
                channel: ch,
            });
            seq.push(StepKind::Send {
                peer: sp,
                chunk: dst,
                channel: ch,
            });
        }
        StepType::RecvReduceSend => {
            let temp = ChunkRange::new(*next_temp, st.cnt * len);
            *next_temp += st.cnt * len;
            seq.push(StepKind::Copy {
                src,
                dst: temp,
                reduce: false,
            });
            seq.push(StepKind::Recv {
                peer: rp,
                chunk: temp,
                reduce: true,
                channel: ch,
            });
            seq.push(StepKind::Send {
                peer: sp,
                chunk: temp,
                channel: ch,
            });
        }
        StepType::Copy => copy_into_dst(&mut seq)?,
        // dst = dst (op) src, on this rank.
        StepType::Reduce => {
            if src.overlaps(dst) {
                return Err(err(&st.at, "src and dst chunks overlap"));
            }
            seq.push(StepKind::Copy {
                src,
                dst,
                reduce: true,
            });
        }
    }
    Ok(seq)
}
