//! MSCCL XML algorithms: bring your own collective as msccl-tools writes it.
//!
//! An MSCCL file describes one algorithm for `ngpus` ranks as a tree of elements:
//!
//! ```xml
//! <algo name=".." coll="allreduce" ngpus="8" nchunksperloop="8" inplace="1" ..>
//!   <gpu id="0" i_chunks="8" o_chunks="0" s_chunks="0">
//!     <tb id="0" send="1" recv="7" chan="0">
//!       <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="i" dstoff="0" cnt="1"
//!             depid="-1" deps="-1" hasdep="0"/>
//! ```
//!
//! - The collective's buffer is cut into `nchunksperloop` equal **chunks**; offsets (`srcoff`,
//!   `dstoff`) and counts (`cnt`) are in chunks, into one of a rank's three buffers: `i`
//!   (input), `o` (output) and `s` (scratch, `s_chunks` of them).
//! - A **thread block** (`tb`) runs its steps one after the other; it sends to one peer
//!   (`send`, -1 for none) and receives from one (`recv`) over MSCCL channel `chan`. Step `s`
//!   of a block may also wait for step `deps` of block `depid` of the same rank (`-1`: none);
//!   `hasdep` marks steps others wait for and is informational here.
//! - Step types: `s` send src; `r` receive into dst; `rrc` receive, add src, write dst; `rrs`
//!   receive, add src, send on (nothing written locally); `rcs` receive into dst and send it
//!   on; `rrcs` receive, add src, write dst and send it on; `cpy` copy src to dst; `nop` only
//!   waits for its dependency. `re` (a local reduction) has no equivalent in fabemu's program
//!   IR and is rejected with a located error.
//!
//! ## Compiling to the program IR
//!
//! [`Msccl::compile`] lays a rank's buffer out so that the IR's layout conventions
//! ([`crate::program`]) hold: the collective's `count` elements first, at their global
//! positions, with the input buffer `i` a view of them (All-Reduce, Reduce-Scatter and
//! All-To-All: all `count`; All-Gather: the rank's block); the output `o` is the same view
//! when the algorithm is in place (`inplace="1"`, or no `o` chunks declared), otherwise a
//! region of its own; a final local copy moves the result to the rank's output positions when
//! they differ (All-To-All's output is always `[count, 2 count)`); then the scratch chunks;
//! then one temporary per `rrs` step (the IR has no reduce-without-write, so `rrs` adds the
//! received chunk into a copy of src and sends that). Steps become IR steps in an order
//! consistent with every block's sequence and every `depid`/`deps` edge (a cycle is an
//! error); MSCCL channel `c` is IR channel `c`, whose per-pair FIFO order matches MSCCL's one
//! connection per (peer, channel).
//!
//! ## Validation
//!
//! Parsing checks the structure (known elements, types and buffers, ids, peers, each
//! `(peer, channel)` used by one block, dependencies that exist, chunks inside their buffer);
//! compiling checks `ngpus` against the ranks, the collective against `coll`, that the
//! dependencies have no cycle, then runs the programs in memory with one element per chunk
//! ([`crate::interpret::run_local`]): a deadlock, a message whose length differs from the
//! receive's, or a rank whose output misses a chunk it needs is an error naming the step (or
//! the rank and chunk).

use std::fmt;

/// Where in the XML file something is: line and column (1-based) and the element's path,
/// e.g. `gpu[id=1]/tb[id=0]/step[s=3]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loc {
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
    /// The element, as a path from `algo`.
    pub element: String,
}

/// A problem with an MSCCL algorithm, at an element when one is to blame.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct MscclError {
    /// The element at fault, if one is.
    pub at: Option<Loc>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for MscclError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.at {
            Some(at) => write!(
                f,
                "{}:{}: <{}>: {}",
                at.line, at.column, at.element, self.message
            ),
            None => f.write_str(&self.message),
        }
    }
}

fn err(at: &Loc, message: impl Into<String>) -> MscclError {
    MscclError {
        at: Some(at.clone()),
        message: message.into(),
    }
}

/// One of a rank's three MSCCL buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Buffer {
    /// `i`: the input.
    Input,
    /// `o`: the output.
    Output,
    /// `s`: scratch.
    Scratch,
}

impl Buffer {
    /// The XML spelling.
    pub const fn key(self) -> &'static str {
        match self {
            Buffer::Input => "i",
            Buffer::Output => "o",
            Buffer::Scratch => "s",
        }
    }
}

/// An MSCCL step type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StepType {
    /// `s`: send.
    Send,
    /// `r`: receive.
    Recv,
    /// `rrc`: receive, reduce, copy.
    RecvReduceCopy,
    /// `rrs`: receive, reduce, send.
    RecvReduceSend,
    /// `rcs`: receive, copy, send.
    RecvCopySend,
    /// `rrcs`: receive, reduce, copy, send.
    RecvReduceCopySend,
    /// `cpy`: local copy.
    Copy,
    /// `re`: local reduction: dst = dst (op) src on this rank.
    Reduce,
    /// `nop`: only a dependency.
    Nop,
}

