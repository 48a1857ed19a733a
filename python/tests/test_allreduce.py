"""Elastic allreduce (issue 35): three trainer processes in allreduce mode
on one job; one is SIGKILLed mid-training and the other two re-form the
group with a new generation and go on; a fourth is added and joins. The
job completes, every trainer ends with the same model, and no record of a
task a live trainer finished was lost or trained twice across the resets."""

import collections
import json
import os
import signal
import subprocess
import sys
import time
import uuid

import raftps.jobs

from conftest import DATASET, external_spec, wait_slots
from test_elastic import dump_events

HERE = os.path.dirname(os.path.abspath(__file__))
PARAMS = [{"name": "weight", "shape": [10, 784], "init": "INIT_ZEROS"},
          {"name": "bias", "shape": [10], "init": "INIT_ZEROS"}]


def read(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def wait_for(pred, timeout, what, procs=()):
    deadline = time.monotonic() + timeout
    while not pred():
        for p in procs:
            assert p.poll() is None or p.returncode == 0, f"a trainer exited with {p.returncode} while waiting for {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_allreduce_member_killed_and_added(client, cluster, tmp_path):
    job = f"allreduce-{uuid.uuid4().hex[:6]}"
    raftps.jobs.submit(client, external_spec(job, PARAMS, records=6000, rpt=100, batch=20, passes=1, lr=0.1,
                                             pservers=1, max_task_timeouts=10))
    wait_slots(client, job, 1)
    eps = ",".join(n.grpc for n in cluster)
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    procs, logs = {}, {}

    def start(tid, *extra):
        logs[tid] = str(tmp_path / f"{tid}.log")
        procs[tid] = subprocess.Popen([sys.executable, os.path.join(HERE, "allreduce_worker.py"), "--endpoints", eps,
                                       "--job", job, "--id", tid, "--log", logs[tid], "--dataset", DATASET,
                                       "--sleep", "0.1", *extra], env=env,
                                      stdout=subprocess.DEVNULL, stderr=open(str(tmp_path / f"{tid}.err"), "w"))

    def events(tid, ev):
        return [e for e in read(logs[tid]) if e["ev"] == ev]

    def err(t):
        return open(str(tmp_path / f"{t}.err")).read()[-3000:]

    try:
        for t in "abc":
            start(t, "--min-np", "2", "--wait-np", "3")
        live = [procs[t] for t in "abc"]
        wait_for(lambda: all(len(events(t, "step")) >= 5 for t in "abc"), 120, "a, b, c training", live)
        starts = {t: events(t, "start")[0] for t in "abc"}
        assert all(s["size"] == 3 and s["members"] == ["a", "b", "c"] for s in starts.values()), starts
        assert sorted(s["rank"] for s in starts.values()) == [0, 1, 2]
        procs["c"].send_signal(signal.SIGKILL)
        procs["c"].wait(10)
        killed = time.time()
        print(f"c SIGKILLed at {killed:.3f}")
        wait_for(lambda: all(any(r["members"] == ["a", "b"] and r["t"] > killed for r in events(t, "reset"))
                             for t in "ab"), 60, "a and b to re-form without c", [procs["a"], procs["b"]])
        n_ab = {t: len(events(t, "step")) for t in "ab"}
        wait_for(lambda: all(len(events(t, "step")) >= n_ab[t] + 3 for t in "ab"), 60, "a and b training on",
                 [procs["a"], procs["b"]])
        start("d")
        wait_for(lambda: all(any(r["members"] == ["a", "b", "d"] for r in events(t, "reset")) for t in "ab"), 60,
                 "a and b to re-form with d", [procs[t] for t in "abd"])
        for t in "abd":
            assert procs[t].wait(240) == 0, err(t)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGUSR1)  # stacks into <id>.err
                time.sleep(1)
                p.kill()
                p.wait()
        dump_events(client, job, tmp_path / "events.log")
    st = raftps.jobs.status(client, job)
    assert raftps.jobs.state_name(st) == "JOB_SUCCEEDED", st.message
    assert st.done == st.total_tasks == 60 and st.failed == 0

    done = {t: events(t, "done")[0] for t in "abd"}
    # One model: every member applied the same averaged gradients since
    # the last sync from rank 0.
    sums = {round(d["checksum"], 3) for d in done.values()}
    assert len(sums) == 1, done
    assert all(d["acc"] > 0.6 for d in done.values()), done
    # c's death: a collective failed, the last commit was restored, the
    # group re-formed with a newer generation, ranks 0..1 (a, the oldest, is 0).
    for t in "ab":
        after = [r for r in events(t, "reset") if r["t"] > killed]
        first = after[0]
        assert first["restores"] >= 1 and first["size"] == 2, after
        assert first["gen"] > starts[t]["gen"]
        # Ranks follow registration order: a and b keep theirs relative to each other.
        older = starts[t]["rank"] < starts["b" if t == "a" else "a"]["rank"]
        assert first["rank"] == (0 if older else 1)
        withd = [r for r in after if r["members"] == ["a", "b", "d"]]
        assert withd and withd[0]["size"] == 3 and withd[0]["rank"] == first["rank"]
    # Every reset but the restore after c's death was agreed in a step:
    # a and b raised HostsUpdatedInterrupt as many times (at least for d).
    ia, ib = events("a", "interrupt"), events("b", "interrupt")
    assert len(ia) == len(ib) >= 1, (ia, ib)
    # d joined with rank 2 (the newest registration).
    assert any(r["members"] == ["a", "b", "d"] and r["rank"] == 2 for r in [events("d", "start")[0]] + events("d", "reset"))
    # No record lost or repeated: for every task a live trainer had
    # accepted, the batches it committed (the last step logged per
    # position after restores cut the uncommitted ones) cover the task's
    # 100 records exactly once. A step is logged once gradients were
    # applied; a restore rewinds to the last commit, so steps logged
    # after a commit and before a failure are superseded: keep, per task,
    # the records of the steps after the last rewind.
    for t in "abd":
        per_task = collections.defaultdict(list)
        for e in events(t, "step"):
            per_task[tuple(e["task"])].append(e["idx"])
        for task, batches in per_task.items():
            recs = [r for b in batches for r in b]
            assert len(recs) == len(set(recs)) <= 100, (t, task, len(recs), len(set(recs)))
