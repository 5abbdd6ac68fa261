//! A packet in flight: its real header bytes, its payload, and a few cached facts.
//!
//! The header bytes (Ethernet up to the last transport header) and the trailer (a RoCEv2
//! payload's pad to 4 bytes and the ICRC) live inline, back to back, in one fixed array so that building, forwarding and
//! dropping a packet allocates nothing. Only a header longer than every RoCE stack (a frame
//! carrying HPCC's in-band telemetry) moves, with its trailer, to a boxed array: the packet
//! stays small for every run, and only telemetry pays. The payload is either just a length
//! ("timing mode") or real data, a zero-copy [`Bytes`] slice of the sender's buffer ("data
//! mode") held behind a box so that timing runs do not carry its 32 bytes in every packet. The
//! bytes are the truth; [`PacketMeta`] only caches what the emulator itself needs for
//! statistics and never changes forwarding.
//!
//! Why the size matters: a `Packet` is moved by value through queues and events at every hop.
//! At 128 bytes or less those moves compile to a few vector loads and stores; at 136 bytes they
//! became calls to `memcpy` (13.7% of all instructions on `benches/fabric64.yaml`), so the
//! layout is held to 128 bytes by a test.

use bytes::Bytes;

use crate::units::Time;
use crate::wire::MAX_HEADER_LEN;

/// Header bytes kept inline: the largest RoCE stack (Eth+IP+UDP+BTH+RETH+ImmDt = 74) and PFC
/// frames (60); longer headers (in-band telemetry) live in [`Packet`]'s boxed array.
pub const INLINE_HEADER_LEN: usize = 74;

/// Longest trailer: a RoCEv2 frame's pad (up to 3 zero bytes after the payload, which the
/// BTH's PadCnt counts) and its 4-byte ICRC. The pad lives here rather than in the payload so
/// that a data-mode payload stays a zero-copy slice of the sender's buffer.
pub const MAX_TRAILER_LEN: usize = 7;

/// Inline storage: the longest inline header followed by the longest trailer (what
/// [`Packet::from_inline`] takes).
pub const INLINE_LEN: usize = INLINE_HEADER_LEN + MAX_TRAILER_LEN;

/// Boxed storage for a long header and its trailer.
type LongStorage = Box<[u8; MAX_HEADER_LEN + MAX_TRAILER_LEN]>;

/// Flag bit: the frame took a bit error on a link (its FCS would not match).
const FLAG_CORRUPTED: u8 = 1;

/// The payload of a packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Payload {
    /// Real bytes, a slice of the sender's message buffer (data mode), boxed so that the
    /// payload of a timing-mode packet stays 16 bytes (see [`Payload::data`]).
    Data(Box<Bytes>),
    /// Only the length is simulated (timing mode); the bytes would be zeros.
    Timing(u32),
}

impl Payload {
    /// A data-mode payload holding `bytes`.
    pub fn data(bytes: Bytes) -> Payload {
        Payload::Data(Box::new(bytes))
    }
    /// The real bytes (data mode), or `None` in timing mode.
    pub fn bytes(&self) -> Option<&Bytes> {
        match self {
            Payload::Data(b) => Some(b),
            Payload::Timing(_) => None,
        }
    }
    /// Number of payload bytes on the wire.
    #[inline]
    pub fn len(&self) -> usize {
        match self {
            Payload::Data(b) => b.len(),
            Payload::Timing(n) => *n as usize,
        }
    }
    /// True when the payload has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Facts the emulator caches beside the bytes for its own bookkeeping.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PacketMeta {
    /// When the sending NIC created the packet (for one-way latency statistics).
    pub created_at: Time,
    /// Size of the message this packet belongs to, in bytes (written by the sending NIC; what
    /// pFabric-style schedulers such as SJF read). Messages are below 4 GiB (RETH's DMA length).
    pub message_len: u32,
    /// Bytes of the message still to send, this packet included (SRPT's rank).
    pub message_remaining: u32,
}

