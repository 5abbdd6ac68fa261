//! A host's TAP device: the file descriptor through which fabemu reads the frames a host's
//! programs send and writes the frames that arrive for it.
//!
//! # Interface
//! A [`Tap`] is made by [`Namespaces::create`](super::netns::Namespaces::create), one per host,
//! and already sits in the host's namespace as `eth0`. Every read returns one whole Ethernet
//! frame (destination MAC first, no preamble or FCS, at most [`Tap::max_frame_len`] bytes: the
//! device has no offloads, so the kernel never hands over a segment larger than the MTU and all
//! checksums are complete); every write injects one whole frame.
//! - [`Tap::try_recv`]: non-blocking read, `Ok(None)` when nothing is waiting.
//! - [`readable`]: which of several TAPs have a frame, waiting for one up to a timeout.
//! - [`Tap::send`]: non-blocking write, callable from any thread (`Tap` is `Send + Sync`).
//!
//! The descriptor is non-blocking and registered with no event loop: the pacing loop reads it
//! itself and sleeps in [`readable`] when idle. In an event loop's epoll set every frame a
//! program sends would wake that loop's thread, which then hands the frame on to the pacing
//! loop: one more wake-up (tens of microseconds on a virtual machine) per frame.
//!
//! Once the namespace is deleted, the device is gone and reads and writes fail (`EBADFD`).
//! Dropping the `Tap` closes the descriptor, which deletes the device if it still exists.

use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::time::Duration;

use nix::poll::{PollFd, PollFlags};
use nix::sys::time::TimeSpec;

use super::netns::{HostNet, NetError};

/// Ethernet header bytes before the IP packet (no VLAN tag: fabemu's hosts send none).
pub const ETH_HEADER_LEN: usize = 14;

/// One host's TAP device (see the module doc).
pub struct Tap {
    /// The TAP, non-blocking.
    dev: tun_rs::SyncDevice,
    rank: usize,
    namespace: String,
    initial_name: String,
    mac: [u8; 6],
    mtu: u32,
}

impl std::fmt::Debug for Tap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tap")
            .field("rank", &self.rank)
            .field("namespace", &self.namespace)
            .field("fd", &self.dev.as_raw_fd())
            .finish()
    }
}

impl Tap {
    /// Creates a TAP named `name` in the current namespace for `host`, meant to be moved into
    /// `namespace` (layer 2, no packet information, no offloads, non-blocking, link down).
    pub(super) fn create(name: &str, host: &HostNet, namespace: &str) -> Result<Tap, NetError> {
        let err = |source: io::Error| NetError::Io {
            what: format!("creating TAP device {name} for rank {}", host.rank),
            source,
        };
        let dev = tun_rs::DeviceBuilder::new()
            .name(name)
            .layer(tun_rs::Layer::L2)
            .packet_information(false)
            .offload(false)
            // Down until configured in its namespace: up here, it would start IPv6 (router
            // solicitations, MLD) under this namespace's settings, and the frames would wait
            // in its queue to be read later.
            .enable(false)
            .build_sync()
            .map_err(err)?;
        dev.set_nonblocking(true).map_err(err)?;
        Ok(Tap {
            dev,
            rank: host.rank,
            namespace: namespace.to_string(),
            initial_name: name.to_string(),
            mac: host.mac,
            mtu: host.mtu,
        })
    }

    /// The host's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The namespace the TAP lives in (as `eth0`).
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The name the device had when it was created, before it became `eth0`.
    pub fn initial_name(&self) -> &str {
        &self.initial_name
    }

    /// The host's MAC address (the source of the frames it sends).
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// The interface's MTU.
    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    /// The longest frame a read can return: MTU + Ethernet header. A buffer this long never
    /// truncates a frame.
    pub fn max_frame_len(&self) -> usize {
        self.mtu as usize + ETH_HEADER_LEN
    }

    /// Reads one frame if one is waiting: `Ok(Some(len))`, or `Ok(None)` when none is.
    pub fn try_recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        match self.dev.recv(buf) {
            Ok(n) => Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Writes one frame into the host's interface, as if it had arrived on the wire. Never
    /// blocks; a full device queue is an error of kind `WouldBlock`.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        let n = self.dev.send(frame)?;
        if n == frame.len() {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("TAP took {n} of {} bytes", frame.len()),
            ))
        }
    }
}

/// Which of `taps` have a frame to read, waiting at most `timeout` for one (zero: a look
/// without waiting). An interrupted wait returns early with none ready. The timeout has
/// nanosecond resolution, plus the calling thread's timer slack.
pub fn readable(taps: &[&Tap], timeout: Duration) -> io::Result<Vec<bool>> {
    let mut fds: Vec<PollFd<'_>> = taps
        .iter()
        .map(|t| PollFd::new(t.dev.as_fd(), PollFlags::POLLIN))
        .collect();
    match nix::poll::ppoll(&mut fds, Some(TimeSpec::from_duration(timeout)), None) {
        Ok(_) => Ok(fds
            .iter()
            .map(|f| f.revents().is_some_and(|r| r.contains(PollFlags::POLLIN)))
            .collect()),
        Err(nix::errno::Errno::EINTR) => Ok(vec![false; taps.len()]),
        Err(e) => Err(io::Error::from(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tap_can_be_shared_between_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<Tap>();
    }
}
