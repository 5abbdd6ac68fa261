//! Errors of a tree description: the field at fault, by its YAML path, and why.

/// A tree description that cannot be built: the field at fault and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{path}`: {message}")]
pub struct ConfigError {
    /// Where, relative to the tree's root node, in YAML field names: `weights`,
    /// `children[1].children[0].frame`, `children[0].match.dscp[2]`; empty for the root node
    /// itself. Segments are `.name` and `[index]` (see [`ConfigError::segments`]).
    pub path: String,
    /// What is wrong.
    pub message: String,
}

/// One step of a [`ConfigError::path`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PathSegment {
    /// A mapping key.
    Key(String),
    /// A sequence index.
    Index(usize),
}

impl ConfigError {
    pub(super) fn new(path: String, message: impl Into<String>) -> Self {
        ConfigError {
            path,
            message: message.into(),
        }
    }

    /// The error with its path placed under `prefix` (a path in the same notation, e.g.
    /// `switches.leaf.scheduler`), for a loader that embeds the tree in a larger document.
    pub fn prefixed(mut self, prefix: &str) -> Self {
        self.path = if prefix.is_empty() {
            self.path
        } else if self.path.is_empty() {
            prefix.to_string()
        } else if self.path.starts_with('[') {
            format!("{prefix}{}", self.path)
        } else {
            format!("{prefix}.{}", self.path)
        };
        self
    }

    /// [`ConfigError::path`] split into keys and indices (empty for the root node).
    pub fn segments(&self) -> Vec<PathSegment> {
        let mut out = Vec::new();
        for part in self.path.split('.').filter(|p| !p.is_empty()) {
            let (key, mut rest) = part.split_at(part.find('[').unwrap_or(part.len()));
            if !key.is_empty() {
                out.push(PathSegment::Key(key.to_string()));
            }
            while let Some(end) = rest.find(']') {
                if let Some(Ok(i)) = rest.get(1..end).map(str::parse::<usize>) {
                    out.push(PathSegment::Index(i));
                }
                rest = rest.get(end + 1..).unwrap_or("");
            }
        }
        out
    }
}

/// `base.field` (or `field` at the root).
pub(super) fn join(base: &str, field: &str) -> String {
    if base.is_empty() {
        field.to_string()
    } else {
        format!("{base}.{field}")
    }
}

/// How a node is called in messages.
pub(super) fn describe(path: &str) -> String {
    if path.is_empty() {
        "the root".to_string()
    } else {
        format!("`{path}`")
    }
}
