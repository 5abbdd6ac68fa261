"""UDP ping-pong between rank 0 and rank 1: prints the median round-trip time.

Run inside `fabemu emulate` (it sets RANK and MASTER_ADDR):
    fabemu emulate examples/emulate/two_hosts.yaml -- python3 examples/emulate/udp_pingpong.py

With PING_TRACE=1 every rank also prints its CLOCK_MONOTONIC stamps per ping (`ping I SENT
RECEIVED` on rank 1, `echo I RECEIVED SENT` on rank 0), which `rtt_breakdown.py` lines up
with fabemu's own trace (FABEMU_EMULATE_TRACE).
"""
import os
import socket
import statistics
import sys
import time

N = int(os.environ.get("PINGS", "50"))
SIZE = int(os.environ.get("PING_BYTES", "64"))
PORT = 40000
TRACE = os.environ.get("PING_TRACE") == "1"
stamp = time.monotonic_ns  # CLOCK_MONOTONIC, as fabemu's trace
rank = int(os.environ["RANK"])
peer0 = os.environ["MASTER_ADDR"]

s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
if rank == 0:
    s.bind(("0.0.0.0", PORT))
    s.settimeout(30)
    for i in range(N + 1):
        data, addr = s.recvfrom(65536)
        got = stamp()
        if data == b"end":
            break
        s.sendto(data, addr)
        if TRACE:
            print(f"echo {i} {got} {stamp()}")
elif rank == 1:
    s.settimeout(1)
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
                s.recvfrom(65536)
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
        s.settimeout(5)
        rtts.append(time.perf_counter() - t)
        stamps.append((sent, got))
        time.sleep(0.01)
    if TRACE:
        for i, (sent, got) in enumerate(stamps):
            print(f"ping {i} {sent} {got}")
    s.sendto(b"end", (peer0, PORT))
    print(f"rtt_median_us {statistics.median(rtts) * 1e6:.1f} min_us {min(rtts) * 1e6:.1f} max_us {max(rtts) * 1e6:.1f}")
sys.exit(0)
