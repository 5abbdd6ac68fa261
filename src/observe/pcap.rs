//! Classic pcap files (the format tcpdump and Wireshark read everywhere): link type Ethernet,
//! nanosecond timestamps (magic `0xa1b23c4d`), virtual time as the clock.
//!
//! A frame is written as captured: whole in data mode; headers only in timing mode, with the
//! original length in the record so tools report it as truncated ("captured length < frame
//! length"). No FCS. Virtual time is in picoseconds; the file keeps whole nanoseconds (the
//! record order still follows the exact time).

use std::io::{BufWriter, Write};
use std::path::Path;

use fabemu_fabric::engine::CapturedFrame;

use super::{io_err, ObserveError};

/// LINKTYPE_ETHERNET.
pub const LINKTYPE_ETHERNET: u32 = 1;
/// The magic number of a classic pcap with nanosecond timestamps.
pub const MAGIC_NANOS: u32 = 0xa1b2_3c4d;
/// Snapshot length announced in the header (larger than any frame fabemu builds).
pub const SNAPLEN: u32 = 262_144;

/// Writes `frames` as a pcap stream.
pub fn write<W: Write>(mut w: W, frames: &[CapturedFrame]) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(24);
    head.extend_from_slice(&MAGIC_NANOS.to_le_bytes());
    head.extend_from_slice(&2u16.to_le_bytes());
    head.extend_from_slice(&4u16.to_le_bytes());
    head.extend_from_slice(&0i32.to_le_bytes()); // thiszone
    head.extend_from_slice(&0u32.to_le_bytes()); // sigfigs
    head.extend_from_slice(&SNAPLEN.to_le_bytes());
    head.extend_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
    w.write_all(&head)?;
    for f in frames {
        let ns = f.time.ps() / 1_000;
        let caplen = f.data.len().min(SNAPLEN as usize);
        let mut rec = [0u8; 16];
        rec[0..4].copy_from_slice(&((ns / 1_000_000_000) as u32).to_le_bytes());
        rec[4..8].copy_from_slice(&((ns % 1_000_000_000) as u32).to_le_bytes());
        rec[8..12].copy_from_slice(&(caplen as u32).to_le_bytes());
        rec[12..16].copy_from_slice(&f.orig_len.max(caplen as u32).to_le_bytes());
        w.write_all(&rec)?;
        w.write_all(&f.data[..caplen])?;
    }
    w.flush()
}

/// Writes `frames` to the file `path`.
pub fn write_file(path: &Path, frames: &[CapturedFrame]) -> Result<(), ObserveError> {
    let file = std::fs::File::create(path).map_err(io_err(path))?;
    write(BufWriter::new(file), frames).map_err(io_err(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabemu_fabric::engine::CaptureDirection;
    use fabemu_fabric::units::Time;

    #[test]
    fn header_and_record_layout() {
        let f = CapturedFrame {
            time: Time(2_000_000_003_500), // 2 s + 3.5 ns: kept as 2 s + 3 ns
            actor: 0,
            port: 0,
            direction: CaptureDirection::Out,
            origin: 0,
            orig_len: 100,
            data: vec![7; 60],
        };
        let mut buf = Vec::new();
        if let Err(e) = write(&mut buf, &[f]) {
            panic!("{e}");
        }
        assert_eq!(buf.len(), 24 + 16 + 60);
        assert_eq!(&buf[0..4], &[0x4d, 0x3c, 0xb2, 0xa1]);
        assert_eq!(&buf[20..24], &[1, 0, 0, 0]);
        let word = |i: usize| u32::from_le_bytes([buf[i], buf[i + 1], buf[i + 2], buf[i + 3]]);
        assert_eq!((word(24), word(28), word(32), word(36)), (2, 3, 60, 100));
    }
}
