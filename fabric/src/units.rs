//! Units: virtual time, bandwidth and byte sizes, parsed from strings that always carry a unit.
//!
//! Everything is an integer so that arithmetic is exact and deterministic: time is picoseconds,
//! bandwidth bits per second, sizes bytes. Strings such as `1.5us` or `2.5Gbps` are parsed as
//! exact decimals (no floating point), and a value that does not come out as a whole number of
//! the base unit is rejected rather than rounded silently.
//!
//! Accepted units:
//! - time: `ps`, `ns`, `us` (or `µs`), `ms`, `s`
//! - bandwidth: `bps`/`b/s`, `Kbps`, `Mbps`, `Gbps`, `Tbps` (also spelled `Gb/s`, ...; powers of
//!   10 of bits), `B/s`, `KB/s`, `MB/s`, `GB/s`, `TB/s` (powers of 10 of bytes, as nccl-tests
//!   counts) and `KiB/s`, `MiB/s`, `GiB/s`, `TiB/s` (powers of 2 of bytes)
//! - size: `B`, `KB`, `MB`, `GB`, `TB` (powers of 10) and `KiB`, `MiB`, `GiB`, `TiB` (powers of 2)

use std::fmt;
use std::str::FromStr;

/// Picoseconds per nanosecond, microsecond, millisecond and second.
pub const PS_PER_NS: u64 = 1_000;
/// Picoseconds per microsecond.
pub const PS_PER_US: u64 = 1_000_000;
/// Picoseconds per millisecond.
pub const PS_PER_MS: u64 = 1_000_000_000;
/// Picoseconds per second.
pub const PS_PER_S: u64 = 1_000_000_000_000;

/// A point in (or span of) virtual time, in picoseconds.
///
/// `u64` picoseconds reach about 213 days of simulated time, far beyond any training step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(pub u64);

impl Time {
    /// Time zero, the start of every run.
    pub const ZERO: Time = Time(0);
    /// A time later than any event; used for "never".
    pub const NEVER: Time = Time(u64::MAX);

    /// The value in picoseconds.
    pub const fn ps(self) -> u64 {
        self.0
    }
    /// From nanoseconds.
    pub const fn from_ns(ns: u64) -> Time {
        Time(ns * PS_PER_NS)
    }
    /// From microseconds.
    pub const fn from_us(us: u64) -> Time {
        Time(us * PS_PER_US)
    }
    /// The value in seconds, for reports only (never for simulation arithmetic).
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / PS_PER_S as f64
    }
    /// The value in microseconds, for reports only.
    pub fn as_us_f64(self) -> f64 {
        self.0 as f64 / PS_PER_US as f64
    }
    /// `self + d`, saturating at [`Time::NEVER`].
    pub const fn add(self, d: Time) -> Time {
        Time(self.0.saturating_add(d.0))
    }
    /// `self - d`, saturating at zero.
    pub const fn saturating_sub(self, d: Time) -> Time {
        Time(self.0.saturating_sub(d.0))
    }
}

impl std::ops::Add for Time {
    type Output = Time;
    fn add(self, rhs: Time) -> Time {
        Time(self.0.saturating_add(rhs.0))
    }
}

impl fmt::Display for Time {
    /// Prints with the largest unit that keeps the value exact-looking (`1.5us`, `320ns`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ps = self.0;
        let (div, unit) = if ps >= PS_PER_S {
            (PS_PER_S, "s")
        } else if ps >= PS_PER_MS {
            (PS_PER_MS, "ms")
        } else if ps >= PS_PER_US {
            (PS_PER_US, "us")
        } else if ps >= PS_PER_NS {
            (PS_PER_NS, "ns")
        } else {
            (1, "ps")
        };
        write_decimal(f, ps, div)?;
        f.write_str(unit)
    }
}

/// Writes `value / div` (`div` a power of ten) as a decimal with up to 3 fractional digits
/// (truncated), trailing zeros trimmed; a fraction too small for 3 digits gets as many as it
/// needs to show its first non-zero digit (`1.000000000001s`), never a bare `1.`.
fn write_decimal(f: &mut fmt::Formatter<'_>, value: u64, div: u64) -> fmt::Result {
    let whole = value / div;
    let frac = value % div;
    if frac == 0 {
        return write!(f, "{whole}");
    }
    // All the fraction's digits: `div` = 10^k has k of them.
    let width = div.ilog10() as usize;
    let digits = format!("{frac:0width$}");
    let first = digits.find(|c| c != '0').unwrap_or(0);
    let shown = &digits[..(first + 1).max(3).min(width)];
    write!(f, "{whole}.{}", shown.trim_end_matches('0'))
}

/// A link or rate limit bandwidth, in bits per second.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bandwidth(pub u64);

