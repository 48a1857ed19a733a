"""One rank of a 2-process Gloo group on raftps.torch.Store (run by
test_torch_store.py): argv = endpoints job rank world_size.

Phase 1: init_process_group("gloo", store=Store) and an allreduce; prints
"phase1 <sum>". Then it waits for a line on stdin (the test kills a raftps
node meanwhile). Phase 2: store calls (set/add/get/wait) and a new Gloo
group built on the store (new_group rendezvous through it), with an
allreduce; prints "phase2 <sum> <count>"."""

import datetime
import sys

import torch
import torch.distributed as dist

import raftps
from raftps.torch import Store


def main():
    endpoints, job, rank, world = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    client = raftps.Client(endpoints, timeout=20.0)
    store = Store(client, job, ttl=30, timeout=datetime.timedelta(seconds=60))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t)
    print("phase1", int(t[0].item()), flush=True)

    sys.stdin.readline()
    store.set(f"after/{rank}", b"x")
    n = store.add("after/count", 1)
    store.wait([f"after/{r}" for r in range(world)])
    g = dist.new_group(list(range(world)))
    t = torch.full((4,), float(10 * (rank + 1)))
    dist.all_reduce(t, group=g)
    store.wait(["after/count"])
    print("phase2", int(t[0].item()), n, flush=True)
    dist.destroy_process_group()
    store.close()
    client.close()


if __name__ == "__main__":
    main()
