//! ASTRA-sim's system file (`system.astra_sim`): the JSON that tells ASTRA-sim how to run
//! collectives (algorithm per dimension, how multi-dimensional collectives are combined,
//! chunking), read as it is and mapped onto `workload.collective_algorithms`, which sets how
//! a trace's collectives run (Chakra's or the built-in model's).
//!
//! | ASTRA-sim key | fabemu setting |
//! | --- | --- |
//! | `all-reduce-implementation` (and all-gather, reduce-scatter, all-to-all) | `workload.collective_algorithms.all_reduce` (...): one name is one algorithm over all ranks, several are one per dimension |
//! | `collective-optimization` | `scheme`: `localBWAware` = `local_bw_aware`, `baseline` |
//! | `inter-dimension-scheduling` | `policy`: `baseline` = `fixed`, `themis` |
//! | `preferred-dataset-splits` | `chunks` |
//! | `active-chunks-per-dimension` | `chunks_in_flight` (per rank: fabemu does not count chunks per dimension) |
//! | `scheduling-policy`, `intra-dimension-scheduling` | checked (`LIFO`/`FIFO`, `FIFO`); a rank's ready collectives share its links in fabemu, with no order among them |
//! | `endpoint-delay`, `local-reduction-delay` | checked (a whole number of ns); fabemu's NIC and links time every packet themselves, so a non-zero value is reported as not modelled |
//! | compute and memory keys (`local-mem-bw`, `peak-perf`, `roofline-enabled`, `boost-mode`, ...) | not read here (a warning): `workload.device` times compute |
//!
//! Anything else, an unknown value, or a custom (MSCCL) implementation is refused with the
//! file, line and column of the key: a user translating a system file must not get a run
//! that silently differs from what the file says.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{did_you_mean, locate, FieldPath, ScenarioError, Source};

/// The largest ASTRA-sim system file read (a real one is a few hundred bytes).
pub const MAX_SYSTEM_BYTES: u64 = 1 << 20;

/// An ASTRA-sim system file read for a scenario.
#[derive(Clone, Debug)]
pub struct AstraSystem {
    /// Its path as resolved (relative paths are relative to the scenario's folder).
    pub path: String,
    /// What it says that fabemu does not model, one sentence each (the command line prints
    /// them as warnings).
    pub warnings: Vec<String>,
}

/// The collective implementation keys and the `collective_algorithms` field each sets.
const IMPLEMENTATIONS: [(&str, &str); 4] = [
    ("all-reduce-implementation", "all_reduce"),
    ("all-gather-implementation", "all_gather"),
    ("reduce-scatter-implementation", "reduce_scatter"),
    ("all-to-all-implementation", "all_to_all"),
];

/// Keys of ASTRA-sim's compute and memory model: fabemu takes those from `workload.device`.
const COMPUTE_KEYS: [&str; 10] = [
    "local-mem-bw",
    "boost-mode",
    "roofline-enabled",
    "peak-perf",
    "model-shared-bus",
    "track-local-mem",
    "L",
    "o",
    "g",
    "G",
];

/// The other keys read here.
const OTHER_KEYS: [&str; 8] = [
    "scheduling-policy",
    "intra-dimension-scheduling",
    "inter-dimension-scheduling",
    "collective-optimization",
    "preferred-dataset-splits",
    "active-chunks-per-dimension",
    "endpoint-delay",
    "local-reduction-delay",
];

/// ASTRA-sim's names of the algorithms fabemu runs, and fabemu's.
const ALGORITHMS: [(&str, &str); 4] = [
    ("ring", "ring"),
    ("direct", "direct"),
    ("halvingDoubling", "halving_doubling"),
    ("doubleBinaryTree", "double_binary_tree"),
];

