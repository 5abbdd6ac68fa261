use super::*;
use crate::chunk::ChunkRange;
use crate::op::Collective;
use crate::program::{Program, StepKind};
use std::fmt::Write as _;

fn ring_xml(n: usize) -> String {
    // A ring All-Reduce in MSCCL's non-fused style: rank r sends chunk r, then n-1 times
    // receives-reduces chunk r-1-k and sends it on; then all-gathers.
    let mut x = format!(
        "<algo name=\"ring\" coll=\"allreduce\" ngpus=\"{n}\" nchunksperloop=\"{n}\" inplace=\"1\">\n"
    );
    for r in 0..n {
        let _ = writeln!(
            x,
            "<gpu id=\"{r}\" i_chunks=\"{n}\" o_chunks=\"0\" s_chunks=\"0\">"
        );
        let _ = writeln!(
            x,
            "<tb id=\"0\" send=\"{}\" recv=\"{}\" chan=\"0\">",
            (r + 1) % n,
            (r + n - 1) % n
        );
        let mut s = 0;
        let mut step = |x: &mut String, ty: &str, c: usize| {
            let _ = writeln!(x, "<step s=\"{s}\" type=\"{ty}\" srcbuf=\"i\" srcoff=\"{c}\" dstbuf=\"i\" dstoff=\"{c}\" cnt=\"1\" depid=\"-1\" deps=\"-1\" hasdep=\"0\"/>");
            s += 1;
        };
        step(&mut x, "s", r);
        for k in 1..n {
            let c = (r + n - k) % n;
            step(&mut x, "rrc", c);
            step(&mut x, "s", c);
        }
        for k in 1..n {
            let c = (r + 1 + n - k) % n;
            step(&mut x, "r", c);
            if k < n - 1 {
                step(&mut x, "s", c);
            }
        }
        x.push_str("</tb>\n</gpu>\n");
    }
    x.push_str("</algo>\n");
    x
}

#[test]
fn a_ring_all_reduce_compiles_and_computes() {
    let a = Msccl::parse(&ring_xml(4)).unwrap();
    let p = a.compile(Collective::AllReduce, 4, 16).unwrap();
    assert_eq!(p.len(), 4);
    // 3 reduce-scatter and 3 all-gather sends of one chunk (4 elements) per rank.
    for prog in &p {
        assert_eq!(prog.sends().count(), 6);
        assert!(prog.sends().all(|(_, c)| c.len == 4));
    }
}

#[test]
fn malformed_input_is_located() {
    let good = ring_xml(3);
    let e = Msccl::parse(&good.replacen("type=\"rrc\"", "type=\"xyz\"", 1)).unwrap_err();
    assert!(e.message.contains("unknown step type `xyz`"), "{e}");
    assert!(e
        .at
        .unwrap()
        .element
        .starts_with("gpu[id=0]/tb[id=0]/step[s=1]"));
    let e = Msccl::parse(&good.replacen("srcoff=\"0\"", "srcoff=\"7\"", 1)).unwrap_err();
    assert!(e.message.contains("outside buffer `i`"), "{e}");
    let e = Msccl::parse(&good.replacen("depid=\"-1\" deps=\"-1\"", "depid=\"4\" deps=\"0\"", 1))
        .unwrap_err();
    assert!(e.message.contains("thread block 4"), "{e}");
    let a = Msccl::parse(&good).unwrap();
    let e = a.compile(Collective::AllReduce, 4, 12).unwrap_err();
    assert!(e.message.contains("ngpus is 3"), "{e}");
    let e = Msccl::parse("<algo ngpus=\"2\"").unwrap_err();
    assert!(e.message.contains("not well-formed"), "{e}");
}

#[test]
fn a_dependency_cycle_is_found() {
    // Step 0 of block 0 waits for step 1 of block 0, which comes after it.
    let x = ring_xml(2).replacen("depid=\"-1\" deps=\"-1\"", "depid=\"0\" deps=\"1\"", 1);
    let a = Msccl::parse(&x).unwrap();
    let e = a.compile(Collective::AllReduce, 2, 2).unwrap_err();
    assert!(e.message.contains("cycle"), "{e}");
    assert_eq!(e.at.unwrap().element, "gpu[id=0]/tb[id=0]/step[s=0]");
}