/// One Ethernet frame in flight.
///
/// Layout (128 bytes, in this order): the payload, the frame length, the header and trailer
/// lengths, one byte of flags, the inline header-and-trailer array, the cached [`PacketMeta`]
/// and the pointer to a long header. The order is fixed (`repr(C)`) so that everything a switch reads or rewrites
/// per hop — the lengths (frame length), the flags (corruption), the payload's length and the
/// header's first 45 bytes (Ethernet, IPv4 with DSCP, ECN, TTL and checksum, the UDP ports) —
/// lies in the first 64-byte cache line; whether the header is inline is told by its length, so
/// the pointer to a long one, at the end, is read only for such a header.
#[derive(Clone, Debug)]
#[repr(C)]
pub struct Packet {
    payload: Payload,
    /// [`Packet::frame_len`], kept as the parts change: switches ask for it several times per
    /// hop, and the sum read the payload's variant (and in data mode its boxed length) each
    /// time (~17 instructions per hop on benches/fabric64.yaml). Saturates at `u32::MAX`
    /// (a payload of 4 GiB, which no frame has).
    len: u32,
    header_len: u8,
    trailer_len: u8,
    /// Per-frame facts that are not bytes on the wire (`FLAG_*`).
    flags: u8,
    /// The header, then the trailer right after it (when the header is at most
    /// [`INLINE_HEADER_LEN`] bytes; otherwise both are in `long`).
    bytes: [u8; INLINE_LEN],
    /// Cached bookkeeping (not part of the frame).
    pub meta: PacketMeta,
    /// The whole header and trailer when the header is longer than [`INLINE_HEADER_LEN`] (then
    /// `bytes` is unused); `Some` exactly when it is.
    long: Option<LongStorage>,
}

/// The frame length of a packet with these parts (see `Packet::len`).
#[inline]
fn frame_len_of(header_len: usize, payload: &Payload, trailer_len: usize) -> u32 {
    u32::try_from(header_len + payload.len() + trailer_len).unwrap_or(u32::MAX)
}

/// Header and trailer lengths that fit a packet's inline storage (what
/// [`Packet::from_inline`] takes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InlineLens {
    header: u8,
    trailer: u8,
}

impl InlineLens {
    /// A header of `header_len` bytes (at most [`INLINE_HEADER_LEN`]) and a trailer of
    /// `trailer_len` (at most [`MAX_TRAILER_LEN`]).
    #[inline]
    pub fn new(header_len: usize, trailer_len: usize) -> Result<InlineLens, PacketError> {
        if header_len > INLINE_HEADER_LEN {
            return Err(PacketError::HeaderTooLong {
                len: header_len,
                max: INLINE_HEADER_LEN,
            });
        }
        if trailer_len > MAX_TRAILER_LEN {
            return Err(PacketError::TrailerTooLong(trailer_len));
        }
        Ok(InlineLens {
            header: header_len as u8,
            trailer: trailer_len as u8,
        })
    }
}

/// Why a packet could not be assembled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    /// The header stack does not fit the inline header array.
    #[error("header of {len} bytes exceeds the {max}-byte inline header")]
    HeaderTooLong {
        /// The header length asked for.
        len: usize,
        /// The inline capacity.
        max: usize,
    },
    /// The trailer is longer than [`MAX_TRAILER_LEN`] bytes.
    #[error("trailer of {0} bytes exceeds 7 bytes")]
    TrailerTooLong(usize),
}

impl Packet {
    /// Assembles a packet from header bytes, a payload and a trailer (pad and ICRC, or empty).
    pub fn new(header: &[u8], payload: Payload, trailer: &[u8]) -> Result<Packet, PacketError> {
        let mut p = Packet::with_header_len(header.len(), payload)?;
        p.header_mut().copy_from_slice(header);
        p.set_trailer(trailer)?;
        Ok(p)
    }

    /// A packet whose `len` header bytes are zero, to be written in place with
    /// [`Packet::header_mut`] (how the NIC emits headers without a copy).
    #[inline]
    pub fn with_header_len(len: usize, payload: Payload) -> Result<Packet, PacketError> {
        if len > MAX_HEADER_LEN {
            return Err(PacketError::HeaderTooLong {
                len,
                max: MAX_HEADER_LEN,
            });
        }
        Ok(Packet {
            bytes: [0; INLINE_LEN],
            len: frame_len_of(len, &payload, 0),
            header_len: len as u8,
            trailer_len: 0,
            flags: 0,
            payload,
            meta: PacketMeta::default(),
            long: (len > INLINE_HEADER_LEN)
                .then(|| Box::new([0; MAX_HEADER_LEN + MAX_TRAILER_LEN])),
        })
    }

