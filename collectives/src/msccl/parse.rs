//! Reading the XML: elements, attributes and their positions, checked as they are read.

use std::collections::BTreeSet;

use super::{err, Buffer, Gpu, Loc, MStep, Msccl, MscclError, StepType, ThreadBlock, MAX_NUMBER};

/// Line and column of elements, found by walking forward from the last one asked for:
/// elements are asked for in document order, so the whole walk reads the text once (roxmltree's
/// `text_pos_at` counts from the start each time, which is quadratic on a file of thousands of
/// steps).
struct Positions<'t> {
    text: &'t str,
    /// Byte offset reached, and its 1-based line and column (in characters).
    at: usize,
    line: u32,
    column: u32,
}

impl<'t> Positions<'t> {
    fn new(text: &'t str) -> Positions<'t> {
        Positions {
            text,
            at: 0,
            line: 1,
            column: 1,
        }
    }

    fn loc(&mut self, node: roxmltree::Node<'_, '_>, element: String) -> Loc {
        let to = node.range().start.min(self.text.len());
        if to < self.at {
            // Backwards (not in document order): start again from the top.
            *self = Positions::new(self.text);
        }
        for c in self.text.get(self.at..to).unwrap_or_default().chars() {
            if c == '\n' {
                self.line += 1;
                self.column = 1;
            } else {
                self.column += 1;
            }
        }
        self.at = to;
        Loc {
            line: self.line,
            column: self.column,
            element,
        }
    }
}

fn attr<'a>(node: roxmltree::Node<'a, '_>, at: &Loc, name: &str) -> Result<&'a str, MscclError> {
    node.attribute(name)
        .ok_or_else(|| err(at, format!("missing attribute `{name}`")))
}

fn int(node: roxmltree::Node<'_, '_>, at: &Loc, name: &str) -> Result<i64, MscclError> {
    let v = attr(node, at, name)?;
    v.trim()
        .parse::<i64>()
        .map_err(|_| err(at, format!("`{name}` is `{v}`, not an integer")))
}

fn count(node: roxmltree::Node<'_, '_>, at: &Loc, name: &str) -> Result<usize, MscclError> {
    let v = int(node, at, name)?;
    usize::try_from(v)
        .ok()
        .filter(|&v| v <= MAX_NUMBER)
        .ok_or_else(|| err(at, format!("`{name}` is {v}; it must be 0 to {MAX_NUMBER}")))
}

fn optional_count(
    node: roxmltree::Node<'_, '_>,
    at: &Loc,
    name: &str,
) -> Result<usize, MscclError> {
    if node.attribute(name).is_some() {
        count(node, at, name)
    } else {
        Ok(0)
    }
}

/// -1 for none, else a non-negative number.
fn peer(node: roxmltree::Node<'_, '_>, at: &Loc, name: &str) -> Result<Option<usize>, MscclError> {
    match int(node, at, name)? {
        -1 => Ok(None),
        v => usize::try_from(v)
            .map(Some)
            .map_err(|_| err(at, format!("`{name}` is {v}; it must be -1 or a rank"))),
    }
}

fn buffer(
    node: roxmltree::Node<'_, '_>,
    at: &Loc,
    name: &str,
    kind: StepType,
) -> Result<Buffer, MscclError> {
    match attr(node, at, name)? {
        "i" => Ok(Buffer::Input),
        "o" => Ok(Buffer::Output),
        "s" => Ok(Buffer::Scratch),
        // A step that does not use a buffer may leave it unnamed.
        _ if kind == StepType::Nop => Ok(Buffer::Input),
        v => Err(err(
            at,
            format!("`{name}` is `{v}`; buffers are `i` (input), `o` (output), `s` (scratch)"),
        )),
    }
}

/// Element children only (text and comments skipped).
fn elements<'a, 'i>(
    node: roxmltree::Node<'a, 'i>,
) -> impl Iterator<Item = roxmltree::Node<'a, 'i>> {
    node.children().filter(roxmltree::Node::is_element)
}

fn expect_name(node: roxmltree::Node<'_, '_>, at: &Loc, want: &str) -> Result<(), MscclError> {
    let name = node.tag_name().name();
    if name == want {
        Ok(())
    } else {
        Err(err(
            at,
            format!("unexpected element <{name}>; expected <{want}> here"),
        ))
    }
}

impl Msccl {
    /// Reads an MSCCL XML algorithm and checks its structure (see the [module docs](crate::msccl)).
    ///
    /// # Errors
    /// [`MscclError`] at the element at fault: malformed XML, a missing or malformed
    /// attribute, an unknown step type or buffer, a chunk outside its buffer, a dependency on
    /// a block or step that does not exist, a peer that is not a rank, ...
    pub fn parse(text: &str) -> Result<Msccl, MscclError> {
        let doc = roxmltree::Document::parse(text).map_err(|e| {
            let p = e.pos();
            MscclError {
                at: Some(Loc {
                    line: p.row,
                    column: p.col,
                    element: "xml".into(),
                }),
                message: format!("not well-formed XML: {e}"),
            }
        })?;
        let root = doc.root_element();
        let mut pos = Positions::new(text);
        let at = pos.loc(root, "algo".into());
        expect_name(root, &at, "algo")?;
        let ngpus = count(root, &at, "ngpus")?;
        let nchunksperloop = count(root, &at, "nchunksperloop")?;
        if ngpus == 0 || nchunksperloop == 0 {
            return Err(err(&at, "`ngpus` and `nchunksperloop` must be at least 1"));
        }
        let coll = attr(root, &at, "coll")?.to_string();
        let inplace = match root.attribute("inplace").map(str::trim) {
            None | Some("0") => false,
            Some("1") => true,
            Some(v) => return Err(err(&at, format!("`inplace` is `{v}`; it must be 0 or 1"))),
        };
        let name = root.attribute("name").unwrap_or_default().to_string();
        let mut gpus: Vec<Option<Gpu>> = vec![None; ngpus];
        for g in elements(root) {
            let id_text = g.attribute("id").unwrap_or("?");
            let gat = pos.loc(g, format!("gpu[id={id_text}]"));
            expect_name(g, &gat, "gpu")?;
            let id = count(g, &gat, "id")?;
            if id >= ngpus {
                return Err(err(
                    &gat,
                    format!("gpu id {id} is not below ngpus ({ngpus})"),
                ));
            }
            if gpus[id].is_some() {
                return Err(err(&gat, format!("gpu {id} is defined twice")));
            }
            let mut gpu = Gpu {
                i_chunks: optional_count(g, &gat, "i_chunks")?,
                o_chunks: optional_count(g, &gat, "o_chunks")?,
                s_chunks: optional_count(g, &gat, "s_chunks")?,
                tbs: Vec::new(),
                at: gat.clone(),
            };
            let mut tbs: Vec<ThreadBlock> = Vec::new();
            for t in elements(g) {
                tbs.push(block(t, &mut pos, &gat, id, ngpus)?);
            }
            check_blocks(&mut tbs)?;
            check_steps(&tbs, &gpu, id, inplace)?;
            gpu.tbs = tbs;
            gpus[id] = Some(gpu);
        }
        let gpus = gpus
            .into_iter()
            .enumerate()
            .map(|(r, g)| {
                g.ok_or_else(|| err(&at, format!("no <gpu id=\"{r}\"> (ngpus is {ngpus})")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Msccl {
            name,
            coll,
            nchunksperloop,
            inplace,
            gpus,
            at,
        })
    }
}

/// One `<tb>` of gpu `id` (at `gat`) with its steps, each checked against the block's peers.
fn block(
    t: roxmltree::Node<'_, '_>,
    pos: &mut Positions<'_>,
    gat: &Loc,
    id: usize,
    ngpus: usize,
) -> Result<ThreadBlock, MscclError> {
    let tid_text = t.attribute("id").unwrap_or("?");
    let tat = pos.loc(t, format!("{}/tb[id={tid_text}]", gat.element));
    expect_name(t, &tat, "tb")?;
    let tid = count(t, &tat, "id")?;
    let send = peer(t, &tat, "send")?;
    let recv = peer(t, &tat, "recv")?;
    for (what, p) in [("send", send), ("recv", recv)] {
        match p {
            Some(p) if p >= ngpus => {
                return Err(err(
                    &tat,
                    format!("`{what}` is {p}, not a rank (ngpus is {ngpus})"),
                ))
            }
            Some(p) if p == id => {
                return Err(err(&tat, format!("`{what}` is the gpu itself ({id})")))
            }
            _ => {}
        }
    }
    let chan = u32::try_from(int(t, &tat, "chan")?)
        .map_err(|_| err(&tat, "`chan` must be a non-negative integer"))?;
    let mut steps = Vec::new();
    for (index, st) in elements(t).enumerate() {
        steps.push(step(st, pos, &tat, index, send, recv)?);
    }
    Ok(ThreadBlock {
        id: tid,
        send,
        recv,
        chan,
        steps,
        at: tat,
    })
}

/// Step number `index` of the block at `tat`, whose peers are `send` and `recv`.
fn step(
    st: roxmltree::Node<'_, '_>,
    pos: &mut Positions<'_>,
    tat: &Loc,
    index: usize,
    send: Option<usize>,
    recv: Option<usize>,
) -> Result<MStep, MscclError> {
    let s_text = st.attribute("s").unwrap_or("?");
    let sat = pos.loc(st, format!("{}/step[s={s_text}]", tat.element));
    expect_name(st, &sat, "step")?;
    let s = count(st, &sat, "s")?;
    if s != index {
        return Err(err(
            &sat,
            format!("step number {s} out of order: this is step {index} of its block"),
        ));
    }
    let ty = attr(st, &sat, "type")?;
    let kind = StepType::parse(ty).ok_or_else(|| {
        err(
            &sat,
            format!(
                "unknown step type `{ty}`; MSCCL's are s, r, rrc, rrs, rcs, \
                 rrcs, cpy, re, nop"
            ),
        )
    })?;
    let depid = int(st, &sat, "depid")?;
    let deps = int(st, &sat, "deps")?;
    let dep = match (usize::try_from(depid), usize::try_from(deps)) {
        (Ok(b), Ok(s)) => Some((b, s)),
        _ if depid < 0 => None,
        _ => {
            return Err(err(
                &sat,
                format!("`deps` is {deps}: a dependency needs a step number"),
            ))
        }
    };
    let hasdep = match st.attribute("hasdep").map(str::trim) {
        None | Some("0") => false,
        Some("1") => true,
        Some(v) => return Err(err(&sat, format!("`hasdep` is `{v}`; it must be 0 or 1"))),
    };
    let cnt = if kind == StepType::Nop {
        optional_count(st, &sat, "cnt")?
    } else {
        count(st, &sat, "cnt")?
    };
    if cnt == 0 && kind != StepType::Nop {
        return Err(err(&sat, "`cnt` must be at least 1 chunk"));
    }
    let src = (
        buffer(st, &sat, "srcbuf", kind)?,
        optional_count(st, &sat, "srcoff")?,
    );
    let dst = (
        buffer(st, &sat, "dstbuf", kind)?,
        optional_count(st, &sat, "dstoff")?,
    );
    if kind.sends() && send.is_none() {
        return Err(err(&sat, "a sending step in a block without a `send` peer"));
    }
    if kind.receives() && recv.is_none() {
        return Err(err(
            &sat,
            "a receiving step in a block without a `recv` peer",
        ));
    }
    Ok(MStep {
        kind,
        src,
        dst,
        cnt,
        dep,
        hasdep,
        at: sat,
    })
}

/// A gpu's blocks sorted by id, their ids 0, 1, .. and one block per (peer, channel) and
/// direction.
fn check_blocks(tbs: &mut [ThreadBlock]) -> Result<(), MscclError> {
    // Blocks by id, 0.. without gaps, as MSCCL requires.
    tbs.sort_by_key(|t| t.id);
    for (k, t) in tbs.iter().enumerate() {
        if t.id != k {
            return Err(err(
                &t.at,
                format!(
                    "thread block ids must be 0, 1, .. without gaps or repeats; \
                     expected {k} here"
                ),
            ));
        }
    }
    // One block per (peer, channel) and direction: MSCCL has one connection each.
    let mut sends = BTreeSet::new();
    let mut recvs = BTreeSet::new();
    for t in tbs.iter() {
        if let Some(p) = t.send {
            if !sends.insert((p, t.chan)) {
                return Err(err(
                    &t.at,
                    format!(
                        "a second block sending to {p} on channel {}: MSCCL has one \
                         connection per peer and channel",
                        t.chan
                    ),
                ));
            }
        }
        if let Some(p) = t.recv {
            if !recvs.insert((p, t.chan)) {
                return Err(err(
                    &t.at,
                    format!(
                        "a second block receiving from {p} on channel {}: MSCCL has \
                         one connection per peer and channel",
                        t.chan
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Every step's dependency exists and its chunks lie inside their buffer of gpu `id`.
fn check_steps(tbs: &[ThreadBlock], gpu: &Gpu, id: usize, inplace: bool) -> Result<(), MscclError> {
    for t in tbs {
        for st in &t.steps {
            if let Some((b, s)) = st.dep {
                let Some(target) = tbs.get(b) else {
                    return Err(err(
                        &st.at,
                        format!("dependency on thread block {b}, which gpu {id} does not have"),
                    ));
                };
                if s >= target.steps.len() {
                    return Err(err(
                        &st.at,
                        format!(
                            "dependency on step {s} of thread block {b}, which has {} \
                             steps",
                            target.steps.len()
                        ),
                    ));
                }
            }
            for (which, (buf, off), used) in [
                ("src", st.src, st.kind.reads_src()),
                ("dst", st.dst, st.kind.writes_dst()),
            ] {
                let size = match buf {
                    Buffer::Input => gpu.i_chunks,
                    Buffer::Output if inplace && gpu.o_chunks == 0 => gpu.i_chunks,
                    Buffer::Output => gpu.o_chunks,
                    Buffer::Scratch => gpu.s_chunks,
                };
                if used && off.saturating_add(st.cnt) > size {
                    return Err(err(
                        &st.at,
                        format!(
                            "{which} chunks {off}..{} are outside buffer `{}` of {size} \
                             chunks",
                            off + st.cnt,
                            buf.key()
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}
