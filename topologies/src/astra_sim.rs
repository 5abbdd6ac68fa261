//! ASTRA-sim network files, read as they are.
//!
//! ASTRA-sim's analytical network backend describes a multi-dimensional fabric in YAML:
//!
//! ```yaml
//! topology: [ Ring, FullyConnected, Switch ]   # one kind per dimension, dimension 0 first
//! npus_count: [ 2, 8, 4 ]                      # hosts per group in each dimension
//! bandwidth: [ 200.0, 100.0, 50.0 ]            # GB/s per link, GB = 2^30 bytes
//! latency: [ 50.0, 500.0, 2000.0 ]             # ns per hop
//! ```
//!
//! [`parse`] turns such a file into [`DimSpec`]s for [`multi_dim`], in ASTRA-sim's own units:
//! bandwidth in GB/s where 1 GB = 2^30 bytes (ASTRA-sim's code converts so), so 1 GB/s is
//! `8 × 2^30` = [`BPS_PER_GB_PER_S`] bits per second, and latency in nanoseconds per hop (one
//! link; a switch dimension is two hops). Conversions are exact: a number is taken as the
//! decimal written in the file (for numbers with up to 15 significant digits; longer ones as
//! the shortest decimal of the nearest double) and multiplied out in integers, rounding to the
//! nearest bit/s or picosecond only when the product is fractional (halves round up). So
//! `50.0` GB/s is exactly 429 496 729 600 bit/s.
//!
//! Like ASTRA-sim, which reads these four keys and ignores the rest, other top-level keys are
//! not an error; [`AstraNetwork::ignored_keys`] lists them so a caller can warn (a misspelt key
//! shows up there, and the key it should have been is then reported missing). The checks are
//! ASTRA-sim's, with the offending field and entry named: the three lists as long as
//! `topology`, kinds `Ring`, `FullyConnected` or `Switch` (spelled exactly so), `npus_count`
//! whole numbers of at least 2, `bandwidth` greater than 0, `latency` at least 0.

use crate::dimensional::{multi_dim, DimKind, DimSpec};
use crate::error::TopologyError;
use crate::graph::Graph;

/// Bits per second in ASTRA-sim's 1 GB/s (`8 × 2^30`).
pub const BPS_PER_GB_PER_S: u64 = 8 << 30;

/// Picoseconds per nanosecond.
const PS_PER_NS: u64 = 1000;

/// The keys ASTRA-sim reads, in the order it checks them.
const FIELDS: [&str; 4] = ["topology", "npus_count", "bandwidth", "latency"];

/// Why an ASTRA-sim network file could not be read. Fields are named as in the file
/// (`npus_count[1]` is the second entry of `npus_count`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AstraSimError {
    /// The text is not YAML.
    #[error("not valid YAML: {message}")]
    Yaml {
        /// The YAML parser's message, with the line and column.
        message: String,
    },

    /// The document is not a mapping of keys to values.
    #[error("an ASTRA-sim network file is a mapping with keys topology, npus_count, bandwidth and latency")]
    NotAMapping,

    /// One of the four keys is missing.
    #[error("`{field}` is missing")]
    MissingField {
        /// The missing key.
        field: &'static str,
    },

    /// A key whose value is not a list.
    #[error("`{field}` must be a list with one entry per dimension, e.g. `{field}: [ ... ]`")]
    NotAList {
        /// The key.
        field: &'static str,
    },

    /// `topology` lists no dimension.
    #[error("`topology` lists no dimension")]
    NoDimensions,

    /// A list whose length differs from `topology`'s.
    #[error(
        "`{field}` has {len} entries but `topology` has {dims}: one entry per dimension is needed"
    )]
    LengthMismatch {
        /// The key whose list has the wrong length.
        field: &'static str,
        /// Its length.
        len: usize,
        /// The number of dimensions (the length of `topology`).
        dims: usize,
    },

    /// A dimension kind ASTRA-sim does not know.
    #[error("topology[{index}]: unknown kind `{value}`; ASTRA-sim's kinds are Ring, FullyConnected and Switch")]
    UnknownKind {
        /// The entry of `topology`.
        index: usize,
        /// What it said.
        value: String,
    },

    /// An entry that is not an acceptable value for its field.
    #[error("{field}[{index}] = {value}: {reason}")]
    BadValue {
        /// The key.
        field: &'static str,
        /// The entry.
        index: usize,
        /// The entry as written (or as YAML read it).
        value: String,
        /// What is wrong, e.g. `must be greater than 0 (GB/s)`.
        reason: &'static str,
    },
}

/// A parsed ASTRA-sim network file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AstraNetwork {
    /// The dimensions, dimension 0 first, in fabemu's units.
    pub dims: Vec<DimSpec>,
    /// Top-level keys other than the four ASTRA-sim reads, in file order; not an error.
    pub ignored_keys: Vec<String>,
}

impl AstraNetwork {
    /// Number of NPUs (hosts): the product of `npus_count`, if it fits a `usize`.
    pub fn npus(&self) -> Option<usize> {
        self.dims
            .iter()
            .try_fold(1usize, |n, d| n.checked_mul(d.size))
    }

