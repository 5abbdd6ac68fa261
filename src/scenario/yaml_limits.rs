//! Bounds on a YAML document before it is read, and the YAML library's own refusals — an alias
//! bomb, nesting too deep, several documents in one file — in plain words and with a line, for
//! scenarios, `--set` values and ASTRA-sim network files alike.
//!
//! serde_yaml stops such documents (rightly: they would exhaust memory or the stack) but says
//! only `repetition limit exceeded`, often without a position; a user needs to know which
//! construct to look at. It also stops them late: its scanner has read the whole document
//! before the parser counts levels, and the scanner's time grows with the square of the depth
//! (10^5 nested brackets take minutes), while its alias limit counts values, not bytes (three
//! million aliases of a 1,000-byte string pass it and expand to 3 GB). So [`check`] runs
//! first: a linear scan of the text for the nesting depth, then one pass over the parsed events
//! that counts the bytes the document expands to (aliases included, without building
//! anything) and refuses YAML tags (`!Foo`), which no scenario field uses and serde_yaml would
//! otherwise drop silently (`seed: !Foo 3` read as 3).

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

/// The deepest nesting of lists and mappings (serde_yaml's own recursion limit).
pub(crate) const MAX_DEPTH: usize = 128;

/// How far aliases may expand a document: to twice its own size plus this many bytes.
pub(crate) const MAX_ALIAS_GROWTH: u64 = 1 << 20;

/// A refusal: where (1-based line and column, when known) and why, in plain words.
pub(crate) type Refusal = (Option<(usize, usize)>, String);

/// Refuses a document nested deeper than [`MAX_DEPTH`], one whose aliases expand it past twice
/// its size plus [`MAX_ALIAS_GROWTH`], and one with a YAML tag; `Ok` for anything else, also
/// for a syntax error (reported by the real parse with its own message).
pub(crate) fn check(text: &str) -> Result<(), Refusal> {
    depth_scan(text)?;
    let budget = (text.len() as u64)
        .saturating_mul(2)
        .saturating_add(MAX_ALIAS_GROWTH);
    let mut left = budget;
    let de = serde_yaml::Deserializer::from_str(text);
    match de.deserialize_any(Measure { left: &mut left }) {
        Ok(()) => Ok(()),
        Err(e) => {
            let raw = e.to_string();
            let at = e.location().map(|l| (l.line(), l.column()));
            if raw.contains(TAGGED) {
                Err((
                    at,
                    "YAML tags (`!name`) are not part of a scenario; remove the tag and write \
                     the value alone"
                        .to_string(),
                ))
            } else if raw.contains(EXPANDS) {
                Err((
                    at.or_else(|| first_alias(text)),
                    format!(
                        "aliases (`*name`) expand the document past {budget} bytes (twice its \
                         size plus 1 MiB); write the values out or use fewer aliases"
                    ),
                ))
            } else if let Some(r) = explain(&e, text) {
                Err(r)
            } else {
                Ok(())
            }
        }
    }
}

const TAGGED: &str = "\u{0}fabemu-tagged";
const EXPANDS: &str = "\u{0}fabemu-expands";

/// A visitor that walks every value (aliases replayed) and counts its bytes: a scalar its
/// length plus one, a list or mapping one; fails when the count passes `left`, and at a tag.
struct Measure<'a> {
    left: &'a mut u64,
}

impl Measure<'_> {
    fn take<E: de::Error>(&mut self, n: usize) -> Result<(), E> {
        match self.left.checked_sub(n as u64 + 1) {
            Some(l) => {
                *self.left = l;
                Ok(())
            }
            None => Err(E::custom(EXPANDS)),
        }
    }
}

impl<'de> de::DeserializeSeed<'de> for Measure<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Measure<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_bool<E: de::Error>(mut self, _: bool) -> Result<(), E> {
        self.take(1)
    }
    fn visit_i64<E: de::Error>(mut self, _: i64) -> Result<(), E> {
        self.take(1)
    }
    fn visit_u64<E: de::Error>(mut self, _: u64) -> Result<(), E> {
        self.take(1)
    }
    fn visit_i128<E: de::Error>(mut self, _: i128) -> Result<(), E> {
        self.take(1)
    }
    fn visit_u128<E: de::Error>(mut self, _: u128) -> Result<(), E> {
        self.take(1)
    }
    fn visit_f64<E: de::Error>(mut self, _: f64) -> Result<(), E> {
        self.take(1)
    }
    fn visit_str<E: de::Error>(mut self, v: &str) -> Result<(), E> {
        self.take(v.len())
    }
    fn visit_unit<E: de::Error>(mut self) -> Result<(), E> {
        self.take(0)
    }
    fn visit_none<E: de::Error>(mut self) -> Result<(), E> {
        self.take(0)
    }
    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        self.take(0)?;
        while seq
            .next_element_seed(Measure {
                left: &mut *self.left,
            })?
            .is_some()
        {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        self.take(0)?;
        while map
            .next_key_seed(Measure {
                left: &mut *self.left,
            })?
            .is_some()
        {
            map.next_value_seed(Measure {
                left: &mut *self.left,
            })?;
        }
        Ok(())
    }
    // serde_yaml hands a tagged value (`!Foo 3`) to `visit_enum`.
    fn visit_enum<A: de::EnumAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(de::Error::custom(TAGGED))
    }
}

