//! ASTRA-sim network files named by `topology.astra_sim`: read, located errors, size
//! limits, and warnings for the keys ASTRA-sim ignores.

use std::path::Path;

use super::error::{refused, ScenarioError};
use super::fabric::DimKindYaml;
use super::{locate, validate, yaml_limits, FieldPath, MAX_ASTRA_BYTES};

/// An ASTRA-sim network file read for a scenario.
#[derive(Clone, Debug)]
pub struct AstraFile {
    /// Its path as resolved (relative paths are relative to the scenario's folder).
    pub path: String,
    /// The dimensions it defines.
    pub network: fabemu_topologies::astra_sim::AstraNetwork,
    /// One sentence per key the file has and ASTRA-sim does not read (ignored, as ASTRA-sim
    /// does), with its position and the key it was probably meant to be; the command line
    /// prints them as warnings.
    pub warnings: Vec<String>,
}

/// The keys of an ASTRA-sim network file that ASTRA-sim reads.
const ASTRA_KEYS: [&str; 4] = ["topology", "npus_count", "bandwidth", "latency"];

/// The key among `known` that `key` is most likely a misspelling of, if any is close enough
/// (case and one or two typos: `latncy`, `npu_count`, `Bandwidth`).
pub fn did_you_mean<'k>(key: &str, known: &[&'k str]) -> Option<&'k str> {
    let key = key.to_lowercase();
    known
        .iter()
        .map(|k| (strsim::normalized_damerau_levenshtein(&key, k), *k))
        .filter(|(score, _)| *score >= 0.7)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k)
}

/// The top-level keys of `text` (a YAML mapping) that are not ASTRA-sim's, as written.
fn astra_extra_keys(text: &str) -> Vec<String> {
    match serde_yaml::from_str::<serde_yaml::Value>(text) {
        Ok(serde_yaml::Value::Mapping(m)) => m
            .keys()
            .filter_map(|k| k.as_str())
            .filter(|k| !ASTRA_KEYS.contains(k))
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    }
}

/// Reads and parses an ASTRA-sim network file; errors name that file, and the line and column
/// of the offending entry when it has one.
pub fn load_astra_file(path: &Path) -> Result<AstraFile, ScenarioError> {
    use fabemu_topologies::astra_sim::{self, AstraSimError};
    let file = path.display().to_string();
    let plain = |message: String| ScenarioError {
        file: file.clone(),
        line: None,
        column: None,
        field: String::new(),
        message,
    };
    let text = fabemu_workload::input::read_text_limited(
        path,
        MAX_ASTRA_BYTES,
        "an ASTRA-sim network file",
    )
    .map_err(|e| plain(format!("cannot read the ASTRA-sim network file: {e}")))?;
    yaml_limits::check(&text).map_err(|r| refused(&file, r))?;
    let network = astra_sim::parse(&text).map_err(|e| {
        let root = FieldPath::root();
        let at = match &e {
            AstraSimError::LengthMismatch { field, .. } | AstraSimError::NotAList { field } => {
                Some(root.key(field))
            }
            AstraSimError::UnknownKind { index, .. } => Some(root.key("topology").index(*index)),
            AstraSimError::BadValue { field, index, .. } => Some(root.key(field).index(*index)),
            AstraSimError::Yaml { .. } => {
                // Again, for serde_yaml's error itself (its position, its kind).
                if let Err(ye) = serde_yaml::from_str::<serde_yaml::Value>(&text) {
                    let (at, message) = yaml_limits::explain(&ye, &text).unwrap_or_else(|| {
                        let loc = ye.location().map(|l| (l.line(), l.column()));
                        let m = ye.to_string();
                        let m = m.split(" at line ").next().unwrap_or(&m).to_string();
                        (loc, format!("not valid YAML: {m}"))
                    });
                    return ScenarioError {
                        file: file.clone(),
                        line: at.map(|a| a.0),
                        column: at.map(|a| a.1),
                        field: String::new(),
                        message,
                    };
                }
                None
            }
            AstraSimError::MissingField { field } => {
                // A misspelt key is ignored, and the key it should have been is then missing.
                let extra = astra_extra_keys(&text);
                let guess = extra.iter().find(|k| did_you_mean(k, &[field]).is_some());
                if let Some(k) = guess {
                    let p = root.key(k);
                    let loc = locate(&text, &p);
                    return ScenarioError {
                        file: file.clone(),
                        line: loc.map(|l| l.0),
                        column: loc.map(|l| l.1),
                        field: k.clone(),
                        message: format!("`{field}` is missing; is `{k}` a misspelling of it?"),
                    };
                }
                None
            }
            _ => None,
        };
        match at {
            Some(p) => {
                let loc = locate(&text, &p);
                ScenarioError {
                    file: file.clone(),
                    line: loc.map(|l| l.0),
                    column: loc.map(|l| l.1),
                    field: p.to_string(),
                    message: e.to_string(),
                }
            }
            None => plain(e.to_string()),
        }
    })?;
    // The same size limits as any scenario, before anything is built.
    let dims = network.dims.iter().map(|d| {
        let kind = match d.kind {
            fabemu_topologies::DimKind::Ring => DimKindYaml::Ring,
            fabemu_topologies::DimKind::FullyConnected => DimKindYaml::FullyConnected,
            fabemu_topologies::DimKind::Switch => DimKindYaml::Switch,
        };
        (kind, d.size)
    });
    let too_big = match validate::dims_size(dims) {
        None => Some("the fabric's size overflows 64 bits".to_string()),
        Some((h, _, _)) if h > validate::MAX_HOSTS => Some(format!(
            "{h} NPUs; fabemu supports at most {}",
            validate::MAX_HOSTS
        )),
        Some((_, _, l)) if l > validate::MAX_LINKS => Some(format!(
            "{l} links; fabemu supports at most {}",
            validate::MAX_LINKS
        )),
        Some((h, sw, _)) if h * (h + sw) > validate::MAX_ROUTE_ENTRIES => Some(format!(
            "{} routing entries; at most {}",
            h * (h + sw),
            validate::MAX_ROUTE_ENTRIES
        )),
        _ => None,
    };
    if let Some(m) = too_big {
        let loc = locate(&text, &FieldPath::root().key("npus_count"));
        return Err(ScenarioError {
            file,
            line: loc.map(|l| l.0),
            column: loc.map(|l| l.1),
            field: "npus_count".into(),
            message: format!("the fabric is too large: {m}"),
        });
    }
    let warnings = network
        .ignored_keys
        .iter()
        .map(|k| {
            let at = match locate(&text, &FieldPath::root().key(k)) {
                Some((l, c)) => format!("{file}:{l}:{c}"),
                None => file.clone(),
            };
            let hint = match did_you_mean(k, &ASTRA_KEYS) {
                Some(m) => format!("; did you mean `{m}`?"),
                None => String::new(),
            };
            format!(
                "{at}: key `{k}` is ignored (ASTRA-sim reads only topology, npus_count, \
                 bandwidth and latency){hint}"
            )
        })
        .collect();
    Ok(AstraFile {
        path: file,
        network,
        warnings,
    })
}
