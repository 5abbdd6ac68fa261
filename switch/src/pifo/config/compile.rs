//! Validation and compilation of a [`TreeConfig`]: one walk over the tree checks every field
//! (with its path), assigns node ids depth-first and builds the classifier.

use super::*;

/// The result of walking a valid tree: node specs in depth-first order (with their parent's
/// index) and the classifier.
struct Compiled {
    nodes: Vec<(usize, NodeSpec)>,
    classifier: MatchClassifier,
}

/// State of the walk over the tree.
#[derive(Default)]
struct Walk<'a> {
    /// What a frame costs on the wire beyond its length (shapers counting wire bytes).
    overhead: EthernetOverhead,
    /// Name → path of the node that has it.
    names: HashMap<&'a str, String>,
    /// Path of the default leaf, once found.
    default_path: Option<String>,
    nodes: Vec<(usize, NodeSpec)>,
    rules: Vec<(Rule, NodeId)>,
    default: Option<NodeId>,
}

impl<'a> Walk<'a> {
    fn node(
        &mut self,
        cfg: &'a TreeConfig,
        path: &str,
        parent: Option<usize>,
    ) -> Result<(), ConfigError> {
        let at = |field: &str, msg: String| Err(ConfigError::new(join(path, field), msg));
        let leaf = cfg.children.is_empty();
        if cfg.name.is_empty() {
            return at("name", "a node needs a non-empty name".into());
        }
        if let Some(first) = self.names.get(cfg.name.as_str()) {
            return at(
                "name",
                format!(
                    "`{}` is already the name of {}; names must be unique in the tree",
                    cfg.name,
                    describe(first)
                ),
            );
        }
        self.names.insert(&cfg.name, path.to_string());
        if cfg.children.len() > MAX_CHILDREN {
            return at(
                "children",
                format!(
                    "{} children; a node has at most {MAX_CHILDREN}",
                    cfg.children.len()
                ),
            );
        }
        if parent.is_none() && cfg.shaping.is_some() {
            return at(
                "shaping",
                "the root cannot be shaped (it has no parent to release elements to); \
                 shape a child, or put the rate limit on the port"
                    .into(),
            );
        }
        if !leaf {
            for (field, given) in [
                ("match", cfg.r#match.is_some()),
                ("capacity", cfg.capacity.is_some()),
                ("overflow", cfg.overflow.is_some()),
            ] {
                if given {
                    return at(
                        field,
                        format!("only leaves take `{field}`; this node has children"),
                    );
                }
            }
        }
        let scheduling = cfg.scheduling(path, leaf)?;
        let mut spec = NodeSpec::boxed(cfg.name.clone(), scheduling);
        if let Some(sh) = &cfg.shaping {
            spec = spec.shaping_boxed(sh.build(&join(path, "shaping"), self.overhead)?);
        }
        spec = spec.pifo(cfg.pifo_kind(path)?);
        if let Some(cap) = cfg.capacity {
            if cap == 0 {
                return at(
                    "capacity",
                    "a leaf must hold at least 1 packet (omit `capacity` for no bound)".into(),
                );
            }
            spec = spec.capacity(cap, cfg.overflow.unwrap_or_default().into());
        } else if cfg.overflow.is_some() {
            return at(
                "overflow",
                "`overflow` needs a `capacity` (an unbounded leaf never overflows)".into(),
            );
        }
        let id = self.nodes.len();
        self.nodes.push((parent.unwrap_or(usize::MAX), spec));
        if leaf {
            let node = NodeId(id as u32);
            match &cfg.r#match {
                Some(m) => {
                    m.check(&join(path, "match"))?;
                    self.rules.push((Rule::new(m), node));
                }
                None => {
                    if let Some(first) = &self.default_path {
                        return Err(ConfigError::new(
                            path.to_string(),
                            format!(
                                "a second leaf without `match`: {} is already the default leaf \
                                 (at most one); give one of them a `match`",
                                describe(first)
                            ),
                        ));
                    }
                    self.default_path = Some(path.to_string());
                    self.default = Some(node);
                }
            }
        }
        for (i, child) in cfg.children.iter().enumerate() {
            self.node(child, &join(path, &format!("children[{i}]")), Some(id))?;
        }
        Ok(())
    }
}

