"""A Python trainer process for test_elastic.py: a tiny linear model on
Fashion-MNIST with raftps.torch's DistributedOptimizer, elastic.run and
TorchState. Logs one JSON object per line to --log."""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import raftps  # noqa: E402
import raftps.jobs  # noqa: E402
from raftps import errors  # noqa: E402
from raftps.datasets import fashion_mnist  # noqa: E402
from raftps.ps import ParamClient  # noqa: E402
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
    ap.add_argument("--min-trainers", type=int, default=1, help="wait for this many registered trainers first")
    ap.add_argument("--fail-at", type=int, default=0, help="inject a failure after this many steps")
    a = ap.parse_args()
    torch.set_num_threads(1)
    log = open(a.log, "a", buffering=1)

    def emit(**kw):
        kw["t"] = time.time()
        log.write(json.dumps(kw) + "\n")

    c = raftps.Client(a.endpoints)
    spec = raftps.jobs.status(c, a.job).spec
    x, y = fashion_mnist(a.dataset, "train", limit=spec.dataset.records)
    X, Y = torch.from_numpy(x.reshape(len(x), -1)), torch.from_numpy(y)
    session = TrainerSession(c, a.job, a.id, ttl=2)
    session.wait_members(a.min_trainers, 60)  # Horovod's min_np
    ps = ParamClient(c, a.job, a.id, spec=spec)
    model = torch.nn.Linear(784, 10)
    opt = DistributedOptimizer(ps, model.named_parameters(), session=session)
    source = TaskSource(c, a.job, a.id, ps=ps, spec=spec)
    batches = TaskBatches(source)
    take, fin = source.next, source.finish

    def logged_next():
        t = take()
        if t is not None:
            emit(ev="task", id=t.id, epoch=t.epoch, backup=t.pb.backup_trainer == a.id)
        return t

    def logged_finish(task, *args, **kw):
        ok = fin(task, *args, **kw)
        emit(ev="finish", id=task.id, epoch=task.epoch, accepted=ok)
        return ok

    source.next, source.finish = logged_next, logged_finish
    state = elastic.TorchState(model, opt, batches=batches, step=0)

    def on_reset():
        n = len(state.members())
        opt.grad_scale = 1.0 / n  # e.g. keep the effective lr as trainers come and go
        emit(ev="reset", members=sorted(state.members()), step=state.step, restores=state.restores,
             cursor=batches.cursor, grad_scale=opt.grad_scale)

    state.register_reset_callbacks([on_reset])
    emit(ev="start", members=sorted(state.members()))
    failed = [False]

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
            if a.fail_at and state.step == a.fail_at and not failed[0]:
                failed[0] = True
                emit(ev="inject", step=state.step, cursor=batches.cursor)
                state.step += 1000  # uncommitted garbage the restore must undo
                raise errors.Unavailable("injected failure")
            emit(ev="step", step=state.step, loss=loss.item())
            if a.sleep:
                time.sleep(a.sleep)
            try:
                state.commit()
            except elastic.HostsUpdatedInterrupt as e:
                emit(ev="interrupt", step=state.step, members=sorted(e.members))
                raise

    train(state)
    emit(ev="done", step=state.step, resets=state.resets, restores=state.restores,
         tasks=batches.source.tasks_done, stale=opt.stale)
    session.close()
    ps.close()
    c.close()


if __name__ == "__main__":
    main()