    /// A packet whose header is the first `lens.header` bytes of `bytes` and whose trailer the
    /// `lens.trailer` bytes right after it: how the NIC builds a frame's bytes in one array (in
    /// registers and on the stack) and moves them in, instead of zeroing the packet's and
    /// writing them there through [`Packet::header_mut`]. Infallible (the lengths were checked
    /// by [`InlineLens::new`]), so that the packet is built where the caller keeps it: a
    /// `Result` around it cost a copy of its 128 bytes per frame.
    /// `meta` is given here rather than written afterwards, for the same reason.
    #[inline]
    pub fn from_inline(
        bytes: [u8; INLINE_LEN],
        lens: InlineLens,
        payload: Payload,
        meta: PacketMeta,
    ) -> Packet {
        Packet {
            bytes,
            len: frame_len_of(
                usize::from(lens.header),
                &payload,
                usize::from(lens.trailer),
            ),
            header_len: lens.header,
            trailer_len: lens.trailer,
            flags: 0,
            payload,
            meta,
            long: None,
        }
    }

    /// The storage of header and trailer, whichever holds them (told by the header's length,
    /// so that an inline header never reads the pointer's cache line).
    #[inline]
    fn storage(&self) -> &[u8] {
        if usize::from(self.header_len) <= INLINE_HEADER_LEN {
            return &self.bytes[..];
        }
        match &self.long {
            Some(h) => &h[..],
            None => &self.bytes[..],
        }
    }
    /// The storage of header and trailer, writable.
    #[inline]
    fn storage_mut(&mut self) -> &mut [u8] {
        if usize::from(self.header_len) <= INLINE_HEADER_LEN {
            return &mut self.bytes[..];
        }
        match &mut self.long {
            Some(h) => &mut h[..],
            None => &mut self.bytes[..],
        }
    }

    /// Sets the trailer bytes (a RoCEv2 frame's pad and ICRC).
    pub fn set_trailer(&mut self, trailer: &[u8]) -> Result<(), PacketError> {
        if trailer.len() > MAX_TRAILER_LEN {
            return Err(PacketError::TrailerTooLong(trailer.len()));
        }
        let at = self.header_len as usize;
        // The storage always has MAX_TRAILER_LEN bytes after the longest header it holds.
        self.storage_mut()[at..at + trailer.len()].copy_from_slice(trailer);
        self.trailer_len = trailer.len() as u8;
        self.len = frame_len_of(at, &self.payload, trailer.len());
        Ok(())
    }

    /// True when dropping the packet frees nothing: a timing-mode payload and an inline
    /// header (nearly every frame), so that [`std::mem::forget`] may stand in for the drop.
    /// Kept here, beside the fields: a field that owns memory must be tested here too.
    #[inline(always)]
    pub(crate) fn owns_no_heap(&self) -> bool {
        matches!(self.payload, Payload::Timing(_)) && self.long.is_none()
    }