/// Checks a per-class list's length against the classes `by` defines.
fn check_class_list(
    path: &str,
    field: &str,
    len: usize,
    by: ClassKey,
    children: usize,
    exact_per_child: bool,
) -> Result<(), ConfigError> {
    let err = |msg: String| Err(ConfigError::new(join(path, field), msg));
    match by {
        ClassKey::Child if exact_per_child && len != children => err(format!(
            "{len} entries for {children} children; give exactly one per child, in order"
        )),
        ClassKey::Child if len > children => err(format!(
            "{len} entries for {children} children; give at most one per child, in order"
        )),
        ClassKey::Priority if len > PRIORITIES => err(format!(
            "{len} entries; by priority there are {PRIORITIES} classes (0..=7)"
        )),
        ClassKey::Dscp if len > DSCPS => err(format!(
            "{len} entries; by dscp there are {DSCPS} classes (0..=63)"
        )),
        _ if len == 0 => err("empty list".into()),
        _ => Ok(()),
    }
}

impl TreeConfig {
    /// Checks the whole tree: every node has exactly the parameters its `scheduling` (and
    /// `shaping`) needs, with valid values; `match`, `capacity` and `overflow` only on leaves;
    /// no `shaping` at the root; unique, non-empty names; at most one default leaf; at most
    /// [`MAX_CHILDREN`] children per node. The first problem found (depth-first) is returned.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.compile(EthernetOverhead::default()).map(drop)
    }

    /// Validates the tree and builds it, classified by its [`MatchClassifier`]. Nodes are
    /// numbered depth-first in file order (the root is [`NodeId`]`(0)`). Shapers that count
    /// wire bytes (`bytes: wire`) use standard Ethernet's overhead; see
    /// [`TreeConfig::build_for`].
    pub fn build<T>(&self) -> Result<PifoTree<T>, ConfigError> {
        self.build_for(EthernetOverhead::default())
    }

    /// [`TreeConfig::build`] for links whose frames cost `overhead` on the wire (the
    /// scenario's `ethernet`).
    pub fn build_for<T>(&self, overhead: EthernetOverhead) -> Result<PifoTree<T>, ConfigError> {
        let Compiled { nodes, classifier } = self.compile(overhead)?;
        let tree_err = |e: crate::pifo::TreeError| ConfigError::new(String::new(), e.to_string());
        let mut nodes = nodes.into_iter();
        let Some((_, root)) = nodes.next() else {
            return Err(ConfigError::new(String::new(), "empty tree"));
        };
        let mut builder = PifoTreeBuilder::new(root);
        for (parent, spec) in nodes {
            builder.add(NodeId(parent as u32), spec).map_err(tree_err)?;
        }
        builder.build_boxed(Box::new(classifier)).map_err(tree_err)
    }

    /// Validates the tree and returns its classifier alone (the one [`TreeConfig::build`]
    /// installs).
    pub fn classifier(&self) -> Result<MatchClassifier, ConfigError> {
        self.compile(EthernetOverhead::default())
            .map(|c| c.classifier)
    }

    fn compile(&self, overhead: EthernetOverhead) -> Result<Compiled, ConfigError> {
        let mut walk = Walk {
            overhead,
            ..Walk::default()
        };
        walk.node(self, "", None)?;
        Ok(Compiled {
            nodes: walk.nodes,
            classifier: MatchClassifier {
                rules: walk.rules,
                default: walk.default,
            },
        })
    }

    /// The class key in effect, checked against the node's place in the tree.
    fn class_key(&self, path: &str, leaf: bool) -> Result<ClassKey, ConfigError> {
        let kind = self.scheduling.name();
        match (self.by, leaf) {
            (Some(ClassKey::Child), true) => Err(ConfigError::new(
                join(path, "by"),
                "a leaf has no children to key classes on; use priority, dscp, flow or qp",
            )),
            (Some(by), _) => Ok(by),
            (None, false) => Ok(ClassKey::Child),
            (None, true) => Err(ConfigError::new(
                join(path, "by"),
                format!("`{kind}` at a leaf needs `by`: priority, dscp, flow or qp"),
            )),
        }
    }

    /// Checks the scheduling parameters and makes the transaction.
    fn scheduling(
        &self,
        path: &str,
        leaf: bool,
    ) -> Result<Box<dyn SchedulingTransaction>, ConfigError> {
        let kind = self.scheduling;
        let allowed = kind.params();
        for (field, given) in [
            ("by", self.by.is_some()),
            ("weights", self.weights.is_some()),
            ("rates", self.rates.is_some()),
            ("burst", self.burst.is_some()),
            ("frame", self.frame.is_some()),
        ] {
            if given && !allowed.contains(&field) {
                let takes = if allowed.is_empty() {
                    "no parameters".to_string()
                } else {
                    allowed
                        .iter()
                        .map(|p| format!("`{p}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                return Err(ConfigError::new(
                    join(path, field),
                    format!("`{}` takes no `{field}` (it takes {takes})", kind.name()),
                ));
            }
        }
        let children = self.children.len();
        let missing = |field: &str, what: &str| {
            Err(ConfigError::new(
                join(path, field),
                format!("`{}` needs `{field}`: {what}", kind.name()),
            ))
        };
        Ok(match kind {
            SchedulingKind::Fifo => Box::new(Fifo),
            SchedulingKind::Lstf => Box::new(Lstf),
            SchedulingKind::Srpt => Box::new(Srpt),
            SchedulingKind::Sjf => Box::new(Sjf),
            SchedulingKind::Edf => Box::new(Edf),
            SchedulingKind::StrictPriority => match self.class_key(path, leaf)? {
                ClassKey::Child => Box::new(StrictPriority::new(ClassBy::Child)),
                ClassKey::Priority => Box::new(StrictPriority::pcp()),
                ClassKey::Dscp => Box::new(StrictPriority::with_levels(
                    ClassBy::Dscp,
                    (0..DSCPS as u64).rev().collect(),
                )),
                ClassKey::Qp => Box::new(StrictPriority::new(ClassBy::Qp)),
                ClassKey::Flow => {
                    return Err(ConfigError::new(
                        join(path, "by"),
                        "strict priority by flow has no meaning (a flow hash has no order); \
                         use child, priority, dscp or qp",
                    ))
                }
            },
            SchedulingKind::RoundRobin => {
                Box::new(RoundRobin::new(self.class_key(path, leaf)?.into()))
            }
            SchedulingKind::Las => match self.by {
                None => Box::new(Las::from_packet()),
                Some(ClassKey::Flow) => Box::new(Las::per_flow()),
                Some(other) => {
                    return Err(ConfigError::new(
                        join(path, "by"),
                        format!(
                            "`las` counts bytes per flow: `by` may only be `flow` (count at this \
                             node), or be omitted (read the packet's attained bytes), not `{}`",
                            other.name()
                        ),
                    ))
                }
            },
            SchedulingKind::Wfq => {
                let by = self.class_key(path, leaf)?;
                match (&self.weights, by) {
                    (None, ClassKey::Child) => {
                        return missing("weights", &format!("one per child ({children})"))
                    }
                    (None, _) => Box::new(Wfq::fair(by.into())),
                    (Some(_), ClassKey::Flow) => {
                        return Err(ConfigError::new(
                            join(path, "weights"),
                            "wfq by flow weighs every flow equally; remove `weights`",
                        ))
                    }
                    (Some(w), _) => {
                        check_class_list(path, "weights", w.len(), by, children, true)?;
                        if let Some((k, &bad)) = w
                            .iter()
                            .enumerate()
                            .find(|(_, &x)| !(x.is_finite() && x > 0.0))
                        {
                            return Err(ConfigError::new(
                                join(path, &format!("weights[{k}]")),
                                format!("weight {bad} must be a positive finite number"),
                            ));
                        }
                        let wfq = Wfq::new(by.into(), w)
                            .map_err(|e| ConfigError::new(join(path, "weights"), e.to_string()))?;
                        Box::new(wfq)
                    }
                }
            }
            SchedulingKind::MinRate => {
                if leaf {
                    return Err(ConfigError::new(
                        join(path, "scheduling"),
                        "min_rate at a leaf would flip one flow's ranks between packets and \
                         reorder it; use it at an inner node over its children",
                    ));
                }
                let by = self.class_key(path, leaf)?;
                if by == ClassKey::Flow {
                    return Err(ConfigError::new(
                        join(path, "by"),
                        "min_rate by flow cannot list rates (a flow hash is not a class \
                         number); use child, priority, dscp or qp",
                    ));
                }
                let Some(rates) = &self.rates else {
                    return missing("rates", "the guaranteed rate of each class, in order");
                };
                check_class_list(path, "rates", rates.len(), by, children, false)?;
                if let Some(k) = rates.iter().position(|r| r.bps() == 0) {
                    return Err(ConfigError::new(
                        join(path, &format!("rates[{k}]")),
                        "a guaranteed rate must be above 0 (leave classes without a \
                         guarantee off the end of the list)",
                    ));
                }
                let Some(burst) = self.burst else {
                    return missing("burst", "the token-bucket size of each class, e.g. 64KiB");
                };
                if burst.bytes() == 0 {
                    return Err(ConfigError::new(
                        join(path, "burst"),
                        "must be above 0 (at least one packet, or nothing is ever within its \
                         guarantee)",
                    ));
                }
                Box::new(MinRate::new(by.into(), rates, burst.bytes()))
            }
            SchedulingKind::StopAndGo => {
                let Some(frame) = self.frame else {
                    return missing("frame", "the frame length, e.g. 10us");
                };
                let sg = StopAndGo::new(frame)
                    .map_err(|e| ConfigError::new(join(path, "frame"), e.to_string()))?;
                Box::new(sg)
            }
        })
    }

    /// Checks `pifo` and `bucket` and gives the PIFO kind.
    fn pifo_kind(&self, path: &str) -> Result<PifoKind, ConfigError> {
        match (self.pifo.unwrap_or_default(), self.bucket) {
            (PifoImpl::Heap, None) => Ok(PifoKind::Heap),
            (PifoImpl::Heap, Some(_)) => Err(ConfigError::new(
                join(path, "bucket"),
                "`bucket` shapes a `pifo: bucket` node's window; this node uses a heap",
            )),
            (PifoImpl::Bucket, w) => {
                let cfg = BucketConfig::default();
                let w = w.unwrap_or(BucketWindow {
                    window_log2: cfg.window_log2,
                    granularity_log2: cfg.granularity_log2,
                });
                if !WINDOW_LOG2.contains(&w.window_log2) {
                    return Err(ConfigError::new(
                        join(path, "bucket.window_log2"),
                        format!(
                            "{} is outside {}..={}",
                            w.window_log2,
                            WINDOW_LOG2.start(),
                            WINDOW_LOG2.end()
                        ),
                    ));
                }
                if w.granularity_log2 > MAX_GRANULARITY_LOG2 {
                    return Err(ConfigError::new(
                        join(path, "bucket.granularity_log2"),
                        format!(
                            "{} is outside 0..={MAX_GRANULARITY_LOG2}",
                            w.granularity_log2
                        ),
                    ));
                }
                Ok(PifoKind::Bucket(BucketConfig {
                    window_log2: w.window_log2,
                    granularity_log2: w.granularity_log2,
                }))
            }
        }
    }
}

