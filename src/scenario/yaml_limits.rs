//! The YAML library's own refusals — an alias bomb, nesting too deep, several documents in one
//! file — in plain words and with a line, for scenarios and ASTRA-sim network files alike.
//!
//! serde_yaml stops such documents (rightly: they would exhaust memory or the stack) but says
//! only `repetition limit exceeded`, often without a position; a user needs to know which
//! construct to look at.

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
        return Some((
            at,
            "lists and mappings are nested more than 128 levels deep here; no field needs that \
             many"
                .to_string(),
        ));
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
