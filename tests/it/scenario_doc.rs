//! `docs/SCENARIO.md`'s field reference checked against the scenario loader, so the two cannot
//! drift apart.
//!
//! The fields are not listed here by hand: they are discovered from the loader. Every section
//! of a scenario is a serde struct that denies unknown fields, and serde's own error for an
//! unknown field names every field the struct accepts ("unknown field `x`, expected one of
//! `a`, `b`, ..."), from the list the derive wrote for it. So the test puts a probe value
//! `{zzprobe: 1}` at a path of a minimal scenario (with `--set`'s overrides, which create
//! missing sections) and reads the loader's answer at that path:
//!
//! - "unknown field `zzprobe`, expected ...": a section; each field it names is probed in turn;
//! - "unknown variant `zzprobe`, expected ...": a choice by name (`nic.cc: dcqcn` or
//!   `{dcqcn: {...}}`); each choice is probed as `path.choice` and the sections among them
//!   descended into;
//! - "expected a sequence": a list; its entries are probed at `path[0]` (written `path[]`), and
//!   a list of plain values is one field;
//! - anything else (a mapping is a type error there, or accepted): a value. A value is probed
//!   once more with the scalar `zzprobe`: "unknown variant `zzprobe`, expected ..." lists the
//!   names it accepts.
//!
//! A section whose fields are exactly those of one met before (breadth-first) is the same
//! struct (`switches[].buffer` is a `switch_buffer`, a PIFO node's `children[]` are nodes) and
//! is not descended into again; its row must name the first one.
//!
//! The document's side: every table in `docs/SCENARIO.md` whose header starts with `| Field |`
//! is a field table; the code spans in a row's first cell are the paths that row documents.
//! The checks: every value field and every repeated section has a row; every row's paths are
//! fields the loader accepts; a repeated section's row names the section it repeats; a field
//! with a fixed set of names (an enum) names each of them in its row. A new field in any struct
//! therefore fails this test until it is documented, and so does a row for a field that was
//! renamed or removed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use fabemu::scenario::{load_str_with, overrides::Override};

/// The smallest scenario the probes are set into: every probe fails (or passes) at its own
/// path, before anything else is checked.
const BASE: &str = "topology:
  star: {hosts: 2, bandwidth: 100Gbps, latency: 1us}
workload:
  messages: [{src: h0, dst: h1, size: 1KiB}]
";

/// A key no struct has.
const PROBE: &str = "zzprobe";

/// What the loader answers to a value at a path.
enum Answer {
    /// A section with these fields.
    Section(Vec<String>),
    /// A choice among these names.
    Variants(Vec<String>),
    /// A list.
    Sequence,
    /// Anything else: a plain value.
    Value,
}

/// The loader's answer to `value` set at `path` (as `--set path=value` on [`BASE`]).
fn answer(path: &str, value: &str) -> Answer {
    let text = if path.is_empty() {
        format!("{PROBE}={value}")
    } else {
        format!("{path}={value}")
    };
    let o = Override::parse(&text).unwrap_or_else(|e| panic!("probe `{text}`: {e}"));
    let e = match load_str_with(BASE, "<probe>", vec![o]) {
        Ok(_) => return Answer::Value,
        Err(e) => e,
    };
    let at = if path.is_empty() { PROBE } else { path };
    if e.field != at && !(path.is_empty() && e.field.is_empty()) {
        // A mapping is never a valid value where the probe puts it, so it must fail at its own
        // place (or, for the root, at the probe key): anything else means the base scenario or
        // the path is wrong, and the answer would be about another field. A scalar may be valid
        // there (a name), and the scenario then fails later, elsewhere: a plain value.
        assert!(
            value == PROBE,
            "probe `{text}` failed at `{}`, not at `{at}`: {}",
            e.field,
            e.message
        );
        return Answer::Value;
    }
    let names = || -> Vec<String> {
        let tail = &e.message[e.message.find(", expected").unwrap_or(e.message.len())..];
        tail.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect()
    };
    if e.message.starts_with(&format!("unknown field `{PROBE}`")) {
        Answer::Section(names())
    } else if e.message.starts_with(&format!("unknown variant `{PROBE}`")) {
        Answer::Variants(names())
    } else if e.message.contains("expected a sequence") {
        Answer::Sequence
    } else {
        Answer::Value
    }
}

/// What the loader accepts, discovered by probing (see the module doc).
#[derive(Default)]
struct Fields {
    /// Value fields (documented paths, `[]` for list entries), with the names an enum accepts.
    values: BTreeMap<String, Vec<String>>,
    /// Sections and lists of sections, with the names of a choice (`nic.cc`); a row may
    /// document them, none must.
    sections: BTreeMap<String, Vec<String>>,
    /// Sections that repeat an earlier one: path -> the earlier one's path.
    repeats: BTreeMap<String, String>,
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_string()
    } else {
        format!("{path}.{field}")
    }
}

