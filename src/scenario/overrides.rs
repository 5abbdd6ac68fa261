//! `--set PATH=VALUE`: changing any field of a scenario from the command line, so sweeps need
//! no copies of files.
//!
//! The file is read as a YAML tree, each override replaces (or adds) the value at its path —
//! the value is YAML itself, so `--set nic.cc=dcqcn`, `--set seed=3`, `--set
//! 'links[0]={a: h0, b: s0, bandwidth: 100Gbps, latency: 1us}'` all work — and the result goes
//! through the same deserialization and validation as a file. An error in an overridden value
//! names the override (`--set workload.collectives[0].size`) instead of a file position;
//! anything else is located in the file as usual.

use serde_yaml::Value;

use super::locate::{FieldPath, Seg};
use super::ScenarioError;

/// One `--set PATH=VALUE`.
#[derive(Clone, Debug, PartialEq)]
pub struct Override {
    /// Where, e.g. `workload.collectives[0].size`.
    pub path: FieldPath,
    /// The new value (YAML).
    pub value: Value,
    /// As the user wrote it, `PATH=VALUE`.
    pub text: String,
}

impl Override {
    /// Parses `PATH=VALUE`; the path as fields and indexes (`a.b[2].c`), the value as YAML
    /// (empty: null).
    pub fn parse(text: &str) -> Result<Override, ScenarioError> {
        let fail = |field: &str, message: String| ScenarioError {
            file: format!("--set {}", abbreviated(text)),
            line: None,
            column: None,
            field: field.to_string(),
            message,
        };
        let Some((path, value)) = text.split_once('=') else {
            return Err(fail(
                "",
                "expected PATH=VALUE, e.g. `--set nic.cc=dcqcn` or `--set seed=3`".into(),
            ));
        };
        let path = path.trim();
        // A scenario nests a few levels; a path deeper than YAML may nest is a mistake, and
        // checking it first keeps the work on it small whatever its length.
        let segments = path.split(['.', '[']).count();
        if segments > super::yaml_limits::MAX_DEPTH {
            return Err(fail(
                "",
                format!(
                    "the path has {segments} parts; a scenario field is at most {} levels \
                     deep",
                    super::yaml_limits::MAX_DEPTH
                ),
            ));
        }
        let Some(fp) = FieldPath::parse(path).filter(|p| !p.0.is_empty()) else {
            return Err(fail(
                "",
                format!(
                    "`{path}` is not a field path; write fields with dots and list entries \
                     with [index], e.g. `workload.collectives[0].size`"
                ),
            ));
        };
        super::yaml_limits::check(value).map_err(|(_, message)| ScenarioError {
            file: format!("--set {path}"),
            line: None,
            column: None,
            field: path.to_string(),
            message,
        })?;
        let value: Value = serde_yaml::from_str(value).map_err(|e| ScenarioError {
            file: format!("--set {fp}"),
            line: None,
            column: None,
            field: path.to_string(),
            message: format!("the value is not valid YAML: {}", plain_yaml_message(&e)),
        })?;
        Ok(Override {
            path: fp,
            value,
            text: text.to_string(),
        })
    }

    /// The error's "file": the override by its path.
    pub fn origin(&self) -> String {
        format!("--set {}", self.path)
    }
}

/// `text` cut to its first 60 characters (a message quotes it; a mistake can be long).
fn abbreviated(text: &str) -> String {
    match text.char_indices().nth(60) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_string(),
    }
}

/// serde_yaml's message without its position (which is in the value, not in a file).
fn plain_yaml_message(e: &serde_yaml::Error) -> String {
    let msg = e.to_string();
    match msg.find(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg,
    }
}

/// Sets `o.value` at `o.path` in `doc`, creating missing mappings on the way; a list entry
/// must exist, or be the next one (appended).
pub fn apply(doc: &mut Value, o: &Override) -> Result<(), ScenarioError> {
    let fail = |at: &FieldPath, message: String| ScenarioError {
        file: o.origin(),
        line: None,
        column: None,
        field: at.to_string(),
        message,
    };
    let mut here = doc;
    let mut at = FieldPath::root();
    for seg in &o.path.0 {
        if here.is_null() {
            // A missing section: `--set nic.mtu=1KiB` on a file without `nic:`.
            *here = match seg {
                Seg::Key(_) => Value::Mapping(Default::default()),
                Seg::Index(_) => Value::Sequence(Vec::new()),
            };
        }
        here = match (seg, here) {
            (Seg::Key(k), Value::Mapping(m)) => {
                at = at.key(k);
                let existing = m.keys().find(|key| key_matches(key, k)).cloned();
                let key = existing.unwrap_or_else(|| key_value(k));
                m.entry(key).or_insert(Value::Null)
            }
            (Seg::Index(i), Value::Sequence(v)) => {
                let len = v.len();
                if *i == len {
                    v.push(Value::Null);
                }
                at = at.index(*i);
                match v.get_mut(*i) {
                    Some(x) => x,
                    None => {
                        return Err(fail(
                            &at,
                            format!(
                                "there is no entry {i}: the list has {len} (0..{len}; \
                                 index {len} appends one)"
                            ),
                        ))
                    }
                }
            }
            (Seg::Key(k), _) => {
                return Err(fail(
                    &at,
                    format!("is not a mapping, so it has no field `{k}`"),
                ))
            }
            (Seg::Index(i), _) => {
                return Err(fail(&at, format!("is not a list, so it has no entry {i}")))
            }
        };
    }
    *here = o.value.clone();
    Ok(())
}

