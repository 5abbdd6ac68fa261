//! Finding where a field sits in a YAML text, to point errors at file:line:column.
//!
//! serde_yaml reports positions only for its own errors. For problems found after parsing (an
//! unknown node in a link, a disconnected destination) we re-read the text with a probe that
//! walks a field path (`links[3].a`) and fails on purpose when it reaches the target value:
//! serde_yaml attaches the position of the value being read to that error.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// One step of a field path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seg {
    /// A mapping key.
    Key(String),
    /// A sequence index.
    Index(usize),
}

/// A path to a value in the scenario, e.g. `links[3].a`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldPath(pub Vec<Seg>);

impl FieldPath {
    /// The root.
    pub fn root() -> FieldPath {
        FieldPath(Vec::new())
    }
    /// This path extended by a key.
    pub fn key(&self, k: &str) -> FieldPath {
        let mut v = self.0.clone();
        v.push(Seg::Key(k.to_string()));
        FieldPath(v)
    }
    /// This path extended by an index.
    pub fn index(&self, i: usize) -> FieldPath {
        let mut v = self.0.clone();
        v.push(Seg::Index(i));
        FieldPath(v)
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("(top level)");
        }
        for (i, s) in self.0.iter().enumerate() {
            match s {
                Seg::Key(k) if i == 0 => write!(f, "{k}")?,
                Seg::Key(k) => write!(f, ".{k}")?,
                Seg::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

const HERE: &str = "\u{0}fabemu-probe-here";

/// Walks `path`; at its end fails with [`HERE`] — or, when `repeated` names a key, walks on
/// into the mapping there and fails at the value of that key's second occurrence.
struct Probe<'p> {
    path: &'p [Seg],
    repeated: Option<&'p str>,
}

impl<'p> Probe<'p> {
    fn new(path: &'p [Seg]) -> Probe<'p> {
        Probe {
            path,
            repeated: None,
        }
    }
}

impl<'de> DeserializeSeed<'de> for Probe<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Probe<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("anything")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        if let ([], Some(key)) = (self.path, self.repeated) {
            let mut seen = 0;
            while let Some(k) = map.next_key::<KeyString>()? {
                if k.0.as_deref() == Some(key) {
                    seen += 1;
                    if seen == 2 {
                        return map.next_value_seed(Probe::new(&[]));
                    }
                }
                map.next_value::<IgnoredAny>()?;
            }
            return Ok(());
        }
        let Some((Seg::Key(want), rest)) = self.path.split_first() else {
            return Err(de::Error::custom(HERE));
        };
        while let Some(k) = map.next_key::<KeyString>()? {
            if k.0.as_deref() == Some(want.as_str()) {
                return map.next_value_seed(Probe {
                    path: rest,
                    repeated: self.repeated,
                });
            }
            map.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Some((Seg::Index(want), rest)) = self.path.split_first() else {
            return Err(de::Error::custom(HERE));
        };
        let mut i = 0;
        loop {
            if i == *want {
                let probe = Probe {
                    path: rest,
                    repeated: self.repeated,
                };
                return match seq.next_element_seed(probe)? {
                    Some(()) => Ok(()),
                    None => Ok(()),
                };
            }
            if seq.next_element::<IgnoredAny>()?.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.scalar()
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.scalar()
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.scalar()
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.scalar()
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.scalar()
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.scalar()
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.scalar()
    }
}

impl Probe<'_> {
    fn scalar<E: de::Error>(&self) -> Result<(), E> {
        if self.path.is_empty() && self.repeated.is_none() {
            Err(E::custom(HERE))
        } else {
            Ok(())
        }
    }
}

/// A mapping key that may not be a string (then it matches nothing).
struct KeyString(Option<String>);

impl<'de> de::Deserialize<'de> for KeyString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<KeyString, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = KeyString;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<KeyString, E> {
                Ok(KeyString(Some(v.to_string())))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<KeyString, E> {
                Ok(KeyString(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<KeyString, E> {
                Ok(KeyString(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<KeyString, E> {
                Ok(KeyString(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<KeyString, E> {
                Ok(KeyString(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<KeyString, E> {
                Ok(KeyString(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// Line and column (1-based) of the value at `path` in `text`; when the path does not exist,
/// of its nearest existing ancestor.
pub fn locate(text: &str, path: &FieldPath) -> Option<(usize, usize)> {
    for n in (0..=path.0.len()).rev() {
        if let Some(loc) = probe(text, Probe::new(&path.0[..n])) {
            return Some(loc);
        }
    }
    None
}

/// Line and column (1-based) of the value of the second `key` in the mapping at `path`, for
/// "duplicate field" errors (serde_yaml points those at the start of the mapping).
pub(super) fn locate_repeated_key(
    text: &str,
    path: &FieldPath,
    key: &str,
) -> Option<(usize, usize)> {
    probe(
        text,
        Probe {
            path: &path.0,
            repeated: Some(key),
        },
    )
}

fn probe(text: &str, p: Probe<'_>) -> Option<(usize, usize)> {
    let de = serde_yaml::Deserializer::from_str(text);
    match p.deserialize(de) {
        Err(e) if e.to_string().contains(HERE) => e.location().map(|l| (l.line(), l.column())),
        _ => None,
    }
}

impl FieldPath {
    /// Parses a path as [`FieldPath`]'s `Display` writes it (`links[3].a`; empty for the top
    /// level). `None` for anything else.
    pub(super) fn parse(s: &str) -> Option<FieldPath> {
        let mut segs = Vec::new();
        if s.is_empty() {
            return Some(FieldPath(segs));
        }
        for part in s.split('.') {
            let (name, mut rest) = part.split_at(part.find('[').unwrap_or(part.len()));
            if name.is_empty() {
                return None;
            }
            segs.push(Seg::Key(name.to_string()));
            while let Some(r) = rest.strip_prefix('[') {
                let (n, r) = r.split_once(']')?;
                segs.push(Seg::Index(n.parse().ok()?));
                rest = r;
            }
            if !rest.is_empty() {
                return None;
            }
        }
        Some(FieldPath(segs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str =
        "seed: 1\nlinks:\n  - {a: h0, b: s0}\n  - a: h1\n    b: s9\nhosts: [h0, h1]\n";

    #[test]
    fn finds_nested_values() {
        let p = FieldPath::root().key("links").index(1).key("b");
        assert_eq!(locate(DOC, &p), Some((5, 8)));
        let p = FieldPath::root().key("links").index(0).key("a");
        assert_eq!(locate(DOC, &p), Some((3, 9)));
        let p = FieldPath::root().key("hosts").index(1);
        assert_eq!(locate(DOC, &p), Some((6, 13)));
        assert_eq!(p.to_string(), "hosts[1]");
    }

    #[test]
    fn finds_the_second_occurrence_of_a_key() {
        let doc = "seed: 1\nlinks:\n  - {a: h0, b: s0, a: h2}\nseed: 2\n";
        assert_eq!(
            locate_repeated_key(doc, &FieldPath::root(), "seed"),
            Some((4, 7))
        );
        let p = FieldPath::root().key("links").index(0);
        assert_eq!(locate_repeated_key(doc, &p, "a"), Some((3, 23)));
        assert_eq!(locate_repeated_key(doc, &p, "b"), None);
    }

    #[test]
    fn parses_field_paths() {
        for s in [
            "",
            "seed",
            "links[3].a",
            "workload.messages[0].size",
            "x[1][2]",
        ] {
            assert_eq!(
                FieldPath::parse(s).map(|p| p.to_string()),
                Some(if s.is_empty() {
                    "(top level)".to_string()
                } else {
                    s.to_string()
                })
            );
        }
        for s in ["links[", "a..b", "[0]", "links[x]", "a[0]b"] {
            assert_eq!(FieldPath::parse(s), None, "{s}");
        }
    }

    #[test]
    fn falls_back_to_the_nearest_ancestor() {
        let p = FieldPath::root().key("links").index(1).key("latency");
        assert_eq!(locate(DOC, &p), Some((4, 5)));
    }
}
