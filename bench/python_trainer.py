#!/usr/bin/python3
"""One trainer process of bench/python.py's 2-trainer rows: the example's
CNN (examples/pytorch/fashion_mnist.py Net), batches of 64, momentum SGD
(lr 0.05, 0.9), one torch thread, in one of three modes:

- ``ps``: raftps PS mode (ParamClient + DistributedOptimizer, a sync job);
- ``allreduce``: raftps elastic allreduce (DistributedOptimizer
  mode="allreduce" under elastic.run, a commit per step);
- ``ddp``: plain PyTorch DDP, Gloo, run by torchrun (rank and store from
  its environment: init_process_group("gloo") over its c10d TCPStore).

Trainer k trains on its own batches (records [64 (k B + b), 64 (k B + b + 1))).
It prints JSON lines to stdout (or --log): ``{"ev": "start", ...}``,
``{"ev": "step", "step", "t", "size", "restart"}`` with --log-steps, and
at the end ``{"ev": "done", "examples", "seconds"}``: the examples it
trained in the timed steps (after --warmup) and the seconds they took.

    python_trainer.py ps|allreduce --endpoints E --job J --id t0 --batches 40 --warmup 5
    torchrun --nproc_per_node 2 ... python_trainer.py ddp --batches 40 --warmup 5
"""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "examples", "pytorch"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from fashion_mnist import Net, load  # noqa: E402

BATCH = 64


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["ps", "allreduce", "ddp"])
    ap.add_argument("--endpoints", default="")
    ap.add_argument("--job", default="")
    ap.add_argument("--id", default="")
    ap.add_argument("--index", type=int, default=0, help="which trainer (its batches); ddp: the rank")
    ap.add_argument("--batches", type=int, default=40, help="timed steps")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--restart-batches", type=int, default=5, help="ddp: steps of a torchrun restart")
    ap.add_argument("--np", type=int, default=2, help="ps/allreduce: registered trainers to wait for")
    ap.add_argument("--log", default="", help="append JSON lines here instead of stdout")
    ap.add_argument("--log-steps", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    out = open(a.log, "a", buffering=1) if a.log else sys.stdout
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if a.mode == "ddp":
        a.index = int(os.environ["RANK"])
        if restart:
            a.warmup, a.batches = 0, a.restart_batches

    def emit(**kw):
        kw.update(t=time.time(), mode=a.mode, index=a.index, pid=os.getpid(), restart=restart)
        out.write(json.dumps(kw) + "\n")
        out.flush()

    n = a.warmup + a.batches
    x, y = load("train", BATCH * n * 2)
    torch.manual_seed(1)
    model = Net()
    lo = a.index * n

    def batch(b):
        i = slice(BATCH * (lo + b), BATCH * (lo + b + 1))
        return x[i], y[i]

    if a.mode == "ddp":
        run_ddp(a, model, batch, emit)
    elif a.mode == "ps":
        run_ps(a, model, batch, emit)
    else:
        run_allreduce(a, model, batch, emit)


def timed_loop(a, step, emit, size):
    """Runs --warmup then --batches steps (step(b) trains batch b); emits
    the timed examples and seconds."""
    for b in range(a.warmup):
        step(b)
    t0 = time.perf_counter()
    for b in range(a.warmup, a.warmup + a.batches):
        step(b)
    emit(ev="done", examples=BATCH * a.batches, seconds=time.perf_counter() - t0, size=size())


def run_ddp(a, model, batch, emit):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")  # env://: torchrun's MASTER_ADDR/PORT, its c10d store
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    emit(ev="start", size=dist.get_world_size())

    def step(b):
        xb, yb = batch(b)
        opt.zero_grad()
        F.cross_entropy(ddp(xb), yb).backward()
        opt.step()
        if a.log_steps:
            emit(ev="step", step=b, size=dist.get_world_size())

    timed_loop(a, step, emit, dist.get_world_size)
    dist.destroy_process_group()


def run_ps(a, model, batch, emit):
    import raftps
    from raftps.ps import ParamClient
    from raftps.tasks import TrainerSession
    from raftps.torch import DistributedOptimizer

    c = raftps.Client(a.endpoints, insecure=True)
    session = TrainerSession(c, a.job, a.id, ttl=5)
    session.wait_members(a.np, 120)
    time.sleep(1.0)  # the pservers learn the trainer set
    ps = ParamClient(c, a.job, a.id)
    opt = DistributedOptimizer(ps, model.named_parameters(), session=session, examples=BATCH)
    opt.pull()
    emit(ev="start", size=a.np)

    def step(b):
        xb, yb = batch(b)
        opt.zero_grad()
        F.cross_entropy(model(xb), yb).backward()
        opt.step()

    timed_loop(a, step, emit, lambda: a.np)
    ps.close()
    session.close()
    c.close()


def run_allreduce(a, model, batch, emit):
    import raftps
    import raftps.jobs
    from raftps.tasks import TrainerSession
    from raftps.torch import DistributedOptimizer, elastic

    c = raftps.Client(a.endpoints, insecure=True)
    spec = raftps.jobs.status(c, a.job).spec
    # A 1 s lease: the detector of a dead member (as examples/pytorch).
    session = TrainerSession(c, a.job, a.id, ttl=1)
    session.wait_members(a.np, 120)
    # min_np 1: a survivor trains on alone (the SIGKILL row).
    opt = DistributedOptimizer(model, session=session, mode="allreduce", spec=spec, min_np=1)
    state = elastic.TorchState(model, opt, step=0)
    t0 = [0.0]

    @elastic.run
    def train(state):
        while state.step < a.warmup + a.batches:
            if state.step == a.warmup and not t0[0]:
                t0[0] = time.perf_counter()
            xb, yb = batch(state.step)
            opt.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            opt.step(examples=BATCH)
            state.step += 1
            if a.log_steps:
                emit(ev="step", step=state.step, size=state.size)
            state.commit()

    emit(ev="start", size=a.np)
    train(state)
    emit(ev="done", examples=BATCH * a.batches, seconds=time.perf_counter() - t0[0], size=state.size)
    opt.close()
    session.close()
    c.close()


if __name__ == "__main__":
    main()
