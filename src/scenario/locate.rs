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

struct Probe<'p>(&'p [Seg]);

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
        let Some((Seg::Key(want), rest)) = self.0.split_first() else {
            return Err(de::Error::custom(HERE));
        };
        while let Some(k) = map.next_key::<KeyString>()? {
            if k.0.as_deref() == Some(want.as_str()) {
                return map.next_value_seed(Probe(rest));
            }
            map.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Some((Seg::Index(want), rest)) = self.0.split_first() else {
            return Err(de::Error::custom(HERE));
        };
        let mut i = 0;
        loop {
            if i == *want {
                return match seq.next_element_seed(Probe(rest))? {
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
        if self.0.is_empty() {
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
        let de = serde_yaml::Deserializer::from_str(text);
        if let Err(e) = Probe(&path.0[..n]).deserialize(de) {
            if e.to_string().contains(HERE) {
                if let Some(loc) = e.location() {
                    return Some((loc.line(), loc.column()));
                }
            }
        }
    }
    None
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
    fn falls_back_to_the_nearest_ancestor() {
        let p = FieldPath::root().key("links").index(1).key("latency");
        assert_eq!(locate(DOC, &p), Some((4, 5)));
    }
}