#[test]
fn a_deadlock_and_a_wrong_result_are_found() {
    // Swap rank 0's first two steps: it receives before sending, and so does nobody
    // else... rank 1 still sends first, so instead make every rank receive first.
    let mut x = ring_xml(3);
    for r in 0..3 {
        let c = (r + 2) % 3;
        x = x.replacen(
            &format!("<step s=\"0\" type=\"s\" srcbuf=\"i\" srcoff=\"{r}\""),
            &format!("<step s=\"0\" type=\"r\" srcbuf=\"i\" srcoff=\"{c}\""),
            1,
        );
    }
    let a = Msccl::parse(&x).unwrap();
    let e = a.compile(Collective::AllReduce, 3, 3).unwrap_err();
    assert!(
        e.message.contains("deadlock") || e.message.contains("inconsistent"),
        "{e}"
    );
    // Plain copies instead of reductions: the messages match but the sums are wrong.
    let a = Msccl::parse(&ring_xml(3).replace("type=\"rrc\"", "type=\"r\"")).unwrap();
    let e = a.compile(Collective::AllReduce, 3, 3).unwrap_err();
    assert!(e.message.contains("wrong result"), "{e}");
}

fn step(s: usize, ty: &str, src: (&str, usize), dst: (&str, usize), dep: (i64, i64)) -> String {
    format!(
        "<step s=\"{s}\" type=\"{ty}\" srcbuf=\"{}\" srcoff=\"{}\" dstbuf=\"{}\" \
         dstoff=\"{}\" cnt=\"1\" depid=\"{}\" deps=\"{}\" hasdep=\"0\"/>\n",
        src.0, src.1, dst.0, dst.1, dep.0, dep.1
    )
}

const NO: (i64, i64) = (-1, -1);

/// MSCCL's fused ring All-Reduce, through a scratch chunk: rank r copies chunk r to
/// scratch and sends it; reduce-sends (`rrs`) n - 2 chunks on without writing them;
/// `rrcs` the last, now complete; then `rcs` n - 2 chunks and `r` the last.
fn fused_ring(n: usize) -> String {
    let mut x = format!(
        "<algo name=\"fused\" coll=\"allreduce\" ngpus=\"{n}\" nchunksperloop=\"{n}\" inplace=\"1\">\n"
    );
    for r in 0..n {
        let _ = write!(
            x,
            "<gpu id=\"{r}\" i_chunks=\"{n}\" o_chunks=\"0\" s_chunks=\"1\">\n\
             <tb id=\"0\" send=\"{}\" recv=\"{}\" chan=\"0\">\n",
            (r + 1) % n,
            (r + n - 1) % n
        );
        let mut s = 0;
        let mut push = |x: &mut String, ty: &str, src: (&str, usize), dst: (&str, usize)| {
            x.push_str(&step(s, ty, src, dst, NO));
            s += 1;
        };
        push(&mut x, "cpy", ("i", r), ("s", 0));
        push(&mut x, "s", ("s", 0), ("i", r));
        for k in 1..n {
            let c = (r + n - k) % n;
            let ty = if k < n - 1 { "rrs" } else { "rrcs" };
            push(&mut x, ty, ("i", c), ("i", c));
        }
        for j in 1..n {
            let c = (r + n + 1 - j) % n;
            let ty = if j < n - 1 { "rcs" } else { "r" };
            push(&mut x, ty, ("i", c), ("i", c));
        }
        x.push_str("</tb>\n</gpu>\n");
    }
    x + "</algo>\n"
}

