"""UDP ping-pong between rank 0 and rank 1: prints the median round-trip time.

Run inside `fabemu emulate` (it sets RANK and MASTER_ADDR):
    fabemu emulate examples/emulate/two_hosts.yaml -- python3 examples/emulate/udp_pingpong.py
"""
import os
import socket
import statistics
import sys
import time

N = int(os.environ.get("PINGS", "50"))
SIZE = int(os.environ.get("PING_BYTES", "64"))
PORT = 40000
rank = int(os.environ["RANK"])
peer0 = os.environ["MASTER_ADDR"]

s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
if rank == 0:
    s.bind(("0.0.0.0", PORT))
    s.settimeout(30)
    for _ in range(N + 1):
        data, addr = s.recvfrom(65536)
        if data == b"end":
            break
        s.sendto(data, addr)
elif rank == 1:
    s.settimeout(5)
    payload = b"x" * SIZE
    rtts = []
    time.sleep(0.3)  # let rank 0 bind
    for i in range(N):
        t = time.perf_counter()
        s.sendto(payload, (peer0, PORT))
        s.recvfrom(65536)
        rtts.append(time.perf_counter() - t)
        time.sleep(0.01)
    s.sendto(b"end", (peer0, PORT))
    print(f"rtt_median_us {statistics.median(rtts) * 1e6:.1f} min_us {min(rtts) * 1e6:.1f} max_us {max(rtts) * 1e6:.1f}")
sys.exit(0)