fn discover() -> Fields {
    let mut f = Fields::default();
    // Field sets already met -> where.
    let mut seen: BTreeMap<BTreeSet<String>, String> = BTreeMap::new();
    // (the path as `--set` writes it, the path as the document writes it)
    let mut queue: VecDeque<(String, String)> = VecDeque::from([(String::new(), String::new())]);
    let probe_map = format!("{{{PROBE}: 1}}");
    while let Some((set_path, doc_path)) = queue.pop_front() {
        assert!(
            doc_path.matches('.').count() < 12,
            "`{doc_path}`: deeper than any scenario section; a recursive section not recognised"
        );
        match answer(&set_path, &probe_map) {
            Answer::Section(fields) => {
                let key: BTreeSet<String> = fields.iter().cloned().collect();
                if let Some(first) = seen.get(&key) {
                    f.repeats.insert(doc_path, first.clone());
                    continue;
                }
                seen.insert(key, doc_path.clone());
                f.sections.insert(doc_path.clone(), Vec::new());
                for field in fields {
                    queue.push_back((join(&set_path, &field), join(&doc_path, &field)));
                }
            }
            Answer::Variants(names) => {
                let mut any_section = false;
                for v in &names {
                    let (sp, dp) = (join(&set_path, v), join(&doc_path, v));
                    if let Answer::Section(_) = answer(&sp, &probe_map) {
                        any_section = true;
                        queue.push_back((sp, dp));
                    }
                }
                if any_section {
                    f.sections.insert(doc_path, names);
                } else {
                    f.values.insert(doc_path, names);
                }
            }
            Answer::Sequence => {
                let entry = format!("{set_path}[0]");
                match answer(&entry, &probe_map) {
                    Answer::Section(_) | Answer::Variants(_) | Answer::Sequence => {
                        f.sections.insert(doc_path.clone(), Vec::new());
                        // An entry is taken next, as if it were the list itself: a list of
                        // sections comes before later sections with the same fields.
                        queue.push_front((entry, format!("{doc_path}[]")));
                    }
                    // A list of plain values is one field; its entries' names, if any.
                    Answer::Value => {
                        f.values.insert(doc_path, scalar_names(&entry));
                    }
                }
            }
            Answer::Value => {
                f.values.insert(doc_path, scalar_names(&set_path));
            }
        }
    }
    f
}

/// The names a value field accepts, if it is an enum (else none).
fn scalar_names(set_path: &str) -> Vec<String> {
    match answer(set_path, PROBE) {
        Answer::Variants(names) => names,
        _ => Vec::new(),
    }
}

/// `docs/SCENARIO.md`'s field tables: path -> the text of its row.
fn documented() -> BTreeMap<String, String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/SCENARIO.md");
    let text = std::fs::read_to_string(path).unwrap();
    let mut rows = BTreeMap::new();
    let mut in_table = false;
    for line in text.lines() {
        if !line.starts_with('|') {
            in_table = false;
            continue;
        }
        if line.starts_with("| Field |") {
            in_table = true;
            continue;
        }
        if !in_table || line.starts_with("|---") {
            continue;
        }
        let first = line[1..].split('|').next().unwrap_or("");
        let paths: Vec<&str> = first.split('`').skip(1).step_by(2).collect();
        assert!(!paths.is_empty(), "a field row without a path: {line}");
        for p in paths {
            let old = rows.insert(p.to_string(), line.to_string());
            assert!(old.is_none(), "`{p}` has two rows in docs/SCENARIO.md");
        }
    }
    rows
}

#[test]
fn scenario_reference_documents_every_field_and_only_fields() {
    let fields = discover();
    let rows = documented();
    // The probes work: the root and its main sections were recognised as sections.
    for s in [
        "",
        "nic",
        "workload",
        "workload.collectives[]",
        "switch_scheduler",
    ] {
        assert!(
            fields.sections.contains_key(s),
            "`{s}` not found as a section"
        );
    }
    assert!(
        fields.values.len() > 150,
        "only {} fields found",
        fields.values.len()
    );

    let mut problems = Vec::new();
    for (path, names) in &fields.values {
        match rows.get(path) {
            None => problems.push(format!("`{path}` has no row")),
            Some(row) => {
                for n in names {
                    if !row.contains(&format!("`{n}`")) {
                        problems.push(format!("`{path}`'s row does not name the value `{n}`"));
                    }
                }
            }
        }
    }
    for (path, first) in &fields.repeats {
        match rows.get(path) {
            None => problems.push(format!("`{path}` (as `{first}`) has no row")),
            Some(row) if !row.contains(&format!("`{first}`")) => {
                problems.push(format!("`{path}`'s row does not say it is as `{first}`"))
            }
            Some(_) => {}
        }
    }
    for (path, names) in &fields.sections {
        if let Some(row) = rows.get(path) {
            for n in names {
                if !row.contains(&format!("`{n}`")) {
                    problems.push(format!("`{path}`'s row does not name the choice `{n}`"));
                }
            }
        }
    }
    for path in rows.keys() {
        let known = fields.values.contains_key(path)
            || fields.sections.contains_key(path)
            || fields.repeats.contains_key(path);
        if !known {
            problems.push(format!(
                "`{path}` is documented but the loader has no such field"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "docs/SCENARIO.md and the scenario structs disagree:\n  {}",
        problems.join("\n  ")
    );
}