#[test]
fn fused_steps_and_scratch_compute_an_all_reduce() {
    for n in [2, 3, 5] {
        let a = Msccl::parse(&fused_ring(n)).unwrap();
        let p = a.compile(Collective::AllReduce, n, 4 * n).unwrap();
        for prog in &p {
            // 2 (n - 1) messages of one chunk; the buffer holds the collective, one
            // scratch chunk and one temporary per rrs step.
            assert_eq!(prog.sends().count(), 2 * (n - 1));
            assert_eq!(prog.buffer_len, 4 * n + 4 + 4 * (n - 2));
        }
    }
}

/// Ring All-Gather, not in place: copy the own chunk to its output position, send it,
/// then receive-copy-send the others along.
fn ring_all_gather(n: usize) -> String {
    let mut x = format!(
        "<algo name=\"ag\" coll=\"allgather\" ngpus=\"{n}\" nchunksperloop=\"{n}\" inplace=\"0\">\n"
    );
    for r in 0..n {
        let _ = write!(
            x,
            "<gpu id=\"{r}\" i_chunks=\"1\" o_chunks=\"{n}\" s_chunks=\"0\">\n\
             <tb id=\"0\" send=\"{}\" recv=\"{}\" chan=\"3\">\n",
            (r + 1) % n,
            (r + n - 1) % n
        );
        x.push_str(&step(0, "cpy", ("i", 0), ("o", r), NO));
        x.push_str(&step(1, "s", ("o", r), ("o", r), NO));
        for k in 1..n {
            let c = (r + n - k) % n;
            let ty = if k < n - 1 { "rcs" } else { "r" };
            x.push_str(&step(k + 1, ty, ("o", c), ("o", c), NO));
        }
        x.push_str("</tb>\n</gpu>\n");
    }
    x + "</algo>\n"
}

#[test]
fn an_all_gather_with_its_own_output_buffer() {
    let a = Msccl::parse(&ring_all_gather(4)).unwrap();
    let p = a.compile(Collective::AllGather, 4, 8).unwrap();
    assert_eq!(p[2].input, ChunkRange::new(4, 2));
    assert_eq!(p[2].output, ChunkRange::new(0, 8));
    // The result is moved from the `o` region to the output positions at the end.
    assert!(matches!(
        p[2].steps.last().map(|s| s.kind),
        Some(StepKind::Copy { .. })
    ));
    assert!(p[0].sends_on_channels().all(|(_, _, ch)| ch == 3));
    let e = a.compile(Collective::AllReduce, 4, 8).unwrap_err();
    assert!(e.message.contains("coll is `allgather`"), "{e}");
}

/// Direct Reduce-Scatter over 3 ranks with one block per peer and direction; the two
/// receiving blocks add into the same output chunk, ordered by a nop's dependency.
fn direct_reduce_scatter() -> String {
    let mut x = String::from(
        "<algo name=\"rs\" coll=\"reducescatter\" ngpus=\"3\" nchunksperloop=\"3\" inplace=\"0\">\n",
    );
    for r in 0..3 {
        let (a, b) = ((r + 1) % 3, (r + 2) % 3);
        let _ = write!(
            x,
            "<gpu id=\"{r}\" i_chunks=\"3\" o_chunks=\"1\" s_chunks=\"0\">\n\
             <tb id=\"0\" send=\"{a}\" recv=\"-1\" chan=\"0\">{}</tb>\n\
             <tb id=\"1\" send=\"{b}\" recv=\"-1\" chan=\"0\">{}</tb>\n\
             <tb id=\"2\" send=\"-1\" recv=\"{b}\" chan=\"0\">{}{}</tb>\n\
             <tb id=\"3\" send=\"-1\" recv=\"{a}\" chan=\"0\">{}{}</tb>\n</gpu>\n",
            step(0, "s", ("i", a), ("o", 0), NO),
            step(0, "s", ("i", b), ("o", 0), NO),
            step(0, "cpy", ("i", r), ("o", 0), NO),
            step(1, "rrc", ("o", 0), ("o", 0), NO),
            step(0, "nop", ("i", 0), ("i", 0), (2, 1)),
            step(1, "rrc", ("o", 0), ("o", 0), NO),
        );
    }
    x + "</algo>\n"
}