/// Whether mapping key `key` is the path's `k` (keys may be numbers: `dscp_priority.48`).
fn key_matches(key: &Value, k: &str) -> bool {
    match key {
        Value::String(s) => s == k,
        Value::Number(n) => n.to_string() == k,
        Value::Bool(b) => b.to_string() == k,
        _ => false,
    }
}

/// A new key: a number when it reads as one (`dscp_priority.48`), else a string.
fn key_value(k: &str) -> Value {
    match k.parse::<u64>() {
        Ok(n) => Value::Number(n.into()),
        Err(_) => Value::String(k.to_string()),
    }
}

/// The override that last set `path` or one of its ancestors (later ones win), if any.
pub fn owner<'o>(overrides: &'o [Override], path: &FieldPath) -> Option<&'o Override> {
    overrides
        .iter()
        .rev()
        .find(|o| path.0.starts_with(&o.path.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(doc: &str, o: &str) -> Result<Value, ScenarioError> {
        let mut v: Value = serde_yaml::from_str(doc).map_err(|e| ScenarioError {
            file: String::new(),
            line: None,
            column: None,
            field: String::new(),
            message: e.to_string(),
        })?;
        apply(&mut v, &Override::parse(o)?)?;
        Ok(v)
    }

    fn yaml(s: &str) -> Value {
        serde_yaml::from_str(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn sets_adds_and_appends() {
        let doc = "seed: 1\nworkload:\n  collectives:\n    - {op: all_reduce, size: 1MiB}\n";
        assert_eq!(
            set(doc, "seed=3").ok(),
            Some(yaml(
                "seed: 3\nworkload: {collectives: [{op: all_reduce, size: 1MiB}]}"
            ))
        );
        assert_eq!(
            set(doc, "workload.collectives[0].size=64MiB").ok(),
            Some(yaml(
                "seed: 1\nworkload: {collectives: [{op: all_reduce, size: 64MiB}]}"
            ))
        );
        assert_eq!(
            set(doc, "nic.cc={dcqcn: {g: 0.5}}").ok(),
            Some(yaml(
                "seed: 1\nworkload: {collectives: [{op: all_reduce, size: 1MiB}]}\n\
                 nic: {cc: {dcqcn: {g: 0.5}}}"
            ))
        );
        assert_eq!(
            set(doc, "workload.collectives[1]={op: all_gather, size: 2MiB}").ok(),
            Some(yaml(
                "seed: 1\nworkload: {collectives: [{op: all_reduce, size: 1MiB}, \
                 {op: all_gather, size: 2MiB}]}"
            ))
        );
        assert_eq!(
            set(
                "switch_buffer: {dscp_priority: {48: 7}}",
                "switch_buffer.dscp_priority.48=6"
            )
            .ok(),
            Some(yaml("switch_buffer: {dscp_priority: {48: 6}}"))
        );
    }

    #[test]
    fn bad_overrides_name_themselves() {
        let doc = "seed: 1\nworkload:\n  collectives:\n    - {op: all_reduce, size: 1MiB}\n";
        let e = set(doc, "workload.collectives[3].size=1MiB").err();
        assert_eq!(
            e.map(|e| e.to_string()),
            Some(
                "--set workload.collectives[3].size: field `workload.collectives[3]`: there is \
                 no entry 3: the list has 1 (0..1; index 1 appends one)"
                    .to_string()
            )
        );
        let e = set(doc, "seed.x=1").err().map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("--set seed.x: field `seed`: is not a mapping, so it has no field `x`")
        );
        let deep = format!("{}=1", vec!["a"; 20_000].join("."));
        for bad in ["seed", "=3", "a..b=1", "x=[1", "seed=!Foo 3", &deep] {
            assert!(set(doc, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn later_overrides_own_their_paths() {
        let os: Vec<Override> = ["nic.cc=dcqcn", "nic={mtu: 1KiB}", "seed=2"]
            .iter()
            .filter_map(|t| Override::parse(t).ok())
            .collect();
        let p = |s: &str| FieldPath::parse(s).unwrap_or_default();
        assert_eq!(
            owner(&os, &p("nic.cc")).map(|o| o.text.as_str()),
            Some("nic={mtu: 1KiB}")
        );
        assert_eq!(
            owner(&os, &p("seed")).map(|o| o.text.as_str()),
            Some("seed=2")
        );
        assert_eq!(owner(&os, &p("links[0]")), None);
        assert_eq!(owner(&os, &p("")), None);
    }
}
