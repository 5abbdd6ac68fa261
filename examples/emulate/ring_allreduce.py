"""A ring All-Reduce over plain TCP sockets, one process per host.

Each rank holds a vector of integers (rank r's element i is r * 1000 + i); after a
reduce-scatter and an all-gather around the ring (2 (n-1) steps, as NCCL's ring algorithm),
every rank holds the element-wise sum and checks it exactly. Run inside `fabemu emulate`,
which sets RANK, WORLD_SIZE and gives each host the address 10.0.0.(rank+1):

    fabemu emulate examples/emulate/leaf_spine4.yaml -- python3 examples/emulate/ring_allreduce.py

ALLREDUCE_ORDER (default 0,1,...,n-1) is the ring's order of ranks: each sends to the next
in it. On a ring of hosts (`ring4.yaml`) the default order follows the links; `0,2,1,3`
makes every other step cross a host that relays it.
"""
import os
import socket
import struct
import sys
import threading
import time

rank = int(os.environ["RANK"])
n = int(os.environ["WORLD_SIZE"])
count = int(os.environ.get("ALLREDUCE_COUNT", "65536"))  # elements (8 bytes each)
PORT = int(os.environ.get("MASTER_PORT", "29500")) + 1
order = [int(r) for r in os.environ.get("ALLREDUCE_ORDER", ",".join(map(str, range(n)))).split(",")]
assert sorted(order) == list(range(n)), f"ALLREDUCE_ORDER {order} is not a permutation of the ranks"
pos = order.index(rank)  # this rank's place in the ring: it sends to the next, hears the one before


def addr(r):
    return f"10.0.0.{r + 1}"


def recv_exact(sock, size):
    buf = bytearray()
    while len(buf) < size:
        chunk = sock.recv(size - len(buf))
        if not chunk:
            raise ConnectionError("peer closed")
        buf += chunk
    return bytes(buf)


# Listen for the left neighbour, connect to the right one (retrying while it starts).
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("0.0.0.0", PORT))
server.listen(1)
accepted = {}
t = threading.Thread(target=lambda: accepted.setdefault("s", server.accept()[0]))
t.start()
right = None
deadline = time.time() + 30
while right is None:
    try:
        right = socket.create_connection((addr(order[(pos + 1) % n]), PORT), timeout=30)
    except OSError:
        if time.time() > deadline:
            raise
        time.sleep(0.05)
t.join()
left = accepted["s"]
for s in (left, right):
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

data = [rank * 1000 + i for i in range(count)]
bounds = [(c * count // n, (c + 1) * count // n) for c in range(n)]


def pack(vals):
    return struct.pack(f"<{len(vals)}q", *vals)


def unpack(raw):
    return list(struct.unpack(f"<{len(raw) // 8}q", raw))


def step(send_chunk, recv_chunk, reduce):
    lo, hi = bounds[send_chunk]
    payload = pack(data[lo:hi])
    sender = threading.Thread(target=right.sendall, args=(payload,))
    sender.start()
    rlo, rhi = bounds[recv_chunk]
    got = unpack(recv_exact(left, (rhi - rlo) * 8))
    sender.join()
    if reduce:
        data[rlo:rhi] = [a + b for a, b in zip(data[rlo:rhi], got)]
    else:
        data[rlo:rhi] = got


start = time.perf_counter()
for s in range(n - 1):  # reduce-scatter
    step((pos - s) % n, (pos - s - 1) % n, True)
for s in range(n - 1):  # all-gather
    step((pos - s + 1) % n, (pos - s) % n, False)
took = time.perf_counter() - start

expected = [sum(r * 1000 for r in range(n)) + n * i for i in range(count)]
wrong = sum(1 for a, b in zip(data, expected) if a != b)
print(f"allreduce rank {rank}: {count} elements in {took * 1e3:.1f} ms, wrong {wrong}")
sys.exit(1 if wrong else 0)