/// Reads the system file `system.astra_sim` names (relative to the scenario's folder) and
/// sets `workload.collective_algorithms` from it; errors name the file and the key.
pub(super) fn apply(src: &mut Source, rel: &str) -> Result<(), ScenarioError> {
    let here = FieldPath::root().key("system").key("astra_sim");
    let path = beside_scenario(&src.file, rel);
    if !path.is_file() {
        return Err(src.error_at(
            &here,
            format!("no ASTRA-sim system file at {}", path.display()),
        ));
    }
    let w = &src.scenario.workload;
    if w.chakra.is_none() && w.training.is_none() {
        return Err(src.error_at(
            &here,
            "an ASTRA-sim system file sets how a trace's collectives run \
             (workload.collective_algorithms); this workload has no trace (`chakra` or \
             `training`)",
        ));
    }
    let file = path.display().to_string();
    let text = fabemu_workload::input::read_text_limited(
        &path,
        MAX_SYSTEM_BYTES,
        "an ASTRA-sim system file",
    )
    .map_err(|e| {
        at_file(
            &file,
            None,
            "",
            format!("cannot read the ASTRA-sim system file: {e}"),
        )
    })?;
    let doc: Value = serde_json::from_str(&text).map_err(|e| {
        at_file(
            &file,
            Some((e.line(), e.column())),
            "",
            format!("not valid JSON: {e}"),
        )
    })?;
    let Value::Object(map) = doc else {
        return Err(at_file(
            &file,
            Some((1, 1)),
            "",
            "an ASTRA-sim system file is a JSON object of settings".into(),
        ));
    };
    let (settings, warnings) = settings_of(&map, &text, &file)?;
    // Every setting goes into `workload.collective_algorithms`, through serde (so its own
    // checks apply); one the scenario gives itself too is refused rather than overridden.
    let mut current = serde_yaml::to_value(&src.scenario.workload.collective_algorithms)
        .map_err(|e| src.error_at(&here, e.to_string()))?;
    if let serde_yaml::Value::Mapping(m) = &mut current {
        for (k, v) in settings {
            let given = m.get(&k).is_some_and(|x| !x.is_null());
            if given {
                return Err(src.error_at(
                    &FieldPath::root()
                        .key("workload")
                        .key("collective_algorithms")
                        .key(k.as_str().unwrap_or_default()),
                    format!("set by the ASTRA-sim system file {file} too; give it in one place"),
                ));
            }
            m.insert(k, v);
        }
    }
    src.scenario.workload.collective_algorithms = serde_yaml::from_value(current).map_err(|e| {
        at_file(
            &file,
            None,
            "",
            format!("cannot apply the system file: {e}"),
        )
    })?;
    src.system = Some(AstraSystem {
        path: file,
        warnings,
    });
    Ok(())
}

/// The scenario settings (`workload.collective_algorithms` keys) that the system file's
/// `map` makes, and warnings for its keys fabemu does not model; `text` and `file` locate
/// errors.
fn settings_of(
    map: &serde_json::Map<String, Value>,
    text: &str,
    file: &str,
) -> Result<(serde_yaml::Mapping, Vec<String>), ScenarioError> {
    let key_err = |key: &str, message: String| {
        let loc = locate(text, &FieldPath::root().key(key));
        at_file(file, loc, key, message)
    };
    let mut settings = serde_yaml::Mapping::new();
    let mut warnings = Vec::new();
    for (key, value) in map {
        let k = key.as_str();
        let text_of = || {
            value
                .as_str()
                .ok_or_else(|| key_err(k, "expected a string".into()))
        };
        let count = |zero_ok: bool| {
            value.as_u64().filter(|&n| zero_ok || n > 0).ok_or_else(|| {
                key_err(
                    k,
                    format!(
                        "expected a whole number{}, found {value}",
                        if zero_ok { "" } else { " of at least 1" }
                    ),
                )
            })
        };
        if let Some(&(_, field)) = IMPLEMENTATIONS.iter().find(|(n, _)| *n == k) {
            settings.insert(field.into(), implementation(value, &|m| key_err(k, m))?);
            continue;
        }
        if k.ends_with("-implementation-custom") {
            return Err(key_err(
                k,
                "custom (MSCCL) implementations are not read from a system file: give the \
                 XML file as `workload.collective_algorithms.all_reduce: {msccl: FILE}` (or \
                 the collective's own key)"
                    .into(),
            ));
        }
        match k {
            "collective-optimization" => {
                let scheme = match text_of()? {
                    "localBWAware" => "local_bw_aware",
                    "baseline" => "baseline",
                    other => return Err(key_err(k, unknown(other, &["localBWAware", "baseline"]))),
                };
                settings.insert("scheme".into(), scheme.into());
            }
            "inter-dimension-scheduling" => {
                let policy = match text_of()? {
                    "baseline" => "fixed",
                    "themis" => "themis",
                    other => return Err(key_err(k, unknown(other, &["baseline", "themis"]))),
                };
                settings.insert("policy".into(), policy.into());
            }
            "scheduling-policy" => {
                let v = text_of()?;
                if !["LIFO", "FIFO"].contains(&v) {
                    return Err(key_err(k, unknown(v, &["LIFO", "FIFO"])));
                }
            }
            "intra-dimension-scheduling" => {
                let v = text_of()?;
                if v != "FIFO" {
                    return Err(key_err(
                        k,
                        format!(
                            "{}; fabemu runs the chunks of a dimension in order",
                            unknown(v, &["FIFO"])
                        ),
                    ));
                }
            }
            "preferred-dataset-splits" => {
                settings.insert("chunks".into(), count(false)?.into());
            }
            "active-chunks-per-dimension" => {
                settings.insert("chunks_in_flight".into(), count(false)?.into());
            }
            "endpoint-delay" | "local-reduction-delay" => {
                let ns = count(true)?;
                if ns > 0 {
                    warnings.push(format!(
                        "{file}: `{k}: {ns}` is not modelled: fabemu's NICs and links time \
                         every packet themselves (a reduction takes `reduce_bandwidth` where a \
                         collective gives one)"
                    ));
                }
            }
            _ if COMPUTE_KEYS.contains(&k) => warnings.push(format!(
                "{file}: `{k}` is not read: compute is timed by the traces' durations or \
                 `workload.device`"
            )),
            _ => {
                let known: Vec<&str> = IMPLEMENTATIONS
                    .iter()
                    .map(|(n, _)| *n)
                    .chain(OTHER_KEYS)
                    .chain(COMPUTE_KEYS)
                    .collect();
                let hint = did_you_mean(k, &known)
                    .map(|g| format!("; did you mean `{g}`?"))
                    .unwrap_or_default();
                return Err(key_err(
                    k,
                    format!("unknown ASTRA-sim system key `{k}`{hint}"),
                ));
            }
        }
    }
    Ok((settings, warnings))
}