impl StepType {
    /// The XML spelling.
    pub const fn key(self) -> &'static str {
        match self {
            StepType::Send => "s",
            StepType::Recv => "r",
            StepType::RecvReduceCopy => "rrc",
            StepType::RecvReduceSend => "rrs",
            StepType::RecvCopySend => "rcs",
            StepType::RecvReduceCopySend => "rrcs",
            StepType::Copy => "cpy",
            StepType::Reduce => "re",
            StepType::Nop => "nop",
        }
    }

    fn parse(s: &str) -> Option<StepType> {
        Some(match s {
            "s" => StepType::Send,
            "r" => StepType::Recv,
            "rrc" => StepType::RecvReduceCopy,
            "rrs" => StepType::RecvReduceSend,
            "rcs" => StepType::RecvCopySend,
            "rrcs" => StepType::RecvReduceCopySend,
            "cpy" => StepType::Copy,
            "re" => StepType::Reduce,
            "nop" => StepType::Nop,
            _ => return None,
        })
    }

    /// Whether the step sends to the block's send peer.
    pub const fn sends(self) -> bool {
        matches!(
            self,
            StepType::Send
                | StepType::RecvReduceSend
                | StepType::RecvCopySend
                | StepType::RecvReduceCopySend
        )
    }

    /// Whether the step receives from the block's receive peer.
    pub const fn receives(self) -> bool {
        matches!(
            self,
            StepType::Recv
                | StepType::RecvReduceCopy
                | StepType::RecvReduceSend
                | StepType::RecvCopySend
                | StepType::RecvReduceCopySend
        )
    }

    /// Whether the step reads its source chunks.
    const fn reads_src(self) -> bool {
        matches!(
            self,
            StepType::Send
                | StepType::RecvReduceCopy
                | StepType::RecvReduceSend
                | StepType::RecvReduceCopySend
                | StepType::Copy
                | StepType::Reduce
        )
    }

    /// Whether the step writes its destination chunks.
    const fn writes_dst(self) -> bool {
        matches!(
            self,
            StepType::Recv
                | StepType::RecvReduceCopy
                | StepType::RecvCopySend
                | StepType::RecvReduceCopySend
                | StepType::Copy
                | StepType::Reduce
        )
    }
}

/// One `step` element.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MStep {
    /// What it does.
    pub kind: StepType,
    /// Source buffer and offset (in chunks).
    pub src: (Buffer, usize),
    /// Destination buffer and offset (in chunks).
    pub dst: (Buffer, usize),
    /// Chunks.
    pub cnt: usize,
    /// The `(block, step)` of the same rank this step waits for.
    pub dep: Option<(usize, usize)>,
    /// `hasdep`: another step waits for this one.
    pub hasdep: bool,
    /// Where it is.
    pub at: Loc,
}

/// One `tb` element: a thread block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadBlock {
    /// Its `id`.
    pub id: usize,
    /// The rank it sends to.
    pub send: Option<usize>,
    /// The rank it receives from.
    pub recv: Option<usize>,
    /// Its MSCCL channel.
    pub chan: u32,
    /// Its steps, in order.
    pub steps: Vec<MStep>,
    /// Where it is.
    pub at: Loc,
}

/// One `gpu` element: a rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gpu {
    /// Input chunks declared.
    pub i_chunks: usize,
    /// Output chunks declared.
    pub o_chunks: usize,
    /// Scratch chunks.
    pub s_chunks: usize,
    /// Its thread blocks, by id.
    pub tbs: Vec<ThreadBlock>,
    /// Where it is.
    pub at: Loc,
}

/// A parsed MSCCL algorithm (see the [module docs](self)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Msccl {
    /// `name`.
    pub name: String,
    /// `coll`: `allreduce`, `allgather`, `reducescatter`, ...
    pub coll: String,
    /// `nchunksperloop`.
    pub nchunksperloop: usize,
    /// `inplace`.
    pub inplace: bool,
    /// The ranks, `gpus[r]` having `id = r`.
    pub gpus: Vec<Gpu>,
    /// Where the `algo` element is.
    pub at: Loc,
}

/// The largest `ngpus`, `nchunksperloop`, chunk count or offset read (far beyond real
/// algorithms, whose MSCCL runtime allows 256 steps per block; it keeps arithmetic small).
const MAX_NUMBER: usize = 1 << 20;

/// The most chunks over all ranks' buffers (input, output, scratch, temporaries) that the
/// in-memory check may hold, one `i64` each.
const MAX_CHECK_CHUNKS: usize = 1 << 26;

mod compile;
mod export;
mod parse;
#[cfg(test)]
mod tests;

pub use self::export::export;