impl Bandwidth {
    /// From gigabits per second (10^9 bit/s).
    pub const fn from_gbps(g: u64) -> Bandwidth {
        Bandwidth(g * 1_000_000_000)
    }
    /// Bits per second.
    pub const fn bps(self) -> u64 {
        self.0
    }

    /// Time to put `bytes` on a wire of this bandwidth.
    ///
    /// Rounding rule: exact integer arithmetic (`bytes * 8 * 10^12 / bps` in 128 bits), rounded
    /// **up** to the next picosecond, so that a transmitter is never faster than its link and the
    /// error per packet is below 1 ps (at 100 Gb/s a bit lasts 10 ps, so most sizes are exact).
    pub fn serialization_time(self, bytes: u64) -> Time {
        let num = bytes as u128 * 8 * PS_PER_S as u128;
        let bps = self.0.max(1) as u128;
        Time(num.div_ceil(bps) as u64)
    }
}

impl fmt::Display for Bandwidth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bps = self.0;
        let (div, unit) = if bps >= 1_000_000_000_000 {
            (1_000_000_000_000, "Tbps")
        } else if bps >= 1_000_000_000 {
            (1_000_000_000, "Gbps")
        } else if bps >= 1_000_000 {
            (1_000_000, "Mbps")
        } else if bps >= 1_000 {
            (1_000, "Kbps")
        } else {
            (1, "bps")
        };
        write_decimal(f, bps, div)?;
        f.write_str(unit)
    }
}

/// A size in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteSize(pub u64);

impl ByteSize {
    /// The value in bytes.
    pub const fn bytes(self) -> u64 {
        self.0
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        for (div, unit) in [(1u64 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")] {
            if b >= div && b % div == 0 {
                return write!(f, "{}{unit}", b / div);
            }
        }
        write!(f, "{b}B")
    }
}

/// Why a quantity string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    /// The string is empty.
    #[error("empty value; expected a number with a unit, e.g. {example}")]
    Empty {
        /// An example of a valid value.
        example: &'static str,
    },
    /// A number without a unit.
    #[error("`{value}` has no unit; write it with one, e.g. {example}")]
    MissingUnit {
        /// The input.
        value: String,
        /// An example of a valid value.
        example: &'static str,
    },
    /// The unit is not one this quantity knows.
    #[error("unknown unit `{unit}` in `{value}`; expected one of {expected}")]
    UnknownUnit {
        /// The input.
        value: String,
        /// The unit as written.
        unit: String,
        /// The units this quantity accepts.
        expected: &'static str,
    },
    /// The number part is not a plain non-negative decimal.
    #[error("`{value}` is not a non-negative decimal number with a unit")]
    BadNumber {
        /// The input.
        value: String,
    },
    /// The value is not a whole number of the base unit (e.g. `0.1ps`).
    #[error("`{value}` is not a whole number of {base}")]
    Fraction {
        /// The input.
        value: String,
        /// The base unit (picoseconds, bits per second, bytes).
        base: &'static str,
    },
    /// The value does not fit in 64 bits of the base unit.
    #[error("`{value}` is too large")]
    Overflow {
        /// The input.
        value: String,
    },
}

/// Splits `"1.5us"` into the exact decimal (`15`, 1 fractional digit) and the unit `"us"`.
fn split_decimal(s: &str) -> Option<(u128, u32, &str)> {
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(end);
    let num: String = num.chars().filter(|&c| c != '_').collect();
    let mut parts = num.splitn(2, '.');
    let int = parts.next().unwrap_or("");
    let frac = parts.next().unwrap_or("");
    if (int.is_empty() && frac.is_empty()) || frac.contains('.') {
        return None;
    }
    if frac.len() > 30 {
        return None;
    }
    let mut mantissa: u128 = 0;
    for c in int.chars().chain(frac.chars()) {
        let d = c.to_digit(10)? as u128;
        mantissa = mantissa.checked_mul(10)?.checked_add(d)?;
    }
    Some((mantissa, frac.len() as u32, unit.trim()))
}

/// Parses `s` as decimal × the multiplier its unit names, exactly.
fn parse_quantity(
    s: &str,
    units: &[(&str, u128)],
    expected: &'static str,
    example: &'static str,
    base: &'static str,
) -> Result<u64, UnitError> {
    let t = s.trim();
    if t.is_empty() {
        return Err(UnitError::Empty { example });
    }
    let (mantissa, frac_digits, unit) = split_decimal(t).ok_or_else(|| UnitError::BadNumber {
        value: t.to_string(),
    })?;
    if unit.is_empty() {
        return Err(UnitError::MissingUnit {
            value: t.to_string(),
            example,
        });
    }
    let mult = units
        .iter()
        .find(|(u, _)| *u == unit)
        .map(|(_, m)| *m)
        .ok_or_else(|| UnitError::UnknownUnit {
            value: t.to_string(),
            unit: unit.to_string(),
            expected,
        })?;
    let overflow = || UnitError::Overflow {
        value: t.to_string(),
    };
    let scaled = mantissa.checked_mul(mult).ok_or_else(overflow)?;
    let div = 10u128.checked_pow(frac_digits).ok_or_else(overflow)?;
    if scaled % div != 0 {
        return Err(UnitError::Fraction {
            value: t.to_string(),
            base,
        });
    }
    u64::try_from(scaled / div).map_err(|_| overflow())
}

