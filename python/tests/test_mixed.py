"""A Go trainer (a `raftps node --roles trainer`) and a Python trainer
serve one sync job (model softmax, which both implement): both take tasks
from the same queue, every step averages both gradients, the job
completes and the model learns."""

import os
import threading
import time
import uuid

import numpy as np

import raftps.errors
import raftps.jobs
from raftps import localcluster
from raftps.datasets import fashion_mnist
from raftps.ps import ParamClient
from raftps.tasks import TaskBatches, TaskSource, TrainerSession

from conftest import DATASET, wait_slots
from test_ps import softmax_grad


def test_go_and_python_trainer_in_one_job(client, cluster, bin_path, workdir):
    trainer_node = None
    job = f"mixed-{uuid.uuid4().hex[:6]}"
    records = 3000
    spec = {"name": job, "model": {"name": "softmax"},
            "params": [{"name": "w", "shape": [784, 10], "init": "INIT_GLOROT"},
                       {"name": "b", "shape": [10], "init": "INIT_ZEROS"}],
            "dataset": {"path": DATASET, "records": records}, "records_per_task": 100, "batch_size": 50,
            "passes": 2, "optimizer": {"name": "sgd", "learning_rate": 0.5}, "num_pservers": 2,
            "mode": "UPDATE_MODE_SYNC", "task_timeout_floor_ms": 60000}
    x, y = fashion_mnist(DATASET, "train", limit=records)
    x = x.reshape(len(x), -1).astype(np.float64)
    try:
        raftps.jobs.submit(client, spec)
        wait_slots(client, job, 2)
        events = raftps.jobs.events(client, job, from_seq=1)
        # The Python trainer registers first, then the trainer node joins the
        # cluster, sees the job and registers its Go trainer, and only then
        # does the Python trainer start: every sync step expects both from
        # the first, so neither runs through the queue alone (the Go trainer,
        # started first, once did 58 of the 60 tasks before Python's first).
        session = TrainerSession(client, job, "py-1", ttl=3)
        ps = ParamClient(client, job, "py-1")
        batches = TaskBatches(TaskSource(client, job, "py-1", ps=ps))
        trainer_node = localcluster.add(bin_path, os.path.join(workdir, "c3"), cluster, roles="trainer",
                                        extra=["--dataset-dir", DATASET])
        deadline = time.monotonic() + 60
        while not any(tr.startswith(trainer_node.id + "-") for tr in raftps.jobs.status(client, job).trainers):
            assert time.monotonic() < deadline, "the Go trainer never registered"
            time.sleep(0.2)
        errs = []
        last = {}

        def python_trainer():
            try:
                for idx in batches:
                    while True:
                        cur = ps.pull()
                        last.update(cur)
                        gW, gb = softmax_grad(cur["w"], cur["b"], x[idx], y[idx])
                        try:
                            ps.push({"w": gW, "b": gb}, examples=len(idx))
                            break
                        except raftps.errors.StalePush:
                            continue  # re-pull and redo, as Go's trainer does
                    batches.record(0.0, len(idx))
            except Exception as e:  # noqa: BLE001
                errs.append(e)

        t = threading.Thread(target=python_trainer)
        t.start()
        st = raftps.jobs.wait(client, job, timeout=240)
        t.join(30)
        assert not errs, errs
        assert raftps.jobs.state_name(st) == "JOB_SUCCEEDED", st.message
        assert st.done == st.total_tasks == 30 and getattr(st, "pass") == 1
        by = {}
        for ev in events:
            if raftps.jobs.event_type(ev) == "TASK_DONE":
                by[ev.trainer] = by.get(ev.trainer, 0) + 1
        assert by.get("py-1", 0) >= 3, by
        go = {k: v for k, v in by.items() if k.startswith(trainer_node.id + "-")}
        assert sum(go.values()) >= 3, by
        assert by["py-1"] + sum(go.values()) >= 60
        # The slots go when the job ends: judge the last parameters pulled.
        final = last
        xt, yt = fashion_mnist(DATASET, "test", limit=2000)
        acc = ((xt.reshape(len(xt), -1) @ final["w"] + final["b"]).argmax(1) == yt).mean()
        assert acc > 0.55, acc  # 10 classes: chance is 0.1
        ps.close()
        session.close()
    finally:
        if trainer_node is not None:
            trainer_node.stop(5)
