"""UDP ping-pong between rank 0 and rank 1: prints the median round-trip time.

Run inside `fabemu emulate` (it sets RANK and MASTER_ADDR):
    fabemu emulate examples/emulate/two_hosts.yaml -- python3 examples/emulate/udp_pingpong.py

PING_FROM (default 1) names the rank that pings rank 0 instead of rank 1 (on a ring, a host
whose frames other hosts relay: `PING_FROM=2` on `ring4.yaml`); the other ranks do nothing.

PINGS (default 50) round trips of PING_BYTES (64) bytes, 10 ms apart. With PING_SPIN=1 both
ranks busy-poll a non-blocking socket (yielding the core at every turn) instead of sleeping in
`recvfrom`, and the pings go back to back, as latency benchmarks (netperf's UDP_RR, sockperf)
measure: a sleeping process takes tens of microseconds to wake on a virtual machine.

With PING_TRACE=1 every rank also prints its CLOCK_MONOTONIC stamps per ping (`ping I SENT
RECEIVED` on rank 1, `echo I RECEIVED SENT` on rank 0; SENT is taken just before `sendto`), which `rtt_breakdown.py` lines up
with fabemu's own trace (FABEMU_EMULATE_TRACE).
"""
import os
import socket
import statistics
import sys
import time

N = int(os.environ.get("PINGS", "50"))
SIZE = int(os.environ.get("PING_BYTES", "64"))
SPIN = os.environ.get("PING_SPIN") == "1"
YIELD = os.environ.get("PING_YIELD", "1") == "1"
PORT = 40000
TRACE = os.environ.get("PING_TRACE") == "1"
stamp = time.monotonic_ns  # CLOCK_MONOTONIC, as fabemu's trace
FROM = int(os.environ.get("PING_FROM", "1"))
rank = int(os.environ["RANK"])
peer0 = os.environ["MASTER_ADDR"]

s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)


def receive(timeout):
    """The next datagram and its sender; socket.timeout after `timeout` seconds."""
    if not SPIN:
        s.settimeout(timeout)
        return s.recvfrom(65536)
    deadline = time.monotonic() + timeout
    while True:
        try:
            return s.recvfrom(65536)
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise socket.timeout()
            if YIELD:
                os.sched_yield()


if SPIN:
    s.setblocking(False)
if rank == 0:
    s.bind(("0.0.0.0", PORT))
    for i in range(N + 1):
        data, addr = receive(30)
        got = stamp()
        if data == b"end":
            break
        answer = stamp()
        s.sendto(data, addr)
        if TRACE:
            print(f"echo {i} {got} {answer}")
elif rank == FROM:
    payload = b"x" * SIZE
    rtts = []
    time.sleep(0.3)  # let rank 0 bind
    stamps = []
    for i in range(N):
        t = time.perf_counter()
        sent = stamp()
        s.sendto(payload, (peer0, PORT))
        # The first ping may find rank 0 not yet bound on a busy machine: sent again.
        for _ in range(20 if i == 0 else 1):
            try:
                receive(1 if i == 0 else 5)
                break
            except socket.timeout:
                if i > 0:
                    raise
                t = time.perf_counter()
                sent = stamp()
                s.sendto(payload, (peer0, PORT))
        else:
            sys.exit(2)  # no answer at all
        got = stamp()
        rtts.append(time.perf_counter() - t)
        stamps.append((sent, got))
        if not SPIN:
            time.sleep(0.01)
    if TRACE:
        for i, (sent, got) in enumerate(stamps):
            print(f"ping {i} {sent} {got}")
    s.sendto(b"end", (peer0, PORT))
    print(f"rtt_median_us {statistics.median(rtts) * 1e6:.1f} min_us {min(rtts) * 1e6:.1f} max_us {max(rtts) * 1e6:.1f}")
sys.exit(0)