    /// Builds the fabric with [`multi_dim`].
    ///
    /// # Errors
    /// As [`multi_dim`] (only [`TopologyError::TooLarge`] can happen after [`parse`]).
    pub fn build(&self) -> Result<Graph, TopologyError> {
        multi_dim(&self.dims)
    }
}

/// Reads an ASTRA-sim network file's text (see the [module documentation](self)).
///
/// # Errors
/// An [`AstraSimError`] naming the field and entry at fault.
pub fn parse(text: &str) -> Result<AstraNetwork, AstraSimError> {
    use serde_yaml::Value;

    let doc: Value = serde_yaml::from_str(text).map_err(|e| AstraSimError::Yaml {
        message: e.to_string(),
    })?;
    let Value::Mapping(map) = doc else {
        return Err(AstraSimError::NotAMapping);
    };
    let list = |field: &'static str| -> Result<&Vec<Value>, AstraSimError> {
        match map.get(field) {
            None => Err(AstraSimError::MissingField { field }),
            Some(Value::Sequence(items)) => Ok(items),
            Some(_) => Err(AstraSimError::NotAList { field }),
        }
    };
    let [topology, npus, bandwidth, latency] = FIELDS.map(list);
    let topology = topology?;
    let kinds = topology
        .iter()
        .enumerate()
        .map(|(index, v)| match v.as_str() {
            Some("Ring") => Ok(DimKind::Ring),
            Some("FullyConnected") => Ok(DimKind::FullyConnected),
            Some("Switch") => Ok(DimKind::Switch),
            _ => Err(AstraSimError::UnknownKind {
                index,
                value: show(v),
            }),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if kinds.is_empty() {
        return Err(AstraSimError::NoDimensions);
    }
    let (npus, bandwidth, latency) = (npus?, bandwidth?, latency?);
    for (field, items) in FIELDS[1..].iter().zip([npus, bandwidth, latency]) {
        if items.len() != kinds.len() {
            return Err(AstraSimError::LengthMismatch {
                field,
                len: items.len(),
                dims: kinds.len(),
            });
        }
    }

    let mut dims = Vec::with_capacity(kinds.len());
    for (index, &kind) in kinds.iter().enumerate() {
        let bad = |field: &'static str, v: &Value, reason: &'static str| AstraSimError::BadValue {
            field,
            index,
            value: show(v),
            reason,
        };
        let (n, b, l) = (&npus[index], &bandwidth[index], &latency[index]);

        const NPUS: &str = "must be a whole number of at least 2";
        let size = match decimal(n) {
            Some(d) if !d.negative && d.exp10 >= 0 => d
                .scaled(1, 0)
                .and_then(|v| usize::try_from(v).ok())
                .ok_or_else(|| bad("npus_count", n, "is too large"))?,
            _ => return Err(bad("npus_count", n, NPUS)),
        };
        if size < 2 {
            return Err(bad("npus_count", n, NPUS));
        }

        const BW: &str = "must be a number greater than 0 (GB/s)";
        let bandwidth_bps = match decimal(b) {
            Some(d) if !d.negative && !d.is_zero() => d
                .scaled(u128::from(BPS_PER_GB_PER_S), 0)
                .ok_or_else(|| bad("bandwidth", b, "is too large"))?,
            _ => return Err(bad("bandwidth", b, BW)),
        };
        if bandwidth_bps == 0 {
            return Err(bad("bandwidth", b, "is below 1 bit/s"));
        }

        const LAT: &str = "must be a number of at least 0 (ns)";
        let latency_ps = match decimal(l) {
            Some(d) if !d.negative || d.is_zero() => {
                let ps = d
                    .scaled(u128::from(PS_PER_NS), 0)
                    .ok_or_else(|| bad("latency", l, "is too large"))?;
                // fabemu counts whole picoseconds; a positive latency must not vanish.
                if ps == 0 && !d.is_zero() {
                    return Err(bad("latency", l, "is below 1 ps, fabemu's time unit"));
                }
                ps
            }
            _ => return Err(bad("latency", l, LAT)),
        };

        dims.push(DimSpec {
            kind,
            size,
            bandwidth_bps,
            latency_ps,
        });
    }
    let ignored_keys = map
        .keys()
        .filter(|k| !k.as_str().is_some_and(|k| FIELDS.contains(&k)))
        .map(show)
        .collect();
    Ok(AstraNetwork { dims, ignored_keys })
}

/// A YAML value as a user would recognise it in a message.
fn show(v: &serde_yaml::Value) -> String {
    use serde_yaml::Value;
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null => "null".into(),
        other => serde_yaml::to_string(other)
            .map(|s| s.trim_end().replace('\n', " "))
            .unwrap_or_else(|_| "?".into()),
    }
}

/// A decimal number `± mantissa × 10^exp10`, exactly as written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Decimal {
    negative: bool,
    mantissa: u128,
    exp10: i32,
}

/// Most significant digits kept in a mantissa; `10^MAX_DIGITS × 2^36` still fits a `u128`.
const MAX_DIGITS: usize = 27;