impl ShapingConfig {
    /// Checks the parameters (`path` is the `shaping` field's) and makes the transaction.
    fn build(
        &self,
        path: &str,
        overhead: EthernetOverhead,
    ) -> Result<Box<dyn ShapingTransaction>, ConfigError> {
        let (name, allowed): (&str, &[&str]) = match self.kind {
            ShapingKind::TokenBucket => ("token_bucket", &["rate", "burst", "bytes"]),
            ShapingKind::StopAndGo => ("stop_and_go", &["frame"]),
        };
        for (field, given) in [
            ("rate", self.rate.is_some()),
            ("burst", self.burst.is_some()),
            ("frame", self.frame.is_some()),
            ("bytes", self.bytes.is_some()),
        ] {
            if given && !allowed.contains(&field) {
                return Err(ConfigError::new(
                    join(path, field),
                    format!(
                        "`{name}` shaping takes no `{field}` (it takes {})",
                        allowed
                            .iter()
                            .map(|p| format!("`{p}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
        }
        let missing = |field: &str, what: &str| {
            Err(ConfigError::new(
                join(path, field),
                format!("`{name}` shaping needs `{field}`: {what}"),
            ))
        };
        Ok(match self.kind {
            ShapingKind::TokenBucket => {
                let Some(rate) = self.rate else {
                    return missing("rate", "the rate limit, e.g. 10Gbps");
                };
                let Some(burst) = self.burst else {
                    return missing("burst", "the bucket size, e.g. 64KiB (0B paces strictly)");
                };
                let tb = TokenBucket::new(rate, burst.bytes())
                    .map_err(|e| ConfigError::new(join(path, "rate"), e.to_string()))?;
                match self.bytes.unwrap_or_default() {
                    ShapedBytes::Frame => Box::new(tb),
                    ShapedBytes::Wire => Box::new(tb.counting_wire_bytes(overhead)),
                }
            }
            ShapingKind::StopAndGo => {
                let Some(frame) = self.frame else {
                    return missing("frame", "the frame length, e.g. 10us");
                };
                let sg = StopAndGo::new(frame)
                    .map_err(|e| ConfigError::new(join(path, "frame"), e.to_string()))?;
                Box::new(sg)
            }
        })
    }
}

impl MatchConfig {
    /// Checks the predicate (`path` is the `match` field's): at least one condition, no empty
    /// lists, values in range, a size range that is not empty.
    fn check(&self, path: &str) -> Result<(), ConfigError> {
        let at = |field: &str, msg: String| Err(ConfigError::new(join(path, field), msg));
        if self == &MatchConfig::default() {
            return Err(ConfigError::new(
                path.to_string(),
                "no conditions (it would take every packet); omit `match` to make this the \
                 default leaf",
            ));
        }
        for (field, vals, n) in [
            ("priority", &self.priority, PRIORITIES),
            ("dscp", &self.dscp, DSCPS),
        ] {
            if let Some(vals) = vals {
                if vals.is_empty() {
                    return at(field, "empty list (it would never match)".into());
                }
                if let Some(k) = vals.iter().position(|&v| usize::from(v) >= n) {
                    return at(
                        &format!("{field}[{k}]"),
                        format!("{field} {} is outside 0..={}", vals[k], n - 1),
                    );
                }
            }
        }
        if self.qp.as_ref().is_some_and(Vec::is_empty) {
            return at("qp", "empty list (it would never match)".into());
        }
        if let (Some(lo), Some(hi)) = (self.size_at_least, self.size_at_most) {
            if lo > hi {
                return at(
                    "size_at_least",
                    format!("{lo} is above size_at_most {hi} (it would never match)"),
                );
            }
        }
        Ok(())
    }
}
