"""Two TCP flows into rank 0 at once, from rank 1 marked DSCP 46 (IP_TOS 0xb8; FLOW_MARK=0
leaves it unmarked) and from rank 2 unmarked; rank 0 prints each flow's goodput over the time
both were sending.

    fabemu emulate examples/emulate/priority.yaml -- python3 examples/emulate/two_flows.py
"""
import os
import select
import socket
import sys
import time

rank = int(os.environ["RANK"])
PORT = int(os.environ.get("MASTER_PORT", "29500")) + 3
SECONDS = float(os.environ.get("FLOW_SECONDS", "2"))
# The senders' congestion control (e.g. cubic: BBR, a common default, ignores ECN marks).
CC = os.environ.get("FLOW_CC", "")

if rank == 0:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", PORT))
    srv.listen(2)
    conns = {}
    while len(conns) < 2:
        c, addr = srv.accept()
        conns[c] = addr[0]
    # Both senders start when both are connected: the flows overlap from the first byte.
    for c in conns:
        c.sendall(b"g")
    got = {a: 0 for a in conns.values()}
    start = time.perf_counter()
    # Count from 0.5 s in (both flows past slow start) to 0.5 s before the end.
    t0, t1 = start + 0.5, start + SECONDS - 0.5
    window = {a: 0 for a in conns.values()}
    open_ = set(conns)
    while open_:
        ready, _, _ = select.select(list(open_), [], [], 1.0)
        for c in ready:
            data = c.recv(1 << 20)
            if not data:
                open_.discard(c)
                continue
            got[conns[c]] += len(data)
            if t0 <= time.perf_counter() <= t1:
                window[conns[c]] += len(data)
    span = t1 - t0
    for a in sorted(window):
        print(f"flow from {a} goodput_bps {window[a] * 8 / span:.0f} total {got[a]}")
elif rank in (1, 2):
    # Rank 0 may start listening late on a busy machine: retry for a while.
    for _ in range(100):
        try:
            s = socket.create_connection((os.environ["MASTER_ADDR"], PORT), timeout=30)
            break
        except ConnectionRefusedError:
            time.sleep(0.1)
    else:
        sys.exit(2)
    if CC:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, CC.encode())
    if rank == 1 and os.environ.get("FLOW_MARK", "1") == "1":
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, 46 << 2)
    if s.recv(1) != b"g":
        sys.exit(3)
    block = b"\0" * (1 << 16)
    end = time.perf_counter() + SECONDS
    while time.perf_counter() < end:
        s.sendall(block)
    s.close()
sys.exit(0)
