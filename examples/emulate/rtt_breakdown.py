"""Where a UDP ping-pong's round trip goes: lines up the program's stamps with fabemu's trace.

    FABEMU_EMULATE_TRACE=/tmp/trace.csv fabemu emulate examples/emulate/two_hosts.yaml --quiet \\
        -- env PING_TRACE=1 python3 examples/emulate/udp_pingpong.py > /tmp/ping.txt
    python3 examples/emulate/rtt_breakdown.py /tmp/trace.csv /tmp/ping.txt

Every stamp is CLOCK_MONOTONIC. Per one-way trip (rank 1 -> rank 0 and back), the medians of:
  send->read      the sender's sendto and its kernel, until fabemu's loop read the frame
  read->entered   how much later than it was read the frame entered the fabric (the engine had
                  passed that time)
  entered->due    the fabric: links and switch (the physics)
  due->write      how late fabemu began writing it into the destination namespace
  write->written  the write: the kernel carries the frame up to the destination's socket
  written->recv   the destination program's wake-up from recvfrom
and rank 0's turnaround (recvfrom returned -> sendto called).
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


def first_after(frames, t, pos):
    """The first of `frames` (sorted by their first instant) at or after `t`, from `pos` on."""
    while pos < len(frames) and frames[pos][0] < t:
        pos += 1
    return pos


parts = {k: [] for k in ("send->read", "read->entered", "entered->due", "due->write",
                         "write->written", "written->recv", "turnaround", "rtt")}
# Each ping is matched with the frames of its way there and back by time, not by count: a
# first ping sent again, or an ICMP answer to it, adds frames of its own.
pos = {("in", 0): 0, ("in", 1): 0, ("out", 0): 0, ("out", 1): 0, "echo": 0}
echo_list = sorted(echoes.values())
n = 0
for i in sorted(pings):
    sent, got = pings[i]
    e = pos["echo"] = first_after(echo_list, sent, pos["echo"])
    if e >= len(echo_list) or echo_list[e][1] > got:
        continue
    e_recv, e_send = echo_list[e]
    legs = []
    for host_in, host_out, s, r in ((1, 0, sent, e_recv), (0, 1, e_send, got)):
        a = pos[("in", host_in)] = first_after(ins[host_in], s, pos[("in", host_in)])
        b = pos[("out", host_out)] = first_after(outs[host_out], s, pos[("out", host_out)])
        if a >= len(ins[host_in]) or b >= len(outs[host_out]):
            break
        legs.append(((s, r), ins[host_in][a], outs[host_out][b]))
    if len(legs) < 2:
        continue
    n += 1
    for (s, r), (read, _, entered), (due, write, written) in legs:
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