    /// The header bytes, starting at the Ethernet destination address.
    #[inline]
    pub fn header(&self) -> &[u8] {
        let len = usize::from(self.header_len);
        // Inline (every frame without telemetry): a slice of known bounds, no check, no
        // second test of the length in `storage`.
        if len <= INLINE_HEADER_LEN {
            return &self.bytes[..len];
        }
        self.long_header()
    }
    /// The header bytes, writable (switches rewrite ECN this way).
    #[inline]
    pub fn header_mut(&mut self) -> &mut [u8] {
        let len = usize::from(self.header_len);
        if len <= INLINE_HEADER_LEN {
            return &mut self.bytes[..len];
        }
        self.long_header_mut()
    }
    /// [`Packet::header`] of a header longer than [`INLINE_HEADER_LEN`], out of line.
    #[cold]
    #[inline(never)]
    fn long_header(&self) -> &[u8] {
        let len = usize::from(self.header_len);
        &self.storage()[..len]
    }
    /// [`Packet::header_mut`] of a header longer than [`INLINE_HEADER_LEN`], out of line.
    #[cold]
    #[inline(never)]
    fn long_header_mut(&mut self) -> &mut [u8] {
        let len = usize::from(self.header_len);
        &mut self.storage_mut()[..len]
    }
    /// Grows the header by `n` zero bytes at its end (a switch appending in-band telemetry) and
    /// returns the whole header, writable; `None` beyond [`MAX_HEADER_LEN`]. The trailer moves
    /// behind the new bytes unchanged. The first growth past [`INLINE_HEADER_LEN`] moves header
    /// and trailer into the boxed array.
    pub fn grow_header(&mut self, n: usize) -> Option<&mut [u8]> {
        let old = self.header_len as usize;
        let len = old + n;
        if len > MAX_HEADER_LEN {
            return None;
        }
        let tlen = self.trailer_len as usize;
        let mut trailer = [0; MAX_TRAILER_LEN];
        trailer[..tlen].copy_from_slice(&self.storage()[old..old + tlen]);
        if len > INLINE_HEADER_LEN && self.long.is_none() {
            let mut h = Box::new([0; MAX_HEADER_LEN + MAX_TRAILER_LEN]);
            h[..old].copy_from_slice(&self.bytes[..old]);
            self.long = Some(h);
        }
        // The new length first: it says which storage holds the header.
        self.header_len = len as u8;
        self.len = frame_len_of(len, &self.payload, tlen);
        let s = self.storage_mut();
        s[old..len].fill(0);
        s[len..len + tlen].copy_from_slice(&trailer[..tlen]);
        Some(self.header_mut())
    }
    /// The payload.
    #[inline]
    pub fn payload(&self) -> &Payload {
        &self.payload
    }
    /// The trailer bytes (the pad and the ICRC for RoCEv2; empty otherwise).
    #[inline]
    pub fn trailer(&self) -> &[u8] {
        let at = self.header_len as usize;
        &self.storage()[at..at + self.trailer_len as usize]
    }
    /// Length of the frame without FCS: header + payload + trailer.
    #[inline]
    pub fn frame_len(&self) -> usize {
        self.len as usize
    }
    /// True when the frame took a bit error on its way: the fault flipped bits of it (see
    /// [`crate::fault`]) and the FCS the receiving MAC computes would not match the one sent,
    /// so a receiver that checks the FCS drops it.
    #[inline]
    pub fn is_corrupted(&self) -> bool {
        self.flags & FLAG_CORRUPTED != 0
    }
    /// Marks the frame as corrupted (or not).
    pub fn set_corrupted(&mut self, corrupted: bool) {
        if corrupted {
            self.flags |= FLAG_CORRUPTED;
        } else {
            self.flags &= !FLAG_CORRUPTED;
        }
    }

    /// Replaces the payload by one of the same length: how bit errors reach the payload's bytes
    /// (the old payload may be shared with the sender's buffer, so it is never written in
    /// place). Returns false, changing nothing, if the length differs.
    pub fn replace_payload(&mut self, payload: Payload) -> bool {
        if payload.len() != self.payload.len() {
            return false;
        }
        self.payload = payload;
        true
    }