/// Direct Reduce-Scatter over 3 ranks that receives into scratch with plain `r` and adds
/// with local reductions (`re`), the second ordered after the first by a dependency.
fn direct_reduce_scatter_with_re() -> String {
    let mut x = String::from(
        "<algo name=\"rs\" coll=\"reducescatter\" ngpus=\"3\" nchunksperloop=\"3\" inplace=\"0\">\n",
    );
    for r in 0..3 {
        let (a, b) = ((r + 1) % 3, (r + 2) % 3);
        let _ = write!(
            x,
            "<gpu id=\"{r}\" i_chunks=\"3\" o_chunks=\"1\" s_chunks=\"2\">\n\
             <tb id=\"0\" send=\"{a}\" recv=\"-1\" chan=\"0\">{}</tb>\n\
             <tb id=\"1\" send=\"{b}\" recv=\"-1\" chan=\"0\">{}</tb>\n\
             <tb id=\"2\" send=\"-1\" recv=\"{b}\" chan=\"0\">{}{}{}</tb>\n\
             <tb id=\"3\" send=\"-1\" recv=\"{a}\" chan=\"0\">{}{}</tb>\n</gpu>\n",
            step(0, "s", ("i", a), ("o", 0), NO),
            step(0, "s", ("i", b), ("o", 0), NO),
            step(0, "cpy", ("i", r), ("o", 0), NO),
            step(1, "r", ("s", 0), ("s", 0), NO),
            step(2, "re", ("s", 0), ("o", 0), NO),
            step(0, "r", ("s", 1), ("s", 1), NO),
            step(1, "re", ("s", 1), ("o", 0), (2, 2)),
        );
    }
    x + "</algo>\n"
}

#[test]
fn local_reductions_compile_to_reducing_copies_and_give_the_right_sum() {
    // compile() runs the programs in memory and checks every output element.
    let a = Msccl::parse(&direct_reduce_scatter_with_re()).unwrap();
    let p = a.compile(Collective::ReduceScatter, 3, 30).unwrap();
    let reducing = p[0]
        .steps
        .iter()
        .filter(|s| matches!(s.kind, StepKind::Copy { reduce: true, .. }))
        .count();
    assert_eq!(reducing, 2);
    // A wrong operand (reduce the received scratch twice) is caught by the same check.
    let twice = direct_reduce_scatter_with_re().replace(
        "srcbuf=\"s\" srcoff=\"1\" dstbuf=\"o\"",
        "srcbuf=\"s\" srcoff=\"0\" dstbuf=\"o\"",
    );
    assert!(Msccl::parse(&twice)
        .unwrap()
        .compile(Collective::ReduceScatter, 3, 30)
        .is_err());
}

#[test]
fn a_direct_reduce_scatter_with_nop_dependencies() {
    let a = Msccl::parse(&direct_reduce_scatter()).unwrap();
    let p = a.compile(Collective::ReduceScatter, 3, 30).unwrap();
    assert_eq!(p[1].output, ChunkRange::new(10, 10));
    // Without the nop's dependency both blocks add into o[0] unordered; fabemu orders
    // them as listed (the builder's hazards), so the result is still right.
    let racy =
        direct_reduce_scatter().replace("depid=\"2\" deps=\"1\"", "depid=\"-1\" deps=\"-1\"");
    assert!(Msccl::parse(&racy)
        .unwrap()
        .compile(Collective::ReduceScatter, 3, 3)
        .is_ok());
    // `re` over the zero scratch it starts from equals the copy it replaces.
    let re = direct_reduce_scatter().replacen("type=\"cpy\"", "type=\"re\"", 1);
    assert!(Msccl::parse(&re)
        .unwrap()
        .compile(Collective::ReduceScatter, 3, 3)
        .is_ok());
    // Two blocks sending to one peer on one channel.
    let twice =
        direct_reduce_scatter().replacen("send=\"2\" recv=\"-1\"", "send=\"1\" recv=\"-1\"", 1);
    let e = Msccl::parse(&twice).unwrap_err();
    assert!(e.message.contains("a second block sending to 1"), "{e}");
}

