//! pcapng files (what Wireshark writes by default): one section, one interface per captured
//! port, each frame tagged with its port and its direction, virtual time in picoseconds.
//!
//! A classic pcap has one link and no direction: a capture of several ports shows every frame
//! twice (leaving one port, arriving at the next) with nothing to tell the copies apart. In
//! pcapng each port is an Interface Description Block named `NODE:PORT` (the `--capture`
//! syntax) and described as the link it is on; each Enhanced Packet Block names its interface
//! and carries the `epb_flags` direction bits (inbound or outbound), so Wireshark can show and
//! filter both (`frame.interface_name`, `frame.packet_flags_direction`).
//!
//! Timestamps: `if_tsresol` = 12 (units of 10^-12 s) on every interface, so the file keeps the
//! exact virtual time, not whole nanoseconds as a classic pcap does; 64 bits of picoseconds
//! last 213 days. The payload rules are the classic writer's (see [`super::pcap`]).
//!
//! Written by hand (the format is a few fixed little-endian blocks): the pcapng crates
//! measure time in `std::time::Duration`, whose nanoseconds cannot carry picoseconds.

use std::io::{BufWriter, Write};
use std::path::Path;

use fabemu_fabric::engine::{ActorId, CaptureDirection, CapturedFrame};

use super::pcap::{LINKTYPE_ETHERNET, SNAPLEN};
use super::{io_err, ObserveError};

/// Section Header Block type.
const SHB: u32 = 0x0A0D_0D0A;
/// Interface Description Block type.
const IDB: u32 = 1;
/// Enhanced Packet Block type.
const EPB: u32 = 6;
/// The byte-order magic (written little-endian, as every field).
const BYTE_ORDER_MAGIC: u32 = 0x1A2B_3C4D;
/// `shb_userappl`: the application that wrote the section.
const OPT_SHB_USERAPPL: u16 = 4;
/// `if_name`, `if_description`, `if_tsresol`.
const OPT_IF_NAME: u16 = 2;
const OPT_IF_DESCRIPTION: u16 = 3;
const OPT_IF_TSRESOL: u16 = 9;
/// `epb_flags`: bits 0-1 are the direction (1 inbound, 2 outbound).
const OPT_EPB_FLAGS: u16 = 2;
/// `if_tsresol` = 12: timestamps count units of 10^-12 s (the MSB clear means a power of 10).
pub const TSRESOL_PICOSECONDS: u8 = 12;
/// `epb_flags` direction value of a frame arriving at the tapped port.
pub const FLAGS_INBOUND: u32 = 0b01;
/// `epb_flags` direction value of a frame leaving the tapped port.
pub const FLAGS_OUTBOUND: u32 = 0b10;

/// One captured port as an interface of the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    /// The tapped actor.
    pub actor: ActorId,
    /// The tapped port of that actor.
    pub port: usize,
    /// `if_name`, e.g. `leaf0:2`.
    pub name: String,
    /// `if_description`, e.g. `leaf0 port 2 to spine1`.
    pub description: String,
}

/// True when `path` names a pcapng file (extension `.pcapng`, any case); anything else is
/// written as a classic pcap.
pub fn is_pcapng(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("pcapng"))
}

/// Appends option `code` with `value`, padded to 32 bits.
fn option(block: &mut Vec<u8>, code: u16, value: &[u8]) {
    block.extend_from_slice(&code.to_le_bytes());
    block.extend_from_slice(&(value.len() as u16).to_le_bytes());
    block.extend_from_slice(value);
    pad(block);
}

fn pad(block: &mut Vec<u8>) {
    block.resize(block.len().next_multiple_of(4), 0);
}

/// Writes a block: type, total length, `body` (already padded, options ended), total length.
fn block<W: Write>(w: &mut W, kind: u32, body: &[u8]) -> std::io::Result<()> {
    let total = (body.len() + 12) as u32;
    w.write_all(&kind.to_le_bytes())?;
    w.write_all(&total.to_le_bytes())?;
    w.write_all(body)?;
    w.write_all(&total.to_le_bytes())
}