    /// The whole frame as bytes (payload zeros in timing mode); for captures and tests, not the
    /// hot path.
    pub fn to_frame_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.frame_len());
        v.extend_from_slice(self.header());
        match &self.payload {
            Payload::Data(b) => v.extend_from_slice(b),
            Payload::Timing(n) => v.resize(v.len() + *n as usize, 0),
        }
        v.extend_from_slice(self.trailer());
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owns_no_heap_only_for_timing_payloads_with_inline_headers() {
        let inline = Packet::new(&[1; 58], Payload::Timing(1000), &[9; 4]).unwrap();
        assert!(inline.owns_no_heap());
        let data = Packet::new(&[1; 58], Payload::data(Bytes::from_static(b"abc")), &[]).unwrap();
        assert!(!data.owns_no_heap());
        let long = Packet::new(&[1; INLINE_HEADER_LEN + 1], Payload::Timing(10), &[]).unwrap();
        assert!(!long.owns_no_heap());
    }

    #[test]
    fn frame_len_counts_all_parts() {
        let p = Packet::new(&[1; 58], Payload::Timing(1000), &[9; 4]).unwrap();
        assert_eq!(p.frame_len(), 1062);
        assert_eq!(p.to_frame_bytes().len(), 1062);
        let d = Packet::new(&[1; 10], Payload::data(Bytes::from_static(b"abc")), &[]).unwrap();
        assert_eq!(&d.to_frame_bytes()[10..], b"abc");
    }

    #[test]
    fn what_a_switch_reads_is_in_the_first_cache_line() {
        // Lengths, flags, payload and the header up to the UDP ports (byte 38).
        assert!(std::mem::offset_of!(Packet, bytes) + 38 <= 64);
        assert!(std::mem::offset_of!(Packet, flags) < 64);
        assert!(std::mem::offset_of!(Packet, payload) + 16 <= 64);
        // The slab's `Option<Packet>` costs nothing over the packet.
        assert_eq!(std::mem::size_of::<Option<Packet>>(), 128);
    }

    #[test]
    fn packet_stays_small_whatever_its_header() {
        // Telemetry does not grow every packet (inline, it made them 184 bytes and every run
        // ~13% slower), and beyond 128 bytes every move of a packet became a memcpy call.
        assert!(
            std::mem::size_of::<Packet>() <= 128,
            "{}",
            std::mem::size_of::<Packet>()
        );
    }

    #[test]
    fn a_long_header_moves_out_of_line_and_keeps_its_bytes() {
        let mut p = Packet::new(&[7; 70], Payload::Timing(100), &[1, 2, 3, 4]).unwrap();
        let h = p.grow_header(22).unwrap();
        assert_eq!(h.len(), 92);
        assert!(h[..70].iter().all(|&b| b == 7) && h[70..].iter().all(|&b| b == 0));
        p.header_mut()[91] = 9;
        assert_eq!(p.header()[91], 9);
        assert_eq!(p.frame_len(), 92 + 100 + 4);
        let q = p.clone();
        assert_eq!(q.header(), p.header());
        assert!(p.grow_header(MAX_HEADER_LEN).is_none());
        let long = Packet::new(&[5; MAX_HEADER_LEN], Payload::Timing(0), &[]).unwrap();
        assert_eq!(long.header(), &[5; MAX_HEADER_LEN][..]);
    }

    #[test]
    fn trailer_follows_the_header_as_it_grows() {
        let mut p = Packet::new(&[7; 60], Payload::Timing(10), &[1, 2, 3, 4]).unwrap();
        assert_eq!(p.trailer(), &[1, 2, 3, 4]);
        p.grow_header(14).unwrap();
        assert_eq!((p.header().len(), p.trailer()), (74, &[1, 2, 3, 4][..]));
        assert!(p.header()[60..].iter().all(|&b| b == 0));
        p.grow_header(4).unwrap();
        assert_eq!((p.header().len(), p.trailer()), (78, &[1, 2, 3, 4][..]));
        assert!(p.header()[..60].iter().all(|&b| b == 7));
        p.set_trailer(&[9; 4]).unwrap();
        let f = p.to_frame_bytes();
        assert_eq!((f.len(), &f[88..]), (92, &[9; 4][..]));
    }

    #[test]
    fn from_inline_is_new_of_the_same_bytes() {
        let mut bytes = [0; INLINE_LEN];
        bytes[..58].fill(3);
        bytes[58..62].copy_from_slice(&[1, 2, 3, 4]);
        let lens = InlineLens::new(58, 4).unwrap();
        let p = Packet::from_inline(bytes, lens, Payload::Timing(100), PacketMeta::default());
        let q = Packet::new(&[3; 58], Payload::Timing(100), &[1, 2, 3, 4]).unwrap();
        assert_eq!(p.to_frame_bytes(), q.to_frame_bytes());
        assert_eq!((p.header(), p.trailer()), (q.header(), q.trailer()));
        assert!(InlineLens::new(INLINE_HEADER_LEN + 1, 0).is_err());
        assert!(InlineLens::new(10, MAX_TRAILER_LEN + 1).is_err());
    }

    #[test]
    fn corrupted_flag_is_kept_by_clones() {
        let mut p = Packet::new(&[0; 14], Payload::Timing(1), &[]).unwrap();
        assert!(!p.is_corrupted());
        p.set_corrupted(true);
        assert!(p.clone().is_corrupted());
        p.set_corrupted(false);
        assert!(!p.is_corrupted());
    }

    #[test]
    fn rejects_oversized_header() {
        assert!(Packet::new(&[0; MAX_HEADER_LEN + 1], Payload::Timing(0), &[]).is_err());
        assert!(Packet::new(&[0; 8], Payload::Timing(0), &[0; MAX_TRAILER_LEN + 1]).is_err());
        // A pad of three and an ICRC fit, behind the longest inline header and a long one.
        let mut p = Packet::new(&[1; INLINE_HEADER_LEN], Payload::Timing(5), &[2; 7]).unwrap();
        assert_eq!(
            (p.trailer(), p.frame_len()),
            (&[2; 7][..], INLINE_HEADER_LEN + 12)
        );
        p.grow_header(MAX_HEADER_LEN - INLINE_HEADER_LEN).unwrap();
        assert_eq!(p.trailer(), &[2; 7][..]);
    }
}
