//! Chakra execution traces (MLCommons, schema v0.0.4) on the wire.
//!
//! A trace file holds one rank's execution: a length-delimited protobuf stream (a varint
//! byte count, then that many bytes of message), first one [`GlobalMetadata`], then
//! [`Node`]s until the end of the file. The message structs below carry Chakra's published
//! field numbers (`schema/protobuf/et_def.proto`), written out by hand with `prost`'s derive
//! so that no protobuf compiler is needed to build fabemu. Fields fabemu does not read (the
//! storage section of newer schemas) are skipped by prost as unknown fields.
//!
//! [`decode_stream`] turns a file's bytes into the metadata and the nodes, with errors that
//! name the file and the byte offset; [`encode_stream`] writes the same format (tests build
//! traces with it).

use prost::Message;

/// Chakra's `GlobalMetadata`: the first message of a trace.
#[derive(Clone, PartialEq, Message)]
pub struct GlobalMetadata {
    /// Schema version, e.g. `0.0.4`.
    #[prost(string, tag = "1")]
    pub version: String,
    /// Free attributes (ASTRA-sim's custom collectives carry their XML algorithm here).
    #[prost(message, repeated, tag = "2")]
    pub attr: Vec<AttributeProto>,
}

/// Chakra's `NodeType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum NodeType {
    /// Not a node.
    InvalidNode = 0,
    /// Metadata only; takes no time.
    MetadataNode = 1,
    /// Loads a tensor from memory.
    MemLoadNode = 2,
    /// Stores a tensor to memory.
    MemStoreNode = 3,
    /// A computation.
    CompNode = 4,
    /// A point-to-point send.
    CommSendNode = 5,
    /// A point-to-point receive.
    CommRecvNode = 6,
    /// A collective.
    CommCollNode = 7,
    /// Storage I/O.
    StorageNode = 8,
    /// A batch marker.
    BatchNode = 9,
    /// A checkpoint.
    CheckpointNode = 10,
}

/// Chakra's `CollectiveCommType` (the `comm_type` attribute of a collective node).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum CollectiveCommType {
    /// All-Reduce.
    AllReduce = 0,
    /// Reduce to a root.
    Reduce = 1,
    /// All-Gather.
    AllGather = 2,
    /// Gather to a root.
    Gather = 3,
    /// Scatter from a root.
    Scatter = 4,
    /// Broadcast from a root.
    Broadcast = 5,
    /// All-To-All.
    AllToAll = 6,
    /// Reduce-Scatter.
    ReduceScatter = 7,
    /// Reduce-Scatter with equal blocks.
    ReduceScatterBlock = 8,
    /// Barrier.
    Barrier = 9,
}

/// Chakra's `Node`: one operation of a rank and what it depends on.
#[derive(Clone, PartialEq, Message)]
pub struct Node {
    /// Unique within the rank's trace.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Operator name.
    #[prost(string, tag = "2")]
    pub name: String,
    /// A [`NodeType`] value (kept raw, so an unknown value can be reported).
    #[prost(int32, tag = "3")]
    pub r#type: i32,
    /// Control dependencies (node ids).
    #[prost(uint64, repeated, tag = "4")]
    pub ctrl_deps: Vec<u64>,
    /// Data dependencies (node ids).
    #[prost(uint64, repeated, tag = "5")]
    pub data_deps: Vec<u64>,
    /// When the node started in the profiled run (not used: fabemu schedules).
    #[prost(uint64, tag = "6")]
    pub start_time_micros: u64,
    /// How long the node took (compute nodes: their run time).
    #[prost(uint64, tag = "7")]
    pub duration_micros: u64,
    /// Input tensors.
    #[prost(message, optional, tag = "8")]
    pub inputs: Option<IoInfo>,
    /// Output tensors.
    #[prost(message, optional, tag = "9")]
    pub outputs: Option<IoInfo>,
    /// Attributes (`comm_type`, `comm_size`, `comm_src`, `num_ops`, ...).
    #[prost(message, repeated, tag = "10")]
    pub attr: Vec<AttributeProto>,
}

/// Chakra's `IOInfo`: a node's tensors as text.
#[derive(Clone, PartialEq, Message)]
pub struct IoInfo {
    /// Values.
    #[prost(string, tag = "1")]
    pub values: String,
    /// Shapes.
    #[prost(string, tag = "2")]
    pub shapes: String,
    /// Element types.
    #[prost(string, tag = "3")]
    pub types: String,
}

