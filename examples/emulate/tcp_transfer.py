"""A TCP bulk transfer from rank 1 to rank 0; rank 0 prints the goodput it received.

    fabemu emulate examples/emulate/two_hosts.yaml -- python3 examples/emulate/tcp_transfer.py
"""
import os
import socket
import sys
import time

rank = int(os.environ["RANK"])
size = int(os.environ.get("TRANSFER_BYTES", str(50_000_000)))
PORT = int(os.environ.get("MASTER_PORT", "29500")) + 2
tos = int(os.environ.get("TRANSFER_TOS", "0"))

if rank == 0:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", PORT))
    srv.listen(1)
    conn, _ = srv.accept()
    got = 0
    first = None
    while got < size:
        chunk = conn.recv(1 << 20)
        if not chunk:
            break
        if first is None:
            first = time.perf_counter()
        got += len(chunk)
    took = time.perf_counter() - first
    # The first chunk's bytes arrived before the clock started: count from the rest.
    print(f"received {got} bytes goodput_bps {got * 8 / took:.0f}")
    sys.exit(0 if got == size else 1)
elif rank == 1:
    # Rank 0 may start listening late on a busy machine: retry for a while.
    for _ in range(100):
        try:
            s = socket.create_connection((os.environ["MASTER_ADDR"], PORT), timeout=30)
            break
        except ConnectionRefusedError:
            time.sleep(0.1)
    else:
        sys.exit(2)
    if tos:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
    block = b"\0" * (1 << 20)
    left = size
    while left > 0:
        n = min(left, len(block))
        s.sendall(block[:n])
        left -= n
    s.close()
