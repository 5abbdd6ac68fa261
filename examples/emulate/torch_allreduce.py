"""torch.distributed on the emulated fabric: an All-Reduce on the gloo backend.

fabemu emulate sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT as torchrun does, and
GLOO_SOCKET_IFNAME=eth0 (the namespaces share the machine's hostname, which resolves to
loopback), so the default env:// initialisation finds the other ranks across the emulated
switches:

    fabemu emulate examples/emulate/leaf_spine4.yaml -- python3 examples/emulate/torch_allreduce.py

Needs torch (pip install torch); tests/emulate.rs runs it where FABEMU_TORCH_PYTHON (or
python3) imports torch. CI does not install torch.
"""
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
numel = int(os.environ.get("ALLREDUCE_NUMEL", str(1 << 20)))
x = torch.full((numel,), float(rank + 1))
dist.barrier()
t = time.perf_counter()
dist.all_reduce(x)
took = time.perf_counter() - t
expected = world * (world + 1) / 2
ok = bool(torch.all(x == expected))
print(f"torch all_reduce rank {rank}: {numel * 4} bytes in {took * 1e3:.1f} ms, correct {ok}")
dist.destroy_process_group()
raise SystemExit(0 if ok else 1)