/// Chakra's `AttributeProto`: a named value.
#[derive(Clone, PartialEq, Message)]
pub struct AttributeProto {
    /// Attribute name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Documentation.
    #[prost(string, tag = "2")]
    pub doc_string: String,
    /// The value.
    #[prost(
        oneof = "AttrValue",
        tags = "3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32"
    )]
    pub value: Option<AttrValue>,
}

/// Defines the `XxxList` wrapper messages of Chakra (`repeated T values = 1`).
macro_rules! list {
    ($(#[$m:meta])* $name:ident, $kind:ident, $ty:ty) => {
        $(#[$m])*
        #[derive(Clone, PartialEq, Message)]
        pub struct $name {
            /// The values.
            #[prost($kind, repeated, tag = "1")]
            pub values: Vec<$ty>,
        }
    };
}
list!(/// `DoubleList`.
    DoubleList, double, f64);
list!(/// `FloatList`.
    FloatList, float, f32);
list!(/// `Int32List`.
    Int32List, int32, i32);
list!(/// `Int64List`.
    Int64List, int64, i64);
list!(/// `Uint32List`.
    Uint32List, uint32, u32);
list!(/// `Uint64List`.
    Uint64List, uint64, u64);
list!(/// `Sint32List`.
    Sint32List, sint32, i32);
list!(/// `Sint64List`.
    Sint64List, sint64, i64);
list!(/// `Fixed32List`.
    Fixed32List, fixed32, u32);
list!(/// `Fixed64List`.
    Fixed64List, fixed64, u64);
list!(/// `Sfixed32List`.
    Sfixed32List, sfixed32, i32);
list!(/// `Sfixed64List`.
    Sfixed64List, sfixed64, i64);
list!(/// `BoolList`.
    BoolList, bool, bool);
list!(/// `StringList`.
    StringList, string, String);
list!(/// `BytesList`.
    BytesList, bytes, Vec<u8>);

/// The value of an [`AttributeProto`] (its `oneof value`).
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum AttrValue {
    /// `double_val`.
    #[prost(double, tag = "3")]
    DoubleVal(f64),
    /// `double_list`.
    #[prost(message, tag = "4")]
    DoubleList(DoubleList),
    /// `float_val`.
    #[prost(float, tag = "5")]
    FloatVal(f32),
    /// `float_list`.
    #[prost(message, tag = "6")]
    FloatList(FloatList),
    /// `int32_val`.
    #[prost(int32, tag = "7")]
    Int32Val(i32),
    /// `int32_list`.
    #[prost(message, tag = "8")]
    Int32List(Int32List),
    /// `int64_val`.
    #[prost(int64, tag = "9")]
    Int64Val(i64),
    /// `int64_list`.
    #[prost(message, tag = "10")]
    Int64List(Int64List),
    /// `uint32_val`.
    #[prost(uint32, tag = "11")]
    Uint32Val(u32),
    /// `uint32_list`.
    #[prost(message, tag = "12")]
    Uint32List(Uint32List),
    /// `uint64_val`.
    #[prost(uint64, tag = "13")]
    Uint64Val(u64),
    /// `uint64_list`.
    #[prost(message, tag = "14")]
    Uint64List(Uint64List),
    /// `sint32_val`.
    #[prost(sint32, tag = "15")]
    Sint32Val(i32),
    /// `sint32_list`.
    #[prost(message, tag = "16")]
    Sint32List(Sint32List),
    /// `sint64_val`.
    #[prost(sint64, tag = "17")]
    Sint64Val(i64),
    /// `sint64_list`.
    #[prost(message, tag = "18")]
    Sint64List(Sint64List),
    /// `fixed32_val`.
    #[prost(fixed32, tag = "19")]
    Fixed32Val(u32),
    /// `fixed32_list`.
    #[prost(message, tag = "20")]
    Fixed32List(Fixed32List),
    /// `fixed64_val`.
    #[prost(fixed64, tag = "21")]
    Fixed64Val(u64),
    /// `fixed64_list`.
    #[prost(message, tag = "22")]
    Fixed64List(Fixed64List),
    /// `sfixed32_val`.
    #[prost(sfixed32, tag = "23")]
    Sfixed32Val(i32),
    /// `sfixed32_list`.
    #[prost(message, tag = "24")]
    Sfixed32List(Sfixed32List),
    /// `sfixed64_val`.
    #[prost(sfixed64, tag = "25")]
    Sfixed64Val(i64),
    /// `sfixed64_list`.
    #[prost(message, tag = "26")]
    Sfixed64List(Sfixed64List),
    /// `bool_val`.
    #[prost(bool, tag = "27")]
    BoolVal(bool),
    /// `bool_list`.
    #[prost(message, tag = "28")]
    BoolList(BoolList),
    /// `string_val`.
    #[prost(string, tag = "29")]
    StringVal(String),
    /// `string_list`.
    #[prost(message, tag = "30")]
    StringList(StringList),
    /// `bytes_val`.
    #[prost(bytes, tag = "31")]
    BytesVal(Vec<u8>),
    /// `bytes_list`.
    #[prost(message, tag = "32")]
    BytesList(BytesList),
}

impl AttributeProto {
    /// An integer attribute (`int64_val` ...); `name` with `value`.
    pub fn int(name: &str, value: i64) -> AttributeProto {
        AttributeProto {
            name: name.to_string(),
            doc_string: String::new(),
            value: Some(AttrValue::Int64Val(value)),
        }
    }

    /// A string attribute.
    pub fn string(name: &str, value: &str) -> AttributeProto {
        AttributeProto {
            name: name.to_string(),
            doc_string: String::new(),
            value: Some(AttrValue::StringVal(value.to_string())),
        }
    }

    /// The value as a signed integer, whichever integer or bool kind it was written as
    /// (trace writers differ: ASTRA-sim's use int64, others uint64 or int32).
    pub fn as_i128(&self) -> Option<i128> {
        Some(match self.value.as_ref()? {
            AttrValue::Int32Val(v) | AttrValue::Sint32Val(v) | AttrValue::Sfixed32Val(v) => {
                i128::from(*v)
            }
            AttrValue::Int64Val(v) | AttrValue::Sint64Val(v) | AttrValue::Sfixed64Val(v) => {
                i128::from(*v)
            }
            AttrValue::Uint32Val(v) | AttrValue::Fixed32Val(v) => i128::from(*v),
            AttrValue::Uint64Val(v) | AttrValue::Fixed64Val(v) => i128::from(*v),
            AttrValue::BoolVal(b) => i128::from(*b),
            // Some writers store op counts as doubles; only whole numbers are integers.
            AttrValue::DoubleVal(d) if d.fract() == 0.0 && d.abs() < 1e30 => *d as i128,
            _ => return None,
        })
    }

    /// The value as text, for string attributes.
    pub fn as_str(&self) -> Option<&str> {
        match self.value.as_ref()? {
            AttrValue::StringVal(s) => Some(s),
            _ => None,
        }
    }
}

impl Node {
    /// The attribute called `name`, if any (the first one).
    pub fn attr(&self, name: &str) -> Option<&AttributeProto> {
        self.attr.iter().find(|a| a.name == name)
    }
}

/// What went wrong reading a trace's bytes (the file is named by the caller's error).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    /// The file ends inside a length prefix or a message.
    #[error("truncated at byte {offset}: {what}")]
    Truncated {
        /// Where the incomplete item starts.
        offset: u64,
        /// What was being read.
        what: String,
    },
    /// A length prefix is not a valid varint (more than 10 bytes, or beyond 64 bits).
    #[error("bad varint length prefix at byte {offset}")]
    BadVarint {
        /// Where the varint starts.
        offset: u64,
    },
    /// A message's bytes are not a valid protobuf message of its kind.
    #[error("byte {offset}: {what} does not decode: {why}")]
    Decode {
        /// Where the message starts (its length prefix).
        offset: u64,
        /// Which message (`GlobalMetadata`, `node #3`).
        what: String,
        /// prost's reason.
        why: String,
    },
    /// The file is empty: not even a `GlobalMetadata`.
    #[error("empty: a trace starts with a GlobalMetadata message")]
    Empty,
}

/// A node and the byte offset of its length prefix in the file.
#[derive(Clone, Debug, PartialEq)]
pub struct Located {
    /// Offset of the node's length prefix.
    pub offset: u64,
    /// The node.
    pub node: Node,
}

/// Reads a varint at `pos`; `Ok(None)` at the end of the input.
fn read_varint(bytes: &[u8], pos: usize) -> Result<Option<(u64, usize)>, StreamError> {
    if pos >= bytes.len() {
        return Ok(None);
    }
    let mut value = 0u64;
    for i in 0..10 {
        let Some(&b) = bytes.get(pos + i) else {
            return Err(StreamError::Truncated {
                offset: pos as u64,
                what: "a length prefix".into(),
            });
        };
        let bits = u64::from(b & 0x7f);
        // The tenth byte may only carry the 64th bit.
        if i == 9 && bits > 1 {
            return Err(StreamError::BadVarint { offset: pos as u64 });
        }
        value |= bits << (7 * i);
        if b & 0x80 == 0 {
            return Ok(Some((value, pos + i + 1)));
        }
    }
    Err(StreamError::BadVarint { offset: pos as u64 })
}

/// Decodes a whole trace: its metadata and its nodes in file order.
pub fn decode_stream(bytes: &[u8]) -> Result<(GlobalMetadata, Vec<Located>), StreamError> {
    let mut pos = 0usize;
    let mut meta = None;
    let mut nodes = Vec::new();
    while let Some((len, body)) = read_varint(bytes, pos)? {
        let what = if meta.is_none() {
            "GlobalMetadata".to_string()
        } else {
            format!("node #{}", nodes.len())
        };
        let end = usize::try_from(len)
            .ok()
            .and_then(|l| body.checked_add(l))
            .filter(|&e| e <= bytes.len())
            .ok_or_else(|| StreamError::Truncated {
                offset: pos as u64,
                what: format!(
                    "{what} announces {len} bytes, {} remain",
                    bytes.len() - body
                ),
            })?;
        let slice = &bytes[body..end];
        let decode_err = |e: prost::DecodeError| StreamError::Decode {
            offset: pos as u64,
            what: what.clone(),
            why: e.to_string(),
        };
        if meta.is_none() {
            meta = Some(GlobalMetadata::decode(slice).map_err(decode_err)?);
        } else {
            nodes.push(Located {
                offset: pos as u64,
                node: Node::decode(slice).map_err(decode_err)?,
            });
        }
        pos = end;
    }
    Ok((meta.ok_or(StreamError::Empty)?, nodes))
}

/// Encodes a trace as Chakra writes it: the metadata, then each node, each behind its varint
/// length.
pub fn encode_stream(meta: &GlobalMetadata, nodes: &[Node]) -> Vec<u8> {
    let mut out = meta.encode_length_delimited_to_vec();
    for n in nodes {
        out.extend_from_slice(&n.encode_length_delimited_to_vec());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes of ASTRA-sim's 4-NPU All-Reduce microbenchmark, rank 0 (as Chakra wrote
    /// them): metadata "0.0.4", one collective node with is_cpu_op, comm_type and comm_size.
    const ALL_REDUCE_0: &[u8] = &[
        0x07, 0x0a, 0x05, b'0', b'.', b'0', b'.', b'4', 0x48, 0x12, 0x14, b'a', b'l', b'l', b'_',
        b'r', b'e', b'd', b'u', b'c', b'e', b'_', b'4', b'n', b'p', b'u', b's', b'_', b'1', b'M',
        b'B', 0x18, 0x07, 0x52, 0x0e, 0x0a, 0x09, b'i', b's', b'_', b'c', b'p', b'u', b'_', b'o',
        b'p', 0xd8, 0x01, 0x00, 0x52, 0x0d, 0x0a, 0x09, b'c', b'o', b'm', b'm', b'_', b't', b'y',
        b'p', b'e', 0x48, 0x00, 0x52, 0x0f, 0x0a, 0x09, b'c', b'o', b'm', b'm', b'_', b's', b'i',
        b'z', b'e', 0x48, 0x80, 0x80, 0x40,
    ];

    #[test]
    fn decodes_a_known_trace_and_encodes_it_back() {
        let (meta, nodes) = decode_stream(ALL_REDUCE_0).unwrap();
        assert_eq!(meta.version, "0.0.4");
        assert_eq!(nodes.len(), 1);
        let n = &nodes[0].node;
        assert_eq!(n.r#type, NodeType::CommCollNode as i32);
        assert_eq!(n.attr("comm_size").and_then(|a| a.as_i128()), Some(1 << 20));
        assert_eq!(n.attr("comm_type").and_then(|a| a.as_i128()), Some(0));
        assert_eq!(n.attr("is_cpu_op").and_then(|a| a.as_i128()), Some(0));
        let nodes: Vec<Node> = nodes.into_iter().map(|l| l.node).collect();
        assert_eq!(encode_stream(&meta, &nodes), ALL_REDUCE_0);
    }

    #[test]
    fn truncation_and_bad_varints_are_located() {
        let cut = &ALL_REDUCE_0[..ALL_REDUCE_0.len() - 2];
        assert!(matches!(
            decode_stream(cut),
            Err(StreamError::Truncated { offset: 8, .. })
        ));
        let mut bad = ALL_REDUCE_0[..8].to_vec();
        bad.extend_from_slice(&[0xff; 11]);
        assert_eq!(
            decode_stream(&bad),
            Err(StreamError::BadVarint { offset: 8 })
        );
        let mut half = ALL_REDUCE_0[..8].to_vec();
        half.push(0x80);
        assert!(matches!(
            decode_stream(&half),
            Err(StreamError::Truncated { offset: 8, .. })
        ));
        assert_eq!(decode_stream(&[]), Err(StreamError::Empty));
    }
}