const TIME_UNITS: &[(&str, u128)] = &[
    ("ps", 1),
    ("ns", PS_PER_NS as u128),
    ("us", PS_PER_US as u128),
    ("µs", PS_PER_US as u128),
    ("ms", PS_PER_MS as u128),
    ("s", PS_PER_S as u128),
];

const BW_UNITS: &[(&str, u128)] = &[
    ("bps", 1),
    ("b/s", 1),
    ("Kbps", 1_000),
    ("Kb/s", 1_000),
    ("Mbps", 1_000_000),
    ("Mb/s", 1_000_000),
    ("Gbps", 1_000_000_000),
    ("Gb/s", 1_000_000_000),
    ("Tbps", 1_000_000_000_000),
    ("Tb/s", 1_000_000_000_000),
    ("B/s", 8),
    ("KB/s", 8_000),
    ("MB/s", 8_000_000),
    ("GB/s", 8_000_000_000),
    ("TB/s", 8_000_000_000_000),
    ("KiB/s", 8 << 10),
    ("MiB/s", 8 << 20),
    ("GiB/s", 8 << 30),
    ("TiB/s", 8 << 40),
];

const SIZE_UNITS: &[(&str, u128)] = &[
    ("B", 1),
    ("KB", 1_000),
    ("MB", 1_000_000),
    ("GB", 1_000_000_000),
    ("TB", 1_000_000_000_000),
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
    ("TiB", 1 << 40),
];

impl FromStr for Time {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Time, UnitError> {
        parse_quantity(
            s,
            TIME_UNITS,
            "ps, ns, us, ms, s",
            "`500ns` or `1.5us`",
            "picoseconds",
        )
        .map(Time)
    }
}

impl FromStr for Bandwidth {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Bandwidth, UnitError> {
        parse_quantity(
            s,
            BW_UNITS,
            "bps, Kbps, Mbps, Gbps, Tbps (or Gb/s ...), B/s, KB/s, MB/s, GB/s, TB/s, KiB/s, MiB/s, GiB/s, TiB/s",
            "`100Gbps`, `400Gb/s` or `50GB/s`",
            "bits per second",
        )
        .map(Bandwidth)
    }
}

impl FromStr for ByteSize {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<ByteSize, UnitError> {
        parse_quantity(
            s,
            SIZE_UNITS,
            "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB",
            "`4KiB` or `64MiB`",
            "bytes",
        )
        .map(ByteSize)
    }
}

/// Serde support: each quantity deserializes from a string with a unit; a bare number is an
/// error that says which unit to add.
mod serde_impls {
    use super::*;
    use serde::de::{self, Deserializer, Visitor};
    use serde::{Deserialize, Serialize, Serializer};
    use std::marker::PhantomData;

    struct UnitVisitor<T>(PhantomData<T>, &'static str);

    impl<T> Visitor<'_> for UnitVisitor<T>
    where
        T: FromStr<Err = UnitError>,
    {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            write!(f, "a string with a unit, e.g. {}", self.1)
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
            v.parse().map_err(E::custom)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
            Err(E::custom(format!(
                "`{v}` has no unit; write it with one, e.g. {}",
                self.1
            )))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
            if v < 0 {
                Err(E::custom(format!("`{v}` is negative")))
            } else {
                self.visit_u64(v as u64)
            }
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
            if v < 0.0 {
                Err(E::custom(format!("`{v}` is negative")))
            } else {
                Err(E::custom(format!(
                    "`{v}` has no unit; write it with one, e.g. {}",
                    self.1
                )))
            }
        }
    }

