"""All-Reduce bus bandwidth against message size on three fabrics of 16 hosts, plotted.

Runs one scenario under a grid of overrides (`fabemu.sweep`, a local process pool) and plots
busbw (nccl-tests' bus bandwidth) per size and fabric with matplotlib.

    pip install ./python pandas matplotlib
    python examples/python/allreduce_sweep.py [busbw.png]
"""

import sys

import fabemu

SCENARIO = {
    "name": "allreduce-sweep",
    "mode": "timing",
    "topology": {"star": {"hosts": 16, "bandwidth": "100Gbps", "latency": "1us"}},
    "workload": {"collectives": [{"op": "all_reduce", "algorithm": "ring", "size": "1MiB"}]},
}

FABRICS = {
    "star": {"star": {"hosts": 16, "bandwidth": "100Gbps", "latency": "1us"}},
    "ring": {"ring": {"hosts": 16, "bandwidth": "100Gbps", "latency": "1us"}},
    "leaf-spine": {
        "leaf_spine": {
            "leaves": 4,
            "spines": 2,
            "hosts_per_leaf": 4,
            "host_bandwidth": "100Gbps",
            "host_latency": "1us",
            "fabric_bandwidth": "200Gbps",
            "fabric_latency": "1us",
        }
    },
}
SIZES = ["64KiB", "256KiB", "1MiB", "4MiB", "16MiB"]


def main(png="busbw.png"):
    points = [
        {"topology": fabric, "workload.collectives[0].size": size}
        for fabric in FABRICS.values()
        for size in SIZES
    ]
    df = fabemu.sweep(SCENARIO, points)
    df["fabric"] = [name for name in FABRICS for _ in SIZES]
    df["size"] = df["workload.collectives[0].size"]
    table = df.pivot(index="size", columns="fabric", values="busbw_gbps").loc[SIZES]
    print(table.round(2).to_string())

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ax = table.plot(marker="o", title="Ring All-Reduce, 16 hosts, 100 Gb/s host links")
    ax.set_xlabel("size")
    ax.set_ylabel("busbw (GB/s)")
    plt.savefig(png, dpi=120, bbox_inches="tight")
    print(f"wrote {png}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
