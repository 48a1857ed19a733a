"""An elastic torchrun worker (test_torchrun.py): ``steps`` allreduces of
ones, each checked against the world size; rank 0 marks each step as a
file w<world>-r<restart>-s<step> in ``progress``; prints one line at the
end."""

import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

steps, progress = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
rank, world = dist.get_rank(), dist.get_world_size()
restart = os.environ["TORCHELASTIC_RESTART_COUNT"]
for step in range(steps):
    t = torch.ones(1)
    dist.all_reduce(t)
    assert int(t.item()) == world, (t, world)
    if rank == 0:
        open(os.path.join(progress, f"w{world}-r{restart}-s{step}"), "w").close()
    time.sleep(0.2)
print(f"done world={world} restart={restart}", flush=True)
dist.destroy_process_group()
