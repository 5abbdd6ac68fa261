//! Programs written back as MSCCL XML.

use std::collections::BTreeSet;

use quick_xml::events::{BytesStart, Event};
use quick_xml::Writer;

use super::MscclError;
use crate::chunk::ChunkRange;
use crate::op::Collective;
use crate::program::{Program, StepKind};

/// What a thread block drives: (send peer, receive peer, channel), -1 for none.
type BlockKey = (i64, i64, u32);

/// One exported step, before it is written.
struct Out {
    ty: &'static str,
    src: (&'static str, usize),
    dst: (&'static str, usize),
    cnt: usize,
    dep: Option<(usize, usize)>,
}

/// Writes `programs` (one per rank for `op` over `count` elements, as
/// [`crate::plan::compile`] makes them for a flat layout) as MSCCL XML that
/// [`Msccl::parse`](super::Msccl::parse) and [`Msccl::compile`](super::Msccl::compile) read back to programs with the same messages.
///
/// The chunk is the largest size every range of the programs is a whole number of
/// (`nchunksperloop = count / chunk`). A rank's steps go to thread blocks by what they
/// drive: one block per (send peer, channel), one per (receive peer, channel), one for local
/// copies; each block keeps the steps in program order, which keeps MSCCL's one connection
/// per peer and channel in the IR's FIFO order. A dependency on another block is the step's
/// `depid`/`deps`; more than one become `nop` steps just before it, one dependency each, as
/// msccl-tools writes them. Sends are `s`, receives `r` or `rrc` (reducing), copies `cpy`.
/// The file is in place: All-Reduce and Reduce-Scatter address everything as `i`,
/// All-Gather as `o`.
///
/// # Errors
/// [`MscclError`] without a location: `op` is not All-Reduce, All-Gather or Reduce-Scatter,
/// a program uses buffer space past the collective's elements, or a rank's input (All-Gather)
/// or output (Reduce-Scatter) is not its block of the chunks.
pub fn export(
    op: Collective,
    count: usize,
    programs: &[Program],
    name: &str,
) -> Result<String, MscclError> {
    let coll = match op {
        Collective::AllReduce => "allreduce",
        Collective::AllGather => "allgather",
        Collective::ReduceScatter => "reducescatter",
        Collective::AllToAll => "alltoall",
        other => {
            return Err(fail(format!(
                "MSCCL export writes allreduce, allgather, reducescatter and alltoall, not {}",
                other.key()
            )))
        }
    };
    let a2a = op == Collective::AllToAll;
    let n = programs.len();
    let (g, nchunks, block) = chunking(op, count, programs)?;
    // A range as (buffer, offset in chunks); ranges never straddle All-To-All's halves (the
    // even split keeps every step in one block).
    let place = |r: ChunkRange| -> Result<(&'static str, usize), MscclError> {
        match op {
            Collective::AllGather => Ok(("o", r.offset / g)),
            Collective::AllToAll if r.offset >= count => Ok(("o", (r.offset - count) / g)),
            Collective::AllToAll if r.offset + r.len > count => Err(fail(format!(
                "a step's range {}..{} straddles the input and output halves",
                r.offset,
                r.offset + r.len
            ))),
            _ => Ok(("i", r.offset / g)),
        }
    };
    let (i_chunks, o_chunks) = match op {
        Collective::AllGather => (block, nchunks),
        Collective::AllToAll => (nchunks, nchunks),
        _ => (nchunks, 0),
    };
    // The document goes through an XML writer, so that the one free-text attribute (the
    // algorithm's name) is escaped and every element is closed.
    let io = |e: std::io::Error| fail(format!("cannot write the XML: {e}"));
    let mut w = Writer::new_with_indent(Vec::new(), b' ', 2);
    let algo = element(
        "algo",
        &[
            ("name", name.to_string()),
            ("proto", "Simple".into()),
            ("nchannels", "1".into()),
            ("nchunksperloop", nchunks.to_string()),
            ("ngpus", n.to_string()),
            ("coll", coll.into()),
            ("inplace", u8::from(!a2a).to_string()),
        ],
    );
    w.write_event(Event::Start(algo.borrow())).map_err(io)?;
    for (r, p) in programs.iter().enumerate() {
        let (keys, blocks) = thread_blocks(p, g, &place)?;
        let waited: BTreeSet<(usize, usize)> =
            blocks.iter().flatten().filter_map(|o| o.dep).collect();
        let gpu = element(
            "gpu",
            &[
                ("id", r.to_string()),
                ("i_chunks", i_chunks.to_string()),
                ("o_chunks", o_chunks.to_string()),
                ("s_chunks", "0".into()),
            ],
        );
        w.write_event(Event::Start(gpu.borrow())).map_err(io)?;
        for (b, ((send, recv, chan), steps)) in keys.iter().zip(&blocks).enumerate() {
            let tb = element(
                "tb",
                &[
                    ("id", b.to_string()),
                    ("send", send.to_string()),
                    ("recv", recv.to_string()),
                    ("chan", chan.to_string()),
                ],
            );
            w.write_event(Event::Start(tb.borrow())).map_err(io)?;
            for (k, o) in steps.iter().enumerate() {
                let (depid, deps) = o.dep.map_or((-1, -1), |(db, ds)| (db as i64, ds as i64));
                let step = element(
                    "step",
                    &[
                        ("s", k.to_string()),
                        ("type", o.ty.into()),
                        ("srcbuf", o.src.0.into()),
                        ("srcoff", o.src.1.to_string()),
                        ("dstbuf", o.dst.0.into()),
                        ("dstoff", o.dst.1.to_string()),
                        ("cnt", o.cnt.to_string()),
                        ("depid", depid.to_string()),
                        ("deps", deps.to_string()),
                        ("hasdep", u8::from(waited.contains(&(b, k))).to_string()),
                    ],
                );
                w.write_event(Event::Empty(step)).map_err(io)?;
            }
            w.write_event(Event::End(tb.to_end())).map_err(io)?;
        }
        w.write_event(Event::End(gpu.to_end())).map_err(io)?;
    }
    w.write_event(Event::End(algo.to_end())).map_err(io)?;
    let mut xml = String::from_utf8(w.into_inner())
        .map_err(|e| fail(format!("the XML written is not UTF-8: {e}")))?;
    xml.push('\n');
    Ok(xml)
}

/// An element named `name` with `attrs` in order; the writer escapes their values.
fn element(name: &'static str, attrs: &[(&str, String)]) -> BytesStart<'static> {
    let mut e = BytesStart::new(name);
    for (k, v) in attrs {
        e.push_attribute((*k, v.as_str()));
    }
    e
}

/// The greatest common divisor (Euclid).
fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The chunk size `g` in elements (the largest every range of `programs` is a whole number
/// of), the chunks per loop and the chunks in a rank's block; refuses programs MSCCL cannot
/// describe (staging areas, inputs or outputs that are not a rank's block).
fn chunking(
    op: Collective,
    count: usize,
    programs: &[Program],
) -> Result<(usize, usize, usize), MscclError> {
    let a2a = op == Collective::AllToAll;
    let n = programs.len();
    // All-To-All's output half `[count, 2 count)` is MSCCL's `o`; everything else is the
    // collective's `count` elements.
    let expected_len = if a2a { count.saturating_mul(2) } else { count };
    let mut g = count;
    for p in programs {
        if p.buffer_len != expected_len {
            return Err(fail(format!(
                "rank {} uses {} buffer elements for a collective of {count}: its staging \
                 areas have no MSCCL equivalent",
                p.rank, p.buffer_len
            )));
        }
        let mut ranges = vec![p.input, p.output];
        for st in &p.steps {
            ranges.extend(st.kind.reads());
            ranges.extend(st.kind.writes());
        }
        for r in ranges {
            let local = if a2a && r.offset >= count {
                r.offset - count
            } else {
                r.offset
            };
            g = gcd(gcd(g, local), r.len);
        }
    }
    if g == 0 || n == 0 {
        return Err(fail("nothing to export (no elements or no ranks)".into()));
    }
    let nchunks = count / g;
    let block = nchunks / n;
    if a2a {
        for p in programs {
            if (p.input, p.output) != (ChunkRange::new(0, count), ChunkRange::new(count, count)) {
                return Err(fail(format!(
                    "rank {}'s input and output are not the two halves of its buffer",
                    p.rank
                )));
            }
        }
    } else if op != Collective::AllReduce {
        for (r, p) in programs.iter().enumerate() {
            let own = if op == Collective::AllGather {
                p.input
            } else {
                p.output
            };
            if nchunks % n != 0 || own != ChunkRange::new(r * block * g, block * g) {
                return Err(fail(format!(
                    "rank {r}'s {} is not block {r} of the {n} equal blocks MSCCL assumes",
                    if op == Collective::AllGather {
                        "input"
                    } else {
                        "output"
                    }
                )));
            }
        }
    }
    Ok((g, nchunks, block))
}

/// Thread block key (send peer, receive peer, channel), and steps, of each block of program
/// `p`, in order of first use; `g` elements a chunk, `place` maps a range to its buffer and
/// chunk offset.
fn thread_blocks(
    p: &Program,
    g: usize,
    place: &impl Fn(ChunkRange) -> Result<(&'static str, usize), MscclError>,
) -> Result<(Vec<BlockKey>, Vec<Vec<Out>>), MscclError> {
    let mut keys: Vec<BlockKey> = Vec::new();
    let mut blocks: Vec<Vec<Out>> = Vec::new();
    // Where each program step went: (block, step number).
    let mut placed: Vec<(usize, usize)> = Vec::with_capacity(p.steps.len());
    for st in &p.steps {
        let (key, ty, src, dst) = match st.kind {
            StepKind::Send {
                peer,
                chunk,
                channel,
            } => ((peer as i64, -1, channel), "s", chunk, chunk),
            StepKind::Recv {
                peer,
                chunk,
                reduce,
                channel,
            } => (
                (-1, peer as i64, channel),
                if reduce { "rrc" } else { "r" },
                chunk,
                chunk,
            ),
            StepKind::Copy { src, dst, reduce } => {
                ((-1, -1, 0), if reduce { "re" } else { "cpy" }, src, dst)
            }
        };
        let b = match keys.iter().position(|k| *k == key) {
            Some(b) => b,
            None => {
                keys.push(key);
                blocks.push(Vec::new());
                keys.len() - 1
            }
        };
        let mut cross: Vec<(usize, usize)> = st
            .deps
            .iter()
            .filter_map(|d| placed.get(d.0).copied())
            .filter(|&(db, _)| db != b)
            .collect();
        cross.sort_unstable();
        cross.dedup();
        let last = cross.pop();
        for d in cross {
            blocks[b].push(Out {
                ty: "nop",
                src: ("i", 0),
                dst: ("i", 0),
                cnt: 0,
                dep: Some(d),
            });
        }
        blocks[b].push(Out {
            ty,
            src: place(src)?,
            dst: place(dst)?,
            cnt: src.len / g,
            dep: last,
        });
        placed.push((b, blocks[b].len() - 1));
    }
    Ok((keys, blocks))
}

/// An error of the export, which has no place in a file.
fn fail(message: String) -> MscclError {
    MscclError { at: None, message }
}
