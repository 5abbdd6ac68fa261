//! The point-to-point workload: each host sends its messages at their start times and records
//! when every send was acknowledged and every receive delivered; in data mode the receiver
//! checks each message's bytes against the pattern the sender wrote.

use bytes::Bytes;

use super::{Application, ClassId, Completion, Transport};
use crate::mix::mix;
#[cfg(doc)]
use crate::transport::ClassTable;
use crate::units::Time;

/// One message of the workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageSpec {
    /// Workload-wide message number (also its tag; the receiver sees its low 32 bits).
    pub tag: u64,
    /// Sending host.
    pub src: u32,
    /// Receiving host.
    pub dst: u32,
    /// Size in bytes.
    pub len: u64,
    /// When the sender posts it.
    pub start: Time,
    /// The traffic class it is sent in (its number in the run's [`ClassTable`]; 0: the
    /// default).
    pub class: ClassId,
}

/// What happened to a message on the sending side.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendRecord {
    /// The message.
    pub spec: MessageSpec,
    /// Whether the NIC accepted the post (false: no route to the destination).
    pub posted: bool,
    /// When the last packet was acknowledged.
    pub acked_at: Option<Time>,
}

/// A message delivered to this host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecvRecord {
    /// Sending host.
    pub src: u32,
    /// The tag's low 32 bits (RDMA immediate).
    pub imm: u32,
    /// Bytes received.
    pub len: u64,
    /// When the last byte arrived.
    pub delivered_at: Time,
    /// Data mode: whether the bytes equal what the sender wrote. `None` in timing mode.
    pub data_ok: Option<bool>,
}

/// The bytes of message `tag` in data mode: a pseudo-random pattern from the seed, so the
/// receiver can check them without a copy of the sender's buffer.
pub fn message_bytes(seed: u64, tag: u64, len: u64) -> Bytes {
    let mut v = vec![0u8; len as usize];
    let base = mix(seed ^ mix(tag));
    for (i, chunk) in v.chunks_mut(8).enumerate() {
        let w = mix(base.wrapping_add(i as u64)).to_le_bytes();
        chunk.copy_from_slice(&w[..chunk.len()]);
    }
    Bytes::from(v)
}

/// True when `data` is exactly message `tag`'s pattern ([`message_bytes`]), checked word by
/// word without building a copy.
pub fn message_bytes_match(seed: u64, tag: u64, data: &[u8]) -> bool {
    let base = mix(seed ^ mix(tag));
    let words = data.chunks_exact(8);
    let tail = words.remainder();
    let n = words.len();
    let body_ok = words.enumerate().all(|(i, chunk)| {
        let mut w = [0u8; 8];
        w.copy_from_slice(chunk);
        u64::from_le_bytes(w) == mix(base.wrapping_add(i as u64))
    });
    body_ok && tail == &mix(base.wrapping_add(n as u64)).to_le_bytes()[..tail.len()]
}

/// Sends a host's share of a point-to-point workload.
#[derive(Clone, Debug, Default)]
pub struct MessageApp {
    seed: u64,
    data_mode: bool,
    /// This host's sends, in the order given.
    pub sends: Vec<SendRecord>,
    /// Messages delivered to this host, in arrival order.
    pub received: Vec<RecvRecord>,
}

impl MessageApp {
    /// A workload app sending `sends` (the messages whose `src` is this host).
    pub fn new(seed: u64, data_mode: bool, sends: Vec<MessageSpec>) -> MessageApp {
        MessageApp {
            seed,
            data_mode,
            sends: sends
                .into_iter()
                .map(|spec| SendRecord {
                    spec,
                    posted: false,
                    acked_at: None,
                })
                .collect(),
            received: Vec::new(),
        }
    }
}

impl Application for MessageApp {
    fn start(&mut self, api: &mut dyn Transport) {
        for (i, s) in self.sends.iter().enumerate() {
            api.set_timer(s.spec.start, i as u64);
        }
    }

    fn on_timer(&mut self, token: u64, api: &mut dyn Transport) {
        let Some(rec) = self.sends.get_mut(token as usize) else {
            return;
        };
        let s = &rec.spec;
        let data = self
            .data_mode
            .then(|| message_bytes(self.seed, s.tag, s.len));
        rec.posted = api.post_send_in(s.dst, s.tag, s.len, data, s.class);
    }

    fn on_completion(&mut self, c: Completion, api: &mut dyn Transport) {
        match c {
            Completion::SendDone { tag, .. } => {
                if let Some(r) = self
                    .sends
                    .iter_mut()
                    .find(|r| r.spec.tag == tag && r.acked_at.is_none())
                {
                    r.acked_at = Some(api.now());
                }
            }
            Completion::Received {
                src,
                imm,
                len,
                data,
            } => {
                let data_ok = data.map(|d| {
                    d.len() as u64 == len && message_bytes_match(self.seed, imm as u64, &d)
                });
                self.received.push(RecvRecord {
                    src,
                    imm,
                    len,
                    delivered_at: api.now(),
                    data_ok,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_is_deterministic_and_tag_specific() {
        assert_eq!(message_bytes(1, 2, 13), message_bytes(1, 2, 13));
        assert_ne!(message_bytes(1, 2, 13), message_bytes(1, 3, 13));
        assert_eq!(message_bytes(1, 2, 13).len(), 13);
        assert_eq!(&message_bytes(1, 2, 20)[..13], &message_bytes(1, 2, 13)[..]);
        let m = message_bytes(5, 9, 1001);
        assert!(message_bytes_match(5, 9, &m));
        let mut bad = m.to_vec();
        bad[1000] ^= 1;
        assert!(!message_bytes_match(5, 9, &bad));
        assert!(!message_bytes_match(5, 10, &m));
    }
}