/// Refuses text nested deeper than [`MAX_DEPTH`] before the YAML scanner sees it, at the
/// first place it gets there. Counts flow brackets (`[`, `{`) outside quotes and comments,
/// and block levels as the stack of increasing indentations (a `- ` item opens one more);
/// an over-count (the indentation of a block scalar's text) is possible only far past any
/// real scenario's depth.
fn depth_scan(text: &str) -> Result<(), Refusal> {
    let mut indents: Vec<usize> = Vec::new();
    let mut flow = 0usize;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start_matches(' ');
        let indent = line.len() - trimmed.len();
        let mut block = 0;
        if flow == 0 && !trimmed.is_empty() && !trimmed.starts_with('#') {
            while indents.last().is_some_and(|&top| top >= indent) {
                indents.pop();
            }
            indents.push(indent);
            // `- - x`: each dash opens a list.
            let mut rest = trimmed;
            while let Some(r) = rest.strip_prefix("- ") {
                block += 1;
                rest = r.trim_start_matches(' ');
            }
        }
        let mut quote: Option<char> = None;
        let mut prev = ' ';
        for (j, c) in line.char_indices() {
            match quote {
                Some('\'') if c == '\'' => quote = None,
                Some('"') if c == '"' && prev != '\\' => quote = None,
                Some(_) => {}
                None => match c {
                    '#' if prev == ' ' || prev == '\t' || j == 0 => break,
                    '\'' | '"' if matches!(prev, ' ' | '[' | '{' | ',' | ':' | '-') => {
                        quote = Some(c)
                    }
                    '[' | '{' => {
                        flow += 1;
                        if indents.len() + block + flow > MAX_DEPTH {
                            return Err((Some((i + 1, line[..j].chars().count() + 1)), too_deep()));
                        }
                    }
                    ']' | '}' => flow = flow.saturating_sub(1),
                    _ => {}
                },
            }
            prev = c;
        }
        if indents.len() + block > MAX_DEPTH {
            return Err((Some((i + 1, indent + 1)), too_deep()));
        }
    }
    Ok(())
}

fn too_deep() -> String {
    format!(
        "lists and mappings are nested more than {MAX_DEPTH} levels deep here; no field needs \
         that many"
    )
}

/// A plain-words message and the position (1-based line and column) for the YAML library's
/// limit errors; `None` for any other error.
pub(crate) fn explain(
    e: &serde_yaml::Error,
    text: &str,
) -> Option<(Option<(usize, usize)>, String)> {
    let raw = e.to_string();
    let at = e.location().map(|l| (l.line(), l.column()));
    if raw.starts_with("repetition limit exceeded") {
        return Some((
            at.or_else(|| first_alias(text)),
            "aliases (`*name`) expand to far more values than the file holds (over 100 per \
             YAML event, an \"alias bomb\"); write the values out or use fewer nested aliases"
                .to_string(),
        ));
    }
    if raw.starts_with("recursion limit exceeded") {
        return Some((at, too_deep()));
    }
    if raw.contains("more than one document") {
        return Some((
            at.or_else(|| second_document(text)),
            "the file holds more than one document: a second one starts here (a `---` line \
             after content); a file is one YAML document, so remove the `---` or split the \
             file"
                .to_string(),
        ));
    }
    None
}

/// Where the first alias (`*name`) is used.
fn first_alias(text: &str) -> Option<(usize, usize)> {
    for (i, line) in text.lines().enumerate() {
        let code = line.split(" #").next().unwrap_or(line);
        let mut prev = ' ';
        for (j, c) in code.char_indices() {
            let next = code[j + c.len_utf8()..].chars().next();
            if c == '*'
                && matches!(prev, ' ' | '[' | '{' | ',' | ':' | '-')
                && next.is_some_and(|n| n.is_alphanumeric() || n == '_')
            {
                return Some((i + 1, code[..j].chars().count() + 1));
            }
            prev = c;
        }
    }
    None
}

/// Where the second document starts: the first `---` after content, or the second `---`.
fn second_document(text: &str) -> Option<(usize, usize)> {
    let mut content = false;
    let mut markers = 0;
    for (i, line) in text.lines().enumerate() {
        let is_marker = line == "---" || line.starts_with("--- ") || line.starts_with("---\t");
        if is_marker {
            markers += 1;
            if content || markers == 2 {
                return Some((i + 1, 1));
            }
        } else if !line.trim().is_empty() && !line.trim_start().starts_with('#') {
            content = true;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> serde_yaml::Error {
        match serde_yaml::from_str::<serde_yaml::Value>(text) {
            Err(e) => e,
            Ok(v) => panic!("accepted: {v:?}"),
        }
    }

    #[test]
    fn explains_the_limits_with_a_line() {
        let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            let p = if i == 1 {
                "a".to_string()
            } else {
                format!("l{}", i - 1)
            };
            bomb += &format!("l{i}: &l{i} [{}]\n", vec![format!("*{p}"); 10].join(", "));
        }
        let (at, msg) = explain(&err(&bomb), &bomb).unwrap_or_default();
        assert_eq!(at, Some((2, 10)));
        assert!(msg.contains("alias bomb"), "{msg}");

        let deep = format!("x: {}{}\n", "[".repeat(200), "]".repeat(200));
        let (at, msg) = explain(&err(&deep), &deep).unwrap_or_default();
        assert_eq!(at.map(|a| a.0), Some(1));
        assert!(msg.contains("128 levels"), "{msg}");

        let two = "# two\n---\nseed: 1\n---\nseed: 2\n";
        let (at, msg) = explain(&err(two), two).unwrap_or_default();
        assert_eq!(at, Some((4, 1)));
        assert!(msg.contains("more than one document"), "{msg}");

        assert_eq!(explain(&err("a: [1"), "a: [1"), None);
    }
}
