"""A Python trainer process for test_allreduce.py: a linear model on
Fashion-MNIST trained in allreduce mode (DistributedOptimizer(model,
mode="allreduce"), elastic.run, TorchState), tasks from the master. Logs
one JSON object per line to --log: every committed batch's records, each
reset's group, the final parameters' checksum and test accuracy."""

import argparse
import faulthandler
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import raftps  # noqa: E402
from raftps.datasets import fashion_mnist  # noqa: E402
from raftps.tasks import TaskBatches, TaskSource, TrainerSession  # noqa: E402
from raftps.torch import DistributedOptimizer, elastic  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoints", required=True)
    ap.add_argument("--job", required=True)
    ap.add_argument("--id", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--sleep", type=float, default=0.0)
    ap.add_argument("--min-np", type=int, default=1)
    ap.add_argument("--wait-np", type=int, default=1, help="registered trainers to wait for before the first group")
    # 3 s: a SIGKILLed member is detected by its broken Gloo connections;
    # 1 s leases lapsed under load (a live trainer re-registered as the
    # newest: its rank changed).
    ap.add_argument("--ttl", type=int, default=3, help="the registration's lease TTL, seconds")
    a = ap.parse_args()
    faulthandler.register(signal.SIGUSR1)  # the test dumps the stacks of a trainer that hangs
    torch.set_num_threads(1)
    torch.manual_seed(hash(a.id) % 1000)  # different initial models: sync() must make them equal
    log = open(a.log, "a", buffering=1)

    def emit(**kw):
        kw["t"] = time.time()
        log.write(json.dumps(kw) + "\n")

    c = raftps.Client(a.endpoints)
    session = TrainerSession(c, a.job, a.id, ttl=a.ttl)
    session.wait_members(a.wait_np, 120)
    source = TaskSource(c, a.job, a.id)
    x, y = fashion_mnist(a.dataset, "train", limit=source.spec.dataset.records)
    X, Y = torch.from_numpy(x.reshape(len(x), -1)), torch.from_numpy(y)
    model = torch.nn.Linear(784, 10)
    opt = DistributedOptimizer(model, session=session, mode="allreduce", min_np=a.min_np)
    batches = TaskBatches(source)
    opt.attach(batches)
    state = elastic.TorchState(model, opt, batches=batches, step=0)

    def on_reset():
        emit(ev="reset", members=sorted(opt.members()), rank=state.rank, size=state.size,
             gen=opt.rdzv.group.gen, restores=state.restores, step=state.step, why=state.last_failure)

    state.register_reset_callbacks([on_reset])
    emit(ev="start", members=sorted(opt.members()), rank=state.rank, size=state.size, gen=opt.rdzv.group.gen)

    @elastic.run
    def train(state):
        for idx in state.batches:
            i = torch.from_numpy(idx)
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(X[i]), Y[i])
            loss.backward()
            opt.step(examples=len(idx))
            state.batches.record(loss.item(), len(idx))
            state.step += 1
            t = state.batches.task
            emit(ev="step", step=state.step, task=[t.id, t.epoch], idx=idx.tolist())
            if a.sleep:
                time.sleep(a.sleep)
            try:
                state.commit()
            except elastic.HostsUpdatedInterrupt:
                emit(ev="interrupt", step=state.step)
                raise

    train(state)
    xt, yt = fashion_mnist(a.dataset, "test", limit=2000)
    with torch.no_grad():
        acc = (model(torch.from_numpy(xt.reshape(len(xt), -1))).argmax(1) == torch.from_numpy(yt)).float().mean()
    emit(ev="done", step=state.step, resets=state.resets, restores=state.restores, acc=float(acc),
         checksum=float(sum(p.double().sum() for p in model.parameters())), empty=opt.empty_steps)
    opt.close()
    session.close()
    c.close()


if __name__ == "__main__":
    main()
