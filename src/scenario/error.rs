//! Scenario errors: where a problem is (file, line, column, field) and serde_yaml's errors
//! turned into such, in words a scenario author reads.

use std::fmt;

use super::{locate, yaml_limits, FieldPath};

/// A problem with a scenario, pointing at where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScenarioError {
    /// The file (or `<embedded quickstart>`).
    pub file: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// 1-based column, when known.
    pub column: Option<usize>,
    /// The field, e.g. `links[3].bandwidth` (empty when the whole document is at fault).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let (Some(l), Some(c)) = (self.line, self.column) {
            write!(f, ":{l}:{c}")?;
        }
        if self.field.is_empty() {
            write!(f, ": {}", self.message)
        } else {
            write!(f, ": field `{}`: {}", self.field, self.message)
        }
    }
}

impl std::error::Error for ScenarioError {}
/// A YAML document refused before it was read (too deep, an alias bomb, a tag), as an error
/// at its place in `file`.
pub(super) fn refused(file: &str, (at, message): yaml_limits::Refusal) -> ScenarioError {
    ScenarioError {
        file: file.to_string(),
        line: at.map(|a| a.0),
        column: at.map(|a| a.1),
        field: String::new(),
        message,
    }
}
/// Converts serde_yaml's error (`path: message at line L column C`) into ours.
pub(super) fn from_yaml_error(e: &serde_yaml::Error, text: &str, file: &str) -> ScenarioError {
    // An empty document (nothing, only comments, `---`, `~`) reads as an empty mapping or as
    // null; serde_yaml then complains about a missing field, which hides the real problem.
    let as_value = serde_yaml::from_str::<serde_yaml::Value>(text);
    if matches!(as_value, Ok(serde_yaml::Value::Null)) {
        return ScenarioError {
            file: file.to_string(),
            line: None,
            column: None,
            field: String::new(),
            message: "the scenario is empty: it needs a fabric (`hosts` and `links`, or \
                      `topology`) and a `workload`"
                .to_string(),
        };
    }
    // An alias bomb or a second document is reported as such even where the scenario's types
    // fail first: the whole file is at fault (reading it as plain YAML expands every alias and
    // reads every document).
    let limit = match &as_value {
        Err(ve)
            if ve.to_string().starts_with("repetition limit")
                || ve.to_string().contains("more than one document") =>
        {
            yaml_limits::explain(ve, text)
        }
        _ => None,
    };
    if let Some((at, message)) = limit.or_else(|| yaml_limits::explain(e, text)) {
        return ScenarioError {
            file: file.to_string(),
            line: at.map(|a| a.0),
            column: at.map(|a| a.1),
            field: String::new(),
            message,
        };
    }
    let mut msg = e.to_string();
    let mut line = e.location().map(|l| l.line());
    let mut column = e.location().map(|l| l.column());
    if let Some(loc) = e.location() {
        let suffix = format!(" at line {} column {}", loc.line(), loc.column());
        if let Some(i) = msg.find(&suffix) {
            msg.replace_range(i..i + suffix.len(), "");
        }
    }
    // serde_yaml prefixes the path of nested errors: `links[0].bandwidth: ...`.
    let mut field = String::new();
    if let Some((head, rest)) = msg.split_once(": ") {
        let is_path = !head.is_empty()
            && head
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.[]".contains(c));
        if is_path {
            field = head.to_string();
            msg = rest.to_string();
        }
    }
    if msg.starts_with("EOF while parsing") {
        msg = format!("{msg} (is the file empty?)");
    }
    // A list or a scalar where a section belongs: serde names the Rust type (`expected struct
    // Workload`), which means nothing to a scenario author.
    if msg.starts_with("invalid type: ") {
        if let Some(i) = msg.find("expected struct ") {
            let what = if field.is_empty() {
                "a mapping of scenario fields (`hosts:`, `workload:`, ...)"
            } else {
                "a mapping of fields"
            };
            let name = i + "expected struct ".len();
            let end = msg[name..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map_or(msg.len(), |j| name + j);
            msg.replace_range(i..end, &format!("expected {what}"));
        }
    }
    // serde_yaml points a repeated key at the start of its mapping; point at the repeat.
    if let Some(key) = msg
        .strip_prefix("duplicate field `")
        .and_then(|k| k.strip_suffix('`'))
    {
        if let Some((l, c)) =
            FieldPath::parse(&field).and_then(|p| locate::locate_repeated_key(text, &p, key))
        {
            line = Some(l);
            column = Some(c);
        }
    }
    // YAML indents with spaces; a tab there gives a scanner error that does not say so.
    if let Some(l) = line {
        let indent = text
            .lines()
            .nth(l.saturating_sub(1))
            .map(|s| &s[..s.len() - s.trim_start().len()]);
        if indent.is_some_and(|i| i.contains('\t')) {
            msg.push_str(&format!(
                " (line {l} is indented with a tab; YAML indents with spaces only)"
            ));
        }
    }
    ScenarioError {
        file: file.to_string(),
        line,
        column,
        field,
        message: msg,
    }
}
