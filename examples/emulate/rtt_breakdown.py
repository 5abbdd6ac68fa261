"""Where a UDP ping-pong's round trip goes: lines up the program's stamps with fabemu's trace.

    FABEMU_EMULATE_TRACE=/tmp/trace.csv fabemu emulate examples/emulate/two_hosts.yaml --quiet \\
        -- env PING_TRACE=1 python3 examples/emulate/udp_pingpong.py > /tmp/ping.txt
    python3 examples/emulate/rtt_breakdown.py /tmp/trace.csv /tmp/ping.txt

Every stamp is CLOCK_MONOTONIC. Per one-way trip (rank 1 -> rank 0 and back), the medians of:
  send->read      the sender's sendto and its kernel, until fabemu's reader returned the frame
  read->entered   how much later than it was read the frame entered the fabric (the engine had
                  passed that time)
  entered->due    the fabric: links and switch (the physics)
  due->write      how late fabemu began writing it into the destination namespace
  write->written  the write: the kernel carries the frame up to the destination's socket
  written->recv   the destination program's wake-up from recvfrom
and rank 0's turnaround (recvfrom returned -> sendto returned).
"""
import csv
import statistics
import sys

trace_path, out_path = sys.argv[1], sys.argv[2]
ins = {0: [], 1: []}
outs = {0: [], 1: []}
with open(trace_path) as f:
    for row in csv.DictReader(f):
        host = int(row["host"])
        t = (int(row["t1_ns"]), int(row["t2_ns"]), int(row["t3_ns"]))
        (ins if row["kind"] == "in" else outs)[host].append(t)
pings, echoes = {}, {}
for line in open(out_path):
    w = line.split()
    if len(w) >= 5 and w[2] == "ping":
        pings[int(w[3])] = (int(w[4]), int(w[5]))
    elif len(w) >= 5 and w[2] == "echo":
        echoes[int(w[3])] = (int(w[4]), int(w[5]))
n = min(len(pings), len(echoes), len(ins[1]), len(outs[0]), len(ins[0]), len(outs[1]))
parts = {k: [] for k in ("send->read", "read->entered", "entered->due", "due->write",
                         "write->written", "written->recv", "turnaround", "rtt")}
for i in range(n):
    sent, got = pings[i]
    e_recv, e_send = echoes[i]
    for (s, r), (read, _, entered), (due, write, written) in (
        ((sent, e_recv), ins[1][i], outs[0][i]),
        ((e_send, got), ins[0][i], outs[1][i]),
    ):
        parts["send->read"].append(read - s)
        parts["read->entered"].append(entered - read)
        parts["entered->due"].append(due - entered)
        parts["due->write"].append(write - due)
        parts["write->written"].append(written - write)
        parts["written->recv"].append(r - written)
    parts["turnaround"].append(e_send - e_recv)
    parts["rtt"].append(got - sent)
print(f"{n} round trips; medians in us (one-way parts: per direction, two per round trip)")
for k, v in parts.items():
    print(f"  {k:14s} median {statistics.median(v) / 1e3:8.1f}  p90 "
          f"{sorted(v)[int(len(v) * 0.9)] / 1e3:8.1f}")
