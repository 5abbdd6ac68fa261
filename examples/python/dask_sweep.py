"""A sweep on a Dask cluster: `executor=client.get_executor()` sends each run to a worker.

A LocalCluster of two worker processes stands in for a real cluster here; with one, give
`distributed.Client("scheduler-address:8786")` instead (every worker needs `pip install
./python`, and the files a scenario names must be at the same paths on every worker).

    pip install ./python pandas "dask[distributed]"
    python examples/python/dask_sweep.py
"""

from pathlib import Path

import distributed

import fabemu

SCENARIO = Path(__file__).resolve().parent.parent / "msccl.yaml"
GRID = {"seed": [1, 2], "workload.collectives[1].chunks": [1, 2, 4, 8]}


def main():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            df = fabemu.sweep(SCENARIO, GRID, executor=client.get_executor())
    print(df[["seed", "workload.collectives[1].chunks", "collective_time_us", "busbw_gbps", "invariants_ok"]].to_string())
    return df


if __name__ == "__main__":
    main()