/// `rel` resolved against the folder of the scenario file `file`, as a user reading the file
/// expects (a scenario given as text, `<...>`, resolves against the current folder).
pub(super) fn beside_scenario(file: &str, rel: &str) -> PathBuf {
    let base = Path::new(file)
        .parent()
        .filter(|p| !p.as_os_str().is_empty() && !file.starts_with('<'));
    match base {
        Some(b) => b.join(rel),
        None => Path::new(rel).to_path_buf(),
    }
}

/// A list of ASTRA-sim algorithm names as fabemu's algorithm: one name is one algorithm over
/// all ranks, several are one per dimension.
fn implementation(
    value: &Value,
    err: &dyn Fn(String) -> ScenarioError,
) -> Result<serde_yaml::Value, ScenarioError> {
    let names = value
        .as_array()
        .filter(|a| !a.is_empty())
        .ok_or_else(|| err(format!("expected a list of algorithm names, found {value}")))?;
    let known: Vec<&str> = ALGORITHMS.iter().map(|(a, _)| *a).collect();
    let mut out = Vec::with_capacity(names.len());
    for n in names {
        let s = n
            .as_str()
            .ok_or_else(|| err(format!("expected an algorithm name, found {n}")))?;
        // ASTRA-sim's `oneRing` etc. run one algorithm over all ranks: fabemu's flat form.
        let flat = s
            .strip_prefix("one")
            .map(|r| {
                let mut c = r.chars();
                c.next()
                    .map(|f| f.to_lowercase().chain(c).collect::<String>())
                    .unwrap_or_default()
            })
            .filter(|_| names.len() == 1);
        let name = flat.as_deref().unwrap_or(s);
        let Some(&(_, ours)) = ALGORITHMS.iter().find(|(a, _)| *a == name) else {
            return Err(err(unknown(s, &known)));
        };
        out.push(serde_yaml::Value::from(ours));
    }
    Ok(match <[serde_yaml::Value; 1]>::try_from(out) {
        Ok([one]) => one,
        Err(many) => serde_yaml::Value::Sequence(many),
    })
}

/// "unknown value `v`; expected one of ...".
fn unknown(v: &str, expected: &[&str]) -> String {
    let hint = did_you_mean(v, expected)
        .map(|g| format!(" (did you mean `{g}`?)"))
        .unwrap_or_default();
    format!(
        "unknown value `{v}`{hint}; expected one of {}",
        expected
            .iter()
            .map(|e| format!("`{e}`"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// An error in the system file itself.
fn at_file(file: &str, at: Option<(usize, usize)>, key: &str, message: String) -> ScenarioError {
    ScenarioError {
        file: file.to_string(),
        line: at.map(|a| a.0),
        column: at.map(|a| a.1),
        field: key.to_string(),
        message,
    }
}
