//! Loading a scenario: read the file, apply `--set` overrides, read the files it names,
//! and check it.

use std::path::Path;

use super::astra_network::{load_astra_file, AstraFile};
use super::error::{from_yaml_error, refused, ScenarioError};
use super::{
    astra_system, locate, overrides, validate, yaml_limits, AstraSystem, Fidelity, FieldPath,
    Override, Scenario, MAX_SCENARIO_BYTES,
};

/// A parsed scenario with the text it came from (for locating later errors).
#[derive(Clone, Debug)]
pub struct Source {
    /// The scenario.
    pub scenario: Scenario,
    /// Its text.
    pub text: String,
    /// Its file name, for messages.
    pub file: String,
    /// The ASTRA-sim network file `topology.astra_sim` names, read and parsed.
    pub astra: Option<AstraFile>,
    /// The `--set` overrides applied over `text`, in order.
    pub overrides: Vec<Override>,
    /// The ASTRA-sim system file `system.astra_sim` names, applied to the scenario.
    pub system: Option<AstraSystem>,
}
impl Source {
    /// An error about the value at `path`, located in the text.
    pub fn error_at(&self, path: &FieldPath, message: impl Into<String>) -> ScenarioError {
        if let Some(o) = overrides::owner(&self.overrides, path) {
            return ScenarioError {
                file: o.origin(),
                line: None,
                column: None,
                field: path.to_string(),
                message: message.into(),
            };
        }
        let loc = locate(&self.text, path);
        ScenarioError {
            file: self.file.clone(),
            line: loc.map(|l| l.0),
            column: loc.map(|l| l.1),
            field: path.to_string(),
            message: message.into(),
        }
    }
}

/// Refuses, with a located error, what the scenario's fidelity does not model (run after
/// `--fidelity` has overridden the file's choice).
pub fn check_fidelity(src: &Source) -> Result<(), ScenarioError> {
    match src.scenario.fidelity {
        Fidelity::Flow => validate::check_flow_fidelity(src),
        Fidelity::Packet => Ok(()),
    }
}
/// Reads and checks the scenario in file `path`.
pub fn load_file(path: &Path) -> Result<Source, ScenarioError> {
    load_file_with(path, Vec::new())
}

/// Reads the scenario in file `path`, applies `overrides` (`--set`) in order, and checks the
/// result.
pub fn load_file_with(path: &Path, overrides: Vec<Override>) -> Result<Source, ScenarioError> {
    let file = path.display().to_string();
    let text = fabemu_workload::input::read_text_limited(path, MAX_SCENARIO_BYTES, "a scenario")
        .map_err(|e| ScenarioError {
            file: file.clone(),
            line: None,
            column: None,
            field: String::new(),
            message: format!("cannot read the scenario: {e}"),
        })?;
    load_str_with(&text, &file, overrides)
}

/// Parses and checks a scenario given as text; `file` names it in messages.
pub fn load_str(text: &str, file: &str) -> Result<Source, ScenarioError> {
    load_str_with(text, file, Vec::new())
}

/// Parses a scenario given as text, applies `overrides` (`--set`) in order, and checks the
/// result; `file` names the text in messages.
pub fn load_str_with(
    text: &str,
    file: &str,
    overrides: Vec<Override>,
) -> Result<Source, ScenarioError> {
    yaml_limits::check(text).map_err(|r| refused(file, r))?;
    let scenario: Scenario = if overrides.is_empty() {
        serde_yaml::from_str(text).map_err(|e| from_yaml_error(&e, text, file))?
    } else {
        with_overrides(text, file, &overrides)?
    };
    let mut src = Source {
        scenario,
        text: text.to_string(),
        file: file.to_string(),
        astra: None,
        overrides,
        system: None,
    };
    if let Some(rel) = src
        .scenario
        .topology
        .as_ref()
        .and_then(|t| t.astra_sim.clone())
    {
        // Relative to the scenario's folder, as a user reading the file would expect.
        let path = astra_system::beside_scenario(file, &rel);
        if !path.is_file() {
            return Err(src.error_at(
                &FieldPath::root().key("topology").key("astra_sim"),
                format!("no ASTRA-sim network file at {}", path.display()),
            ));
        }
        let astra = load_astra_file(&path)?;
        src.astra = Some(astra);
    }
    if let Some(rel) = src.scenario.system.as_ref().map(|s| s.astra_sim.clone()) {
        astra_system::apply(&mut src, &rel)?;
    }
    validate::check(&src)?;
    check_fidelity(&src)?;
    Ok(src)
}

/// The scenario of `text` with `overrides` applied. Errors in overridden values name the
/// override; others are located in `text`, as without overrides.
fn with_overrides(
    text: &str,
    file: &str,
    overrides: &[Override],
) -> Result<Scenario, ScenarioError> {
    // The file's own error, exactly as without overrides (its position and wording).
    let file_error = || {
        serde_yaml::from_str::<Scenario>(text)
            .err()
            .map(|e| from_yaml_error(&e, text, file))
    };
    let mut doc: serde_yaml::Value = match serde_yaml::from_str(text) {
        Ok(v) => v,
        Err(e) => return Err(file_error().unwrap_or_else(|| from_yaml_error(&e, text, file))),
    };
    for o in overrides {
        overrides::apply(&mut doc, o)?;
    }
    // Through text again, so serde_yaml's error paths name the faulty field.
    let merged = serde_yaml::to_string(&doc).map_err(|e| ScenarioError {
        file: file.to_string(),
        line: None,
        column: None,
        field: String::new(),
        message: format!("cannot apply --set: {e}"),
    })?;
    let e = match serde_yaml::from_str::<Scenario>(&merged) {
        Ok(s) => return Ok(s),
        Err(e) => from_yaml_error(&e, &merged, file),
    };
    let at = FieldPath::parse(&e.field).unwrap_or_default();
    // `unknown field `x`` is reported at the mapping; the override may be the field itself.
    let unknown = e
        .message
        .strip_prefix("unknown field `")
        .and_then(|m| m.split_once('`'))
        .map(|(k, _)| at.key(k));
    let by_override = |o: &Override| ScenarioError {
        file: o.origin(),
        line: None,
        column: None,
        field: e.field.clone(),
        message: e.message.clone(),
    };
    if let Some(o) = overrides::owner(overrides, unknown.as_ref().unwrap_or(&at)) {
        return Err(by_override(o));
    }
    // An unknown field the overrides made (`--set foo.bar=1` adds `foo`).
    if let Some(o) = unknown
        .as_ref()
        .and_then(|u| overrides.iter().rev().find(|o| o.path.0.starts_with(&u.0)))
    {
        return Err(by_override(o));
    }
    if let Some(fe) = file_error().filter(|fe| fe.field == e.field && fe.message == e.message) {
        return Err(fe);
    }
    // A value the overrides made incomplete (`--set workload.collectives[2].size=1MiB` adds
    // an entry without `op`).
    if let Some(o) = overrides.iter().rev().find(|o| o.path.0.starts_with(&at.0)) {
        if !at.0.is_empty() {
            return Err(by_override(o));
        }
    }
    let loc = locate(text, &at);
    Err(ScenarioError {
        file: file.to_string(),
        line: loc.map(|l| l.0),
        column: loc.map(|l| l.1),
        ..e
    })
}