/// Writes `frames` as a pcapng stream with one interface per entry of `interfaces`, in that
/// order (interface id = index). A frame whose port is not among `interfaces` is an error of
/// the caller: it gets an interface of its own, appended and named by its numbers, rather
/// than being lost.
pub fn write<W: Write>(
    mut w: W,
    interfaces: &[Interface],
    frames: &[CapturedFrame],
) -> std::io::Result<()> {
    let mut ifaces: Vec<Interface> = interfaces.to_vec();
    for f in frames {
        if !ifaces
            .iter()
            .any(|i| (i.actor, i.port) == (f.actor, f.port))
        {
            ifaces.push(Interface {
                actor: f.actor,
                port: f.port,
                name: format!("actor{}:{}", f.actor, f.port),
                description: String::new(),
            });
        }
    }
    // Interface ids by (actor, port), for a binary search per frame.
    let mut ids: Vec<((ActorId, usize), u32)> = ifaces
        .iter()
        .enumerate()
        .map(|(i, f)| ((f.actor, f.port), i as u32))
        .collect();
    ids.sort_unstable();

    let mut body = Vec::with_capacity(64);
    body.extend_from_slice(&BYTE_ORDER_MAGIC.to_le_bytes());
    body.extend_from_slice(&1u16.to_le_bytes()); // major version
    body.extend_from_slice(&0u16.to_le_bytes()); // minor version
    body.extend_from_slice(&(-1i64).to_le_bytes()); // section length: not given
    let app = concat!("fabemu ", env!("CARGO_PKG_VERSION"));
    option(&mut body, OPT_SHB_USERAPPL, app.as_bytes());
    option(&mut body, 0, &[]); // opt_endofopt
    block(&mut w, SHB, &body)?;

    for i in &ifaces {
        body.clear();
        body.extend_from_slice(&(LINKTYPE_ETHERNET as u16).to_le_bytes());
        body.extend_from_slice(&0u16.to_le_bytes()); // reserved
        body.extend_from_slice(&SNAPLEN.to_le_bytes());
        option(&mut body, OPT_IF_NAME, i.name.as_bytes());
        if !i.description.is_empty() {
            option(&mut body, OPT_IF_DESCRIPTION, i.description.as_bytes());
        }
        option(&mut body, OPT_IF_TSRESOL, &[TSRESOL_PICOSECONDS]);
        option(&mut body, 0, &[]);
        block(&mut w, IDB, &body)?;
    }

    for f in frames {
        let id = ids
            .binary_search_by_key(&(f.actor, f.port), |x| x.0)
            .map_or(0, |k| ids[k].1);
        let ps = f.time.ps();
        let caplen = f.data.len().min(SNAPLEN as usize);
        body.clear();
        body.extend_from_slice(&id.to_le_bytes());
        body.extend_from_slice(&((ps >> 32) as u32).to_le_bytes());
        body.extend_from_slice(&(ps as u32).to_le_bytes());
        body.extend_from_slice(&(caplen as u32).to_le_bytes());
        body.extend_from_slice(&f.orig_len.max(caplen as u32).to_le_bytes());
        body.extend_from_slice(&f.data[..caplen]);
        pad(&mut body);
        let flags = match f.direction {
            CaptureDirection::In => FLAGS_INBOUND,
            CaptureDirection::Out => FLAGS_OUTBOUND,
        };
        option(&mut body, OPT_EPB_FLAGS, &flags.to_le_bytes());
        option(&mut body, 0, &[]);
        block(&mut w, EPB, &body)?;
    }
    w.flush()
}

/// Writes `frames` to the file `path` (see [`write`](fn@write)).
pub fn write_file(
    path: &Path,
    interfaces: &[Interface],
    frames: &[CapturedFrame],
) -> Result<(), ObserveError> {
    let file = std::fs::File::create(path).map_err(io_err(path))?;
    write(BufWriter::new(file), interfaces, frames).map_err(io_err(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabemu_fabric::units::Time;

    fn word(b: &[u8], i: usize) -> u32 {
        u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
    }

    #[test]
    fn blocks_are_aligned_and_carry_port_direction_and_picoseconds() {
        let iface = |actor, port, name: &str| Interface {
            actor,
            port,
            name: name.into(),
            description: String::new(),
        };
        let f = CapturedFrame {
            time: Time(5_000_000_000_003), // 5 s + 3 ps: kept exactly
            actor: 4,
            port: 1,
            direction: CaptureDirection::In,
            origin: 0,
            orig_len: 61,
            data: vec![7; 61],
        };
        let mut buf = Vec::new();
        if let Err(e) = write(&mut buf, &[iface(0, 0, "h0:0"), iface(4, 1, "s:1")], &[f]) {
            panic!("{e}");
        }
        // Walk the blocks: each length is a multiple of 4 and repeated at its end.
        let mut at = 0;
        let mut kinds = Vec::new();
        while at < buf.len() {
            let (kind, len) = (word(&buf, at), word(&buf, at + 4) as usize);
            assert_eq!(len % 4, 0);
            assert_eq!(word(&buf, at + len - 4) as usize, len);
            kinds.push((kind, at));
            at += len;
        }
        assert_eq!(at, buf.len());
        let k: Vec<u32> = kinds.iter().map(|k| k.0).collect();
        assert_eq!(k, vec![SHB, IDB, IDB, EPB]);
        let epb = kinds[3].1;
        assert_eq!(word(&buf, epb + 8), 1, "interface id of s:1");
        let ps = (u64::from(word(&buf, epb + 12)) << 32) | u64::from(word(&buf, epb + 16));
        assert_eq!(ps, 5_000_000_000_003);
        assert_eq!((word(&buf, epb + 20), word(&buf, epb + 24)), (61, 61));
        // 61 data bytes padded to 64, then epb_flags (code 2, length 4) = inbound.
        let opt = epb + 28 + 64;
        assert_eq!(word(&buf, opt), 2 | (4 << 16));
        assert_eq!(word(&buf, opt + 4), FLAGS_INBOUND);
    }

    #[test]
    fn the_extension_chooses_the_format() {
        assert!(is_pcapng(Path::new("x/cap.pcapng")));
        assert!(is_pcapng(Path::new("CAP.PCAPNG")));
        assert!(!is_pcapng(Path::new("cap.pcap")));
        assert!(!is_pcapng(Path::new("pcapng")));
    }
}