impl Decimal {
    fn is_zero(&self) -> bool {
        self.mantissa == 0
    }

    /// `self × factor × 10^shift` rounded to the nearest integer (halves up), if it fits a
    /// `u64`; the caller has ruled out negative values.
    fn scaled(&self, factor: u128, shift: i32) -> Option<u64> {
        let mut v = self.mantissa.checked_mul(factor)?;
        let e = self.exp10.checked_add(shift)?;
        if e >= 0 {
            for _ in 0..e {
                v = v.checked_mul(10)?;
            }
        } else {
            let mut div = 1u128;
            for _ in 0..-e {
                div = match div.checked_mul(10) {
                    Some(d) => d,
                    None => return Some(0), // far below one unit
                };
            }
            v = v / div + u128::from(v % div >= div - div / 2);
        }
        u64::try_from(v).ok()
    }
}

/// The decimal a YAML number or numeric string stands for; `None` if it is not a finite number.
fn decimal(v: &serde_yaml::Value) -> Option<Decimal> {
    use serde_yaml::Value;
    match v {
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                parse_decimal(&u.to_string())
            } else if let Some(i) = n.as_i64() {
                parse_decimal(&i.to_string())
            } else {
                // Rust prints the shortest decimal that reads back as the same double, without
                // an exponent: for a number written with up to 15 significant digits, that is
                // the number as written.
                n.as_f64()
                    .filter(|f| f.is_finite())
                    .and_then(|f| parse_decimal(&f.to_string()))
            }
        }
        Value::String(s) => parse_decimal(s.trim()),
        _ => None,
    }
}

/// Parses `[+-]digits[.digits][(e|E)[+-]digits]` exactly.
fn parse_decimal(s: &str) -> Option<Decimal> {
    let (negative, rest) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let (num, exp) = match rest.find(['e', 'E']) {
        Some(i) => (&rest[..i], rest[i + 1..].parse::<i32>().ok()?),
        None => (rest, 0),
    };
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let digits = int.bytes().chain(frac.bytes());
    let mut mantissa = 0u128;
    let mut kept = 0usize;
    let mut exp10 = exp.checked_sub(i32::try_from(frac.len()).ok()?)?;
    for c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        if kept < MAX_DIGITS {
            mantissa = mantissa * 10 + u128::from(c - b'0');
            if mantissa > 0 {
                kept += 1;
            }
        } else {
            // Beyond the kept digits: scale instead (only a trailing remainder is dropped).
            exp10 = exp10.checked_add(1)?;
        }
    }
    // Trailing zeros into the exponent keeps the mantissa small.
    while mantissa != 0 && mantissa % 10 == 0 {
        mantissa /= 10;
        exp10 = exp10.checked_add(1)?;
    }
    Some(Decimal {
        negative,
        mantissa,
        exp10,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(s: &str) -> Decimal {
        parse_decimal(s).unwrap()
    }

    #[test]
    fn decimals_are_read_exactly() {
        assert_eq!(
            dec("50.0"),
            Decimal {
                negative: false,
                mantissa: 5,
                exp10: 1
            }
        );
        assert_eq!(dec("0.125").scaled(8, 0), Some(1));
        assert_eq!(dec("12.5").scaled(1, 0), Some(13)); // half rounds up
        assert_eq!(dec("12.49").scaled(1, 0), Some(12));
        assert_eq!(dec("1e3").scaled(1, 0), Some(1000));
        assert_eq!(dec("2.5E-1").scaled(1000, 0), Some(250));
        assert_eq!(dec("-0.0").mantissa, 0);
        assert!(dec("-3").negative);
        assert_eq!(
            dec("0.1").scaled(u128::from(BPS_PER_GB_PER_S), 0),
            Some(858_993_459)
        );
        assert_eq!(dec("1e-60").scaled(1, 0), Some(0));
        assert_eq!(dec("1e30").scaled(1, 0), None);
        for bad in ["", ".", "-", "1.2.3", "abc", "1e", "0x10", "1_000"] {
            assert_eq!(parse_decimal(bad), None, "{bad:?}");
        }
        // Many digits: the value, not the text length, decides.
        assert_eq!(
            dec("0000000000000000000000000000000000001.50000000000000000000000000000").scaled(2, 0),
            Some(3)
        );
    }

    #[test]
    fn yaml_numbers_keep_their_decimal_value() {
        let v = |s: &str| decimal(&serde_yaml::from_str(s).unwrap());
        assert_eq!(v("50.0"), Some(dec("50")));
        assert_eq!(v("0.3"), Some(dec("0.3")));
        assert_eq!(v("123456.789012345"), Some(dec("123456.789012345")));
        assert_eq!(v("200"), Some(dec("200")));
        assert_eq!(v("-4"), Some(dec("-4")));
        assert_eq!(v("'2.5'"), Some(dec("2.5")));
        assert_eq!(v(".inf"), None);
        assert_eq!(v(".nan"), None);
        assert_eq!(v("true"), None);
        assert_eq!(v("~"), None);
    }
}
