#!/usr/bin/env python3
"""Writes benches/fat_tree1024.yaml: a random permutation of 4 MB messages on 1024 hosts.

The permutation comes from a fixed 64-bit LCG (Knuth's MMIX constants) and a Fisher-Yates
shuffle, so the file is the same on every machine and Python version; hosts that would send to
themselves swap destinations with their neighbour (a derangement: every host sends and receives
exactly one message).
"""

N = 1024
SIZE = "4MB"


def lcg(state):
    while True:
        state = (state * 6364136223846793005 + 1442695040888963407) % 2**64
        yield state >> 33


def permutation(seed=12):
    rnd = lcg(seed)
    p = list(range(N))
    for i in range(N - 1, 0, -1):
        j = next(rnd) % (i + 1)
        p[i], p[j] = p[j], p[i]
    for i in range(N):
        if p[i] == i:
            k = (i + 1) % N
            p[i], p[k] = p[k], p[i]
    assert all(p[i] != i for i in range(N)) and sorted(p) == list(range(N))
    return p


def main():
    lines = [
        "# Large-fabric engine benchmark: 1024 hosts on a k=16 fat-tree (16 pods of 8 edge and",
        "# 8 aggregation switches, 64 cores), 100 Gb/s and 1 us on every link, 4000 B MTU, lossy, default",
        "# buffers, timing mode. Each host writes one 4 MB message to another host of a random permutation",
        "# (a derangement, fixed by benches/fat_tree1024.py, which wrote this file), all at t = 0. ECMP",
        "# collisions on the aggregation and core links slow most messages well below line rate (335 us",
        "# alone): at `until` = 1 ms about a quarter are unfinished, so the run exits 3 by design after",
        "# 11.56 M packet-hops; the summary's packet-hops/s is the figure to compare.",
        "#",
        "#   cargo run --release -- run benches/fat_tree1024.yaml --threads 1 --quiet",
        "name: fat_tree1024",
        "seed: 1",
        "mode: timing",
        "until: 1ms",
        "lossless: false",
        "nic: {mtu: 4000B}",
        "topology:",
        "  fat_tree:",
        "    k: 16",
        "    oversubscription: 1",
        "    host_bandwidth: 100Gbps",
        "    host_latency: 1us",
        "    fabric_bandwidth: 100Gbps",
        "    fabric_latency: 1us",
        "workload:",
        "  messages:",
    ]
    for src, dst in enumerate(permutation()):
        lines.append(f"    - {{src: h{src}, dst: h{dst}, size: {SIZE}}}")
    with open(__file__.replace(".py", ".yaml"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