/// A program's messages per (direction, peer, channel) in order, and its copies sorted:
/// what an executor does, whatever the step order and the dependencies.
type Messages = std::collections::BTreeMap<(bool, usize, u32), Vec<(ChunkRange, bool)>>;

type Copies = Vec<(ChunkRange, ChunkRange, bool)>;

fn messages(p: &Program) -> (Messages, Copies) {
    let mut m = std::collections::BTreeMap::new();
    let mut copies = Vec::new();
    for st in &p.steps {
        match st.kind {
            StepKind::Send {
                peer,
                chunk,
                channel,
            } => m
                .entry((true, peer, channel))
                .or_insert_with(Vec::new)
                .push((chunk, false)),
            StepKind::Recv {
                peer,
                chunk,
                reduce,
                channel,
            } => m
                .entry((false, peer, channel))
                .or_insert_with(Vec::new)
                .push((chunk, reduce)),
            StepKind::Copy { src, dst, reduce } => copies.push((src, dst, reduce)),
        }
    }
    copies.sort_by_key(|&(a, b, r)| (a.offset, a.len, b.offset, b.len, r));
    (m, copies)
}

#[test]
fn export_escapes_the_name_and_keeps_the_layout() {
    use crate::plan::{compile, Algorithm, Layout, Plan};
    let plan = Plan {
        op: Collective::AllReduce,
        ranks: 4,
        count: 4 * 64,
        root: 0,
        layout: Layout::Flat(Algorithm::Ring),
        chunks: 1,
        chunks_in_flight: 0,
    };
    let built = compile(&plan).unwrap();
    let name = "ring <4> \"a\" & 'b'";
    let xml = export(Collective::AllReduce, 4 * 64, &built, name).unwrap();
    // Well-formed, and the name reads back as written.
    let doc = roxmltree::Document::parse(&xml).unwrap();
    assert_eq!(doc.root_element().attribute("name"), Some(name));
    assert!(Msccl::parse(&xml).is_ok());
    // One element per line, two spaces per level, a newline at the end, as msccl-tools
    // writes it.
    let lines: Vec<&str> = xml.lines().collect();
    assert!(lines[0].starts_with(
        "<algo name=\"ring &lt;4&gt; &quot;a&quot; &amp; &apos;b&apos;\" proto=\"Simple\""
    ));
    assert!(lines[1].starts_with("  <gpu id=\"0\" i_chunks="));
    assert!(lines[2].starts_with("    <tb id=\"0\" send="));
    assert!(lines[3].starts_with("      <step s=\"0\" type="));
    assert!(lines[3].ends_with("/>"));
    assert_eq!(lines.last(), Some(&"</algo>"));
    assert!(xml.ends_with("</algo>\n"));
}

#[test]
fn every_flat_built_in_algorithm_exports_and_reads_back() {
    use crate::plan::{algorithms_for, compile, Layout, Plan};
    for op in [
        Collective::AllReduce,
        Collective::ReduceScatter,
        Collective::AllGather,
        Collective::AllToAll,
    ] {
        for &algorithm in algorithms_for(op) {
            if op == Collective::AllToAll && algorithm == crate::plan::Algorithm::Ring {
                continue; // staging areas: refused below
            }
            for n in [4usize, 6, 8] {
                if algorithm == crate::plan::Algorithm::HalvingDoubling
                    && op != Collective::AllReduce
                    && !n.is_power_of_two()
                {
                    continue;
                }
                for chunks in [1usize, 2] {
                    let count = n * chunks * 64;
                    let plan = Plan {
                        op,
                        ranks: n,
                        count,
                        root: 0,
                        layout: Layout::Flat(algorithm),
                        chunks,
                        chunks_in_flight: 0,
                    };
                    let what = format!("{op:?} {algorithm:?} n={n} chunks={chunks}");
                    let built = compile(&plan).unwrap();
                    let xml =
                        export(op, count, &built, "x").unwrap_or_else(|e| panic!("{what}: {e}"));
                    let read = Msccl::parse(&xml)
                        .and_then(|a| a.compile(op, n, count))
                        .unwrap_or_else(|e| panic!("{what}: {e}\n{xml}"));
                    for (a, b) in built.iter().zip(&read) {
                        assert_eq!((a.input, a.output), (b.input, b.output), "{what}");
                        assert_eq!(messages(a), messages(b), "{what}: rank {}", a.rank);
                    }
                }
            }
        }
    }
    // Staging areas (All-To-All) and other collectives are refused.
    let plan = Plan {
        op: Collective::AllToAll,
        ranks: 4,
        count: 64,
        root: 0,
        layout: Layout::Flat(crate::plan::Algorithm::Ring),
        chunks: 1,
        chunks_in_flight: 0,
    };
    assert!(export(Collective::AllToAll, 64, &compile(&plan).unwrap(), "x").is_err());
}

