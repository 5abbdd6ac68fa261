//! NICs driven alone through [`Recorder`]s, without an engine: the test carries each frame one
//! NIC transmits to the other at the time its last bit arrives.

use std::sync::Arc;

use super::*;
use crate::engine::{Recorder, Sent};
use crate::link::{Channel, EthernetOverhead, Rate};
use crate::units::ByteSize;

/// Picoseconds per byte at 100 Gb/s.
const PS_PER_BYTE: u64 = 80;

fn channel() -> Channel {
    Channel {
        rate: Rate::new(Bandwidth::from_gbps(100)),
        latency: Time::from_us(1),
    }
}

/// Host `index` of two, one port, sending `sends`, started in its own recorder.
fn lone_host(index: u32, sends: Vec<MessageSpec>) -> (Host<MessageApp>, Recorder) {
    let dir = Arc::new(HostDirectory::new(
        (0..2).map(HostDirectory::default_addr).collect(),
    ));
    let cfg = NicConfig {
        mtu: ByteSize(1024),
        ..NicConfig::default()
    };
    let app = MessageApp::new(1, false, sends);
    let mut host = Host::new(index, dir, Arc::default(), 1, cfg, 1, app).unwrap();
    let mut rec = Recorder::new(index, &[channel()]);
    host.on_start(&mut rec);
    (host, rec)
}

/// Runs the host's own events (completions, timers) up to `until`.
fn run_until(host: &mut Host<MessageApp>, rec: &mut Recorder, until: Time) {
    while let Some(ev) = rec.next_event(until) {
        host.on_event(ev, rec);
    }
    rec.advance(until);
}

/// Gives `to` the frames `sent` (by its peer) as they arrive.
fn carry(sent: Vec<Sent>, to: &mut Host<MessageApp>, rec: &mut Recorder) {
    for s in sent {
        run_until(to, rec, s.arrive);
        let ev = rec.arrival(0, s.packet, to.holds_frames());
        to.on_event(ev, rec);
    }
}

/// A 10,000-byte message posted at 1 us leaves as ten frames (nine of 1,024 bytes of payload
/// and one of 784) back to back at the link's rate, each for its own serialization time;
/// the receiver acknowledges each one, and the last acknowledgement completes the send when
/// it arrives.
#[test]
fn a_message_leaves_at_link_rate_and_its_last_ack_completes_it() {
    let spec = MessageSpec {
        tag: 5,
        src: 0,
        dst: 1,
        len: 10_000,
        start: Time::from_us(1),
        class: 0,
    };
    let (mut tx, mut tx_rec) = lone_host(0, vec![spec]);
    let (mut rx, mut rx_rec) = lone_host(1, Vec::new());
    // The last frame is out by 1.9 us; its acknowledgement cannot be back before 3 us.
    run_until(&mut tx, &mut tx_rec, Time::from_ns(2_500));
    let data = tx_rec.take_sent();
    let payloads: Vec<u64> = data
        .iter()
        .map(|s| s.packet.payload().len() as u64)
        .collect();
    assert_eq!(payloads, [[1024; 9].as_slice(), &[784]].concat());
    let mut at = Time::from_us(1);
    for s in &data {
        assert_eq!(s.start, at);
        let wire = EthernetOverhead::default().wire_bytes(s.packet.frame_len());
        assert_eq!(s.done, at + Time(wire * PS_PER_BYTE));
        at = s.done;
    }
    assert_eq!(tx.app.sends[0].acked_at, None);

    carry(data, &mut rx, &mut rx_rec);
    run_until(&mut rx, &mut rx_rec, Time::from_us(10));
    assert_eq!(rx.app.received.len(), 1);
    assert_eq!(rx.app.received[0].len, 10_000);
    let acks = rx_rec.take_sent();
    assert_eq!(acks.len(), 10, "ack_every 1");
    let last = acks.last().map(|s| s.arrive);

    carry(acks, &mut tx, &mut tx_rec);
    assert_eq!(tx.app.sends[0].acked_at, last);
    assert!(tx.nic.qps.iter().all(Qp::idle));
}
