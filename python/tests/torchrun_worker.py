"""A torchrun worker (test_torchrun.py): a Gloo group from torchrun's
environment, one allreduce, one line of output."""

import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.full((2,), float(dist.get_rank() + 1))
dist.all_reduce(t)
print(f"worker rank={dist.get_rank()} world={dist.get_world_size()} sum={int(t[0].item())} "
      f"restart={os.environ['TORCHELASTIC_RESTART_COUNT']}", flush=True)
dist.destroy_process_group()