#[test]
fn no_attribute_value_makes_it_panic() {
    // Every attribute of a small ring, one at a time, set to values around the edges:
    // parsing and compiling return errors or programs, never panic.
    let good = fused_ring(3);
    let values = [
        "-5", "-1", "0", "1", "2", "3", "4", "99", "1048577", "x", "",
    ];
    let mut cursor = 0;
    let mut tried = 0;
    while let Some(start) = good[cursor..].find("=\"") {
        let at = cursor + start + 2;
        let Some(len) = good[at..].find('"') else {
            break;
        };
        for v in values {
            let text = format!("{}{v}{}", &good[..at], &good[at + len..]);
            if let Ok(a) = Msccl::parse(&text) {
                let _ = a.compile(Collective::AllReduce, 3, 12);
                let _ = a.compile(Collective::AllGather, 3, 12);
            }
            tried += 1;
        }
        cursor = at + len;
    }
    assert!(tried > 500, "{tried}");
}

/// Direct All-To-All, not in place: a block per peer and direction, and a local copy.
fn direct_all_to_all(n: usize) -> String {
    let mut x = format!(
        "<algo name=\"a2a\" coll=\"alltoall\" ngpus=\"{n}\" nchunksperloop=\"{n}\" inplace=\"0\">\n"
    );
    for r in 0..n {
        let _ = writeln!(
            x,
            "<gpu id=\"{r}\" i_chunks=\"{n}\" o_chunks=\"{n}\" s_chunks=\"0\">"
        );
        let mut tb = 0;
        for p in (0..n).filter(|&p| p != r) {
            let _ = write!(
                x,
                "<tb id=\"{tb}\" send=\"{p}\" recv=\"-1\" chan=\"0\">{}</tb>\n\
                 <tb id=\"{}\" send=\"-1\" recv=\"{p}\" chan=\"0\">{}</tb>\n",
                step(0, "s", ("i", p), ("o", r), NO),
                tb + 1,
                step(0, "r", ("i", r), ("o", p), NO)
            );
            tb += 2;
        }
        let _ = writeln!(
            x,
            "<tb id=\"{tb}\" send=\"-1\" recv=\"-1\" chan=\"0\">{}</tb>\n</gpu>",
            step(0, "cpy", ("i", r), ("o", r), NO)
        );
    }
    x + "</algo>\n"
}

#[test]
fn an_all_to_all_lands_in_the_output_half() {
    let a = Msccl::parse(&direct_all_to_all(4)).unwrap();
    let p = a.compile(Collective::AllToAll, 4, 8).unwrap();
    assert_eq!(
        (p[1].input, p[1].output),
        (ChunkRange::new(0, 8), ChunkRange::new(8, 8))
    );
    // Sending a peer the wrong block is caught.
    let wrong = direct_all_to_all(4).replacen("srcoff=\"1\"", "srcoff=\"2\"", 1);
    let e = Msccl::parse(&wrong)
        .unwrap()
        .compile(Collective::AllToAll, 4, 8)
        .unwrap_err();
    assert!(e.message.contains("wrong result"), "{e}");
}