    macro_rules! unit_serde {
        ($t:ty, $example:expr) => {
            impl<'de> Deserialize<'de> for $t {
                fn deserialize<D: Deserializer<'de>>(d: D) -> Result<$t, D::Error> {
                    d.deserialize_any(UnitVisitor::<$t>(PhantomData, $example))
                }
            }
            impl Serialize for $t {
                fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                    s.collect_str(self)
                }
            }
        };
    }
    unit_serde!(Time, "`500ns` or `1.5us`");
    unit_serde!(Bandwidth, "`100Gbps` or `50GB/s`");
    unit_serde!(ByteSize, "`4KiB` or `64MiB`");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_times_exactly() {
        assert_eq!("500ns".parse::<Time>(), Ok(Time(500_000)));
        assert_eq!("1.5us".parse::<Time>(), Ok(Time(1_500_000)));
        assert_eq!("2ms".parse::<Time>(), Ok(Time(2 * PS_PER_MS)));
        assert_eq!("0.000001s".parse::<Time>(), Ok(Time(PS_PER_US)));
        assert_eq!("7ps".parse::<Time>(), Ok(Time(7)));
        assert!(matches!(
            "0.5ps".parse::<Time>(),
            Err(UnitError::Fraction { .. })
        ));
    }

    #[test]
    fn parses_bandwidths_in_bits_and_bytes() {
        assert_eq!(
            "100Gbps".parse::<Bandwidth>(),
            Ok(Bandwidth(100_000_000_000))
        );
        assert_eq!(
            "400Gb/s".parse::<Bandwidth>(),
            Ok(Bandwidth(400_000_000_000))
        );
        assert_eq!(
            "50GB/s".parse::<Bandwidth>(),
            Ok(Bandwidth(400_000_000_000))
        );
        assert_eq!(
            "50GiB/s".parse::<Bandwidth>(),
            Ok(Bandwidth(50 * 8 * (1u64 << 30)))
        );
        assert_eq!("2.5Gbps".parse::<Bandwidth>(), Ok(Bandwidth(2_500_000_000)));
    }

    #[test]
    fn parses_sizes() {
        assert_eq!("64MiB".parse::<ByteSize>(), Ok(ByteSize(64 << 20)));
        assert_eq!("4KiB".parse::<ByteSize>(), Ok(ByteSize(4096)));
        assert_eq!("1.5KB".parse::<ByteSize>(), Ok(ByteSize(1500)));
        assert_eq!("1_000B".parse::<ByteSize>(), Ok(ByteSize(1000)));
    }

    #[test]
    fn rejects_bad_input() {
        assert!(matches!(
            "100".parse::<Bandwidth>(),
            Err(UnitError::MissingUnit { .. })
        ));
        assert!(matches!(
            "100furlongs".parse::<Time>(),
            Err(UnitError::UnknownUnit { .. })
        ));
        assert!(matches!(
            "-5ns".parse::<Time>(),
            Err(UnitError::BadNumber { .. })
        ));
        assert!(matches!(
            "".parse::<ByteSize>(),
            Err(UnitError::Empty { .. })
        ));
        assert!(matches!(
            "1.2.3us".parse::<Time>(),
            Err(UnitError::BadNumber { .. })
        ));
        assert!(matches!(
            "99999999999999TiB".parse::<ByteSize>(),
            Err(UnitError::Overflow { .. })
        ));
    }

    #[test]
    fn serialization_time_is_exact_and_rounds_up() {
        let b = Bandwidth::from_gbps(100);
        // 1000 bytes = 8000 bits at 100 Gb/s = 80 ns.
        assert_eq!(b.serialization_time(1000), Time(80_000));
        // 3 bits' worth does not divide: 1 byte at 3 bps = 8/3 s, rounded up.
        assert_eq!(
            Bandwidth(3).serialization_time(1),
            Time((8 * PS_PER_S).div_ceil(3))
        );
    }

    #[test]
    fn displays_round_trip() {
        for s in ["1.5us", "500ns", "100Gbps", "64MiB", "4KiB", "2.5Gbps"] {
            let shown = match s {
                _ if s.ends_with('s') && s.contains("bps") => {
                    s.parse::<Bandwidth>().unwrap().to_string()
                }
                _ if s.ends_with('B') => s.parse::<ByteSize>().unwrap().to_string(),
                _ => s.parse::<Time>().unwrap().to_string(),
            };
            assert_eq!(shown, s);
        }
    }

    #[test]
    fn displays_keep_their_digits() {
        // Once, a fraction under the third digit printed as `1.s`.
        let cases = [
            (PS_PER_S + 1, "1.000000000001s"),
            (12 * PS_PER_S + 5 * PS_PER_US, "12.000005s"),
            (17_999_999 * PS_PER_S + PS_PER_MS / 2, "17999999.0005s"),
            (3_789_123_456, "3.789ms"),
            (1_500_000, "1.5us"),
            (PS_PER_MS + 10 * PS_PER_US, "1.01ms"),
            (999, "999ps"),
        ];
        for (ps, want) in cases {
            assert_eq!(Time(ps).to_string(), want);
        }
        assert_eq!(Bandwidth(1_000_000_001).to_string(), "1.000000001Gbps");
    }
}
