//! Every relative link in README.md and docs/*.md leads somewhere: the file exists, and a
//! `#anchor` names a heading of the target page (GitHub's rule: the heading's text in lower
//! case, spaces as hyphens, punctuation other than `-` and `_` dropped, a repeated heading
//! numbered `-1`, `-2`, ...). Pages move and headings change; without this a reader follows a
//! link to nowhere and no test notices.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The pages checked: README.md and every Markdown file in docs/.
fn pages() -> Vec<PathBuf> {
    let mut v = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    v.extend(docs);
    v
}

/// Lines outside fenced code blocks.
fn prose(text: &str) -> impl Iterator<Item = &str> {
    let mut fenced = false;
    text.lines().filter(move |l| {
        if l.starts_with("```") {
            fenced = !fenced;
            return false;
        }
        !fenced
    })
}

/// A heading's anchor, as GitHub makes it.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for line in prose(text) {
        let Some(heading) = line.trim_start_matches('#').strip_prefix(' ') else {
            continue;
        };
        if !line.starts_with('#') {
            continue;
        }
        let s = slug(heading);
        let n = seen.entry(s.clone()).or_insert(0);
        out.insert(if *n == 0 {
            s.clone()
        } else {
            format!("{s}-{n}")
        });
        *n += 1;
    }
    out
}

/// The targets of `[text](target)` links in `text`'s prose.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose(text) {
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            let Some(end) = rest.find(')') else { break };
            out.push(rest[..end].to_string());
            rest = &rest[end..];
        }
    }
    out
}

fn resolve(page: &Path, target: &str) -> (PathBuf, Option<String>) {
    let (file, anchor) = match target.split_once('#') {
        Some((f, a)) => (f, Some(a.to_string())),
        None => (target, None),
    };
    let path = if file.is_empty() {
        page.to_path_buf()
    } else {
        page.parent().unwrap().join(file)
    };
    (path, anchor)
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let name = page.strip_prefix(root()).unwrap().display().to_string();
        for target in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, anchor) = resolve(&page, &target);
            if !path.exists() {
                problems.push(format!("{name}: `{target}`: no such file"));
                continue;
            }
            if let Some(a) = anchor {
                let is_md = path.extension().is_some_and(|x| x == "md");
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                if !is_md || !anchors(&text).contains(&a) {
                    problems.push(format!("{name}: `{target}`: no heading with that anchor"));
                }
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} links found: is the parser still reading them?"
    );
    assert!(
        problems.is_empty(),
        "broken links:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn anchors_follow_githubs_rule() {
    let text = "# A page\n## Real programs on the fabric: `fabemu emulate`\n## Units\n## Units\n\
                ```\n# not a heading\n```\n";
    let a = anchors(text);
    for s in [
        "a-page",
        "real-programs-on-the-fabric-fabemu-emulate",
        "units",
        "units-1",
    ] {
        assert!(a.contains(s), "{s} missing from {a:?}");
    }
    assert!(!a.contains("not-a-heading"));
    assert_eq!(
        links("see [a](b.md#c) and [d](https://e)\n```\n[x](y)\n```\n"),
        ["b.md#c", "https://e"]
    );
}
