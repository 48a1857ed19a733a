"""raftps.tasks: a Python trainer's place in a job: its registration
(:class:`TrainerSession`) and the master's task queue as a data source
(:class:`TaskSource`, :class:`TaskBatches`).

    session = TrainerSession(client, "mnist", "py-1", ttl=2)   # /jobs/mnist/trainers/py-1 under a lease
    ps = raftps.ps.ParamClient(client, "mnist", "py-1")
    batches = TaskBatches(TaskSource(client, "mnist", "py-1", ps=ps), batch_size=64)
    for idx in batches:              # np.int64 record indices of one mini-batch
        ... train on records idx ...
        batches.record(loss, len(idx))
    # the loop ends when the job is over

Sharding, requeue on death and passes come from raftps's queues: each
task is a range [begin, end) of the pass's shuffled record order (the same
permutation as Go's trainer/dataset.Permutation, so Go and Python trainers
share a job); a task is reported finished after its last batch was
trained; a trainer that dies stops renewing its lease, its registration
goes, and the master requeues its tasks.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Callable, Iterator

import numpy as np

from raftps import errors
from raftps.client import Client, Lease
from raftps.v1 import job_pb2

_M64 = 0xFFFFFFFFFFFFFFFF


def trainer_prefix(job: str) -> str:
    # schema.TrainerPrefix
    return f"/jobs/{job}/trainers/"


def permutation(n: int, seed: int, pass_: int) -> np.ndarray:
    """The shuffled record order of a pass: Go's dataset.Permutation
    (splitmix64 Fisher-Yates), bit for bit."""
    p = np.arange(n, dtype=np.int64)
    state = ((seed & _M64) * 0x9E3779B97F4A7C15 ^ (((pass_ & 0xFFFFFFFF) + 1) * 0xBF58476D1CE4E5B9)) & _M64
    for i in range(n - 1, 0, -1):
        state = (state + 0x9E3779B97F4A7C15) & _M64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
        z ^= z >> 31
        j = (z * (i + 1)) >> 64
        p[i], p[j] = p[j], p[i]
    return p


def default_trainer_id(client: Client) -> str:
    """The trainer id a trainer of ``client`` acts as: its certificate's
    name under mutual TLS (the only one the cluster accepts from it), else
    ``py-<host>-<pid>``."""
    if client.tls is not None:
        return client.tls.name()
    return f"py-{socket.gethostname()}-{os.getpid()}"


class TrainerSession:
    """Registers a trainer under /jobs/<job>/trainers/<id> (a
    schema.TrainerRecord) on a lease kept alive by a thread, re-registering
    on a new lease if it is lost, and follows the job's trainer set.

    ``generation`` increases each time the set of registered trainers
    changes (a trainer joined, or left: its key was deleted or its lease
    expired); ``members()`` is the current set and ``registration(name)``
    the mod revision of a trainer's key (a registration's identity: it
    changes when the trainer re-registers, see :meth:`reregister`). The
    pservers wait for every registered trainer in a sync step, so register
    before the first push.

    ``trainer`` defaults to the name of the client's certificate under
    mutual TLS (the cluster refuses any other trainer name for it), and
    to ``py-<host>-<pid>`` on a plaintext cluster.
    """

    def __init__(self, client: Client, job: str, trainer: str | None = None, ttl: int = 2):
        self.client, self.job, self.ttl = client, job, ttl
        self.id = trainer or default_trainer_id(client)
        self.key = trainer_prefix(job) + self.id
        self._mu = threading.Lock()
        self._cond = threading.Condition(self._mu)
        self._members: frozenset[str] = frozenset()
        self._revs: dict[str, int] = {}  # name -> mod revision of its key
        self.generation = 0
        self.rewatches = 0
        self._closed = False
        self._lease: Lease | None = None
        self._register()
        rev = self._refresh()
        self._watch = client.watch(trainer_prefix(job), prefix=True, start_revision=rev + 1)
        threading.Thread(target=self._follow, name="raftps-trainers", daemon=True).start()

    def _record(self) -> bytes:
        return ('{"node":"python:%s:%d","addr":""}' % (socket.gethostname(), os.getpid())).encode()

    def _register(self) -> None:
        lease = self.client.lease(self.ttl)
        lease.on_lost.append(self._lost)
        self.client.put(self.key, self._record(), lease=lease.id)
        self._lease = lease

    def reregister(self) -> int:
        """Deletes this trainer's key and writes it again on its lease: a
        new registration (a new mod revision, which it returns, and the
        newest create revision). Elastic allreduce: a trainer that a group
        member suspected of being dead (its Gloo connections broke) is left
        out while the suspected registration lasts; a live one re-registers
        to be eligible again, as the newest trainer (it missed steps: it
        must not be the rank whose state the group takes)."""
        lease = self._lease
        if lease is None:
            raise errors.Unavailable(f"trainer {self.id}: being re-registered on a new lease")
        self.client.delete(self.key)
        return self.client.put(self.key, self._record(), lease=lease.id)

    def _lost(self, _lease) -> None:
        if self._closed:
            return

        def again():
            while not self._closed:
                try:
                    self._register()
                    return
                except errors.RaftpsError:
                    time.sleep(0.2)
        threading.Thread(target=again, daemon=True).start()

    def _refresh(self) -> int:
        """Re-lists the trainers; returns the revision read at."""
        resp = self.client.range_pb(trainer_prefix(self.job), prefix=True, keys_only=True)
        n = len(trainer_prefix(self.job))
        self._set({kv.key.decode()[n:]: kv.mod_revision for kv in resp.kvs})
        return resp.header.revision

    def _set(self, revs: dict[str, int]) -> None:
        with self._cond:
            members = frozenset(revs)
            if members != self._members:
                self._members = members
                self.generation += 1
            if revs != self._revs:
                self._revs = revs
                self._cond.notify_all()

    def _follow(self) -> None:
        # A watch that ends with an error it cannot resume from (e.g. its
        # revision was compacted) is replaced by a fresh listing and a new
        # watch from the listing's revision: no change is missed.
        while not self._closed:
            try:
                for ev in self._watch:
                    name = ev.kv.key.decode()[len(trainer_prefix(self.job)):]
                    with self._mu:
                        revs = dict(self._revs)
                    if ev.type == "PUT":
                        revs[name] = ev.kv.mod_revision
                    else:
                        revs.pop(name, None)
                    self._set(revs)
                if self._closed:
                    return
            except errors.RaftpsError:
                pass
            self.rewatches += 1
            while not self._closed:
                try:
                    rev = self._refresh()
                    self._watch = self.client.watch(trainer_prefix(self.job), prefix=True, start_revision=rev + 1)
                    break
                except errors.RaftpsError:
                    time.sleep(0.2)
                except ValueError:  # the client was closed
                    return

    @property
    def lease_id(self) -> int:
        """The id of the lease the registration is on now (0 while it is
        being re-registered)."""
        lease = self._lease
        return lease.id if lease is not None else 0

    def members(self) -> frozenset[str]:
        with self._mu:
            return self._members

    def registration(self, name: str) -> int:
        """The mod revision of trainer ``name``'s key as last seen (0: not
        registered)."""
        with self._mu:
            return self._revs.get(name, 0)

    def wait_members(self, n: int, timeout: float) -> frozenset[str]:
        """Waits until at least n trainers are registered."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self._members) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise errors.DeadlineExceeded(f"{len(self._members)} trainers registered, want {n}")
                self._cond.wait(left)
            return self._members

    def close(self) -> None:
        """Deregisters (deletes the key, revokes the lease)."""
        self._closed = True
        self._watch.cancel()
        try:
            self.client.delete(self.key)
        except errors.RaftpsError:
            pass
        if self._lease is not None:
            try:
                self._lease.revoke()
            except errors.RaftpsError:
                pass

    def __enter__(self) -> "TrainerSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Task:
    """One task from the master: records [begin, end) of pass ``pass_``'s
    shuffled order (``records``: their indices), or an eval task."""

    def __init__(self, pb: job_pb2.Task, records: np.ndarray):
        self.pb = pb
        self.id, self.epoch, self.pass_ = pb.id, pb.epoch, getattr(pb, "pass")
        self.begin, self.end = pb.begin, pb.end
        self.eval = pb.kind == job_pb2.TASK_KIND_EVAL
        self.records = records
        self.loss_sum = 0.0
        self.examples = 0
        self.started = time.monotonic()


class TaskSource:
    """The master's task queue for one trainer (Go trainer.Run's loop).

    ``next()`` returns the next :class:`Task`, or None when the job is over;
    between tasks (WAIT, PASS_OVER) it leaves the pservers' sync steps
    (``ps.leave_step()``) and sleeps as the master asks. Master calls are
    retried through leader failover.
    """

    def __init__(self, client: Client, job: str, trainer: str, ps=None, spec: job_pb2.JobSpec | None = None,
                 max_wait: float = 5.0):
        self.client, self.job, self.trainer, self.ps = client, job, trainer, ps
        if spec is None:
            from raftps import jobs
            spec = jobs.status(client, job).spec
        self.spec = spec
        self.records = spec.dataset.records
        self.max_wait = max_wait
        self._perm: tuple[int, np.ndarray] | None = None
        self.tasks_done = 0
        self.stale_finishes = 0
        self.leave_failures = 0
        # on_wait(seconds), if set, replaces the sleep while the master has
        # no task for this trainer (allreduce mode: an empty step).
        self.on_wait: Callable[[float], None] | None = None

    def _retry(self, method: str, req):
        # One request id for every attempt: a GetTask or TaskFinished whose
        # answer was lost is answered again, not applied again.
        with self.client.request_id() as seq:
            while True:
                try:
                    return self.client.call("master", method, req, seq=seq)
                except (errors.Unavailable, errors.DeadlineExceeded):
                    time.sleep(0.2)

    def _leave(self) -> None:
        # Best effort, as Go's trainer: a slot that is down (or gone with
        # the job) has no step to leave; the pservers also drop a trainer
        # whose registration goes.
        if self.ps is not None:
            try:
                self.ps.leave_step(retries=8)
            except errors.RaftpsError:
                self.leave_failures += 1

    def permutation(self, pass_: int) -> np.ndarray:
        if self._perm is None or self._perm[0] != pass_:
            self._perm = (pass_, permutation(self.records, self.spec.seed, pass_))
        return self._perm[1]

    def next(self) -> Task | None:
        while True:
            resp = self._retry("GetTask", job_pb2.GetTaskRequest(job=self.job, trainer=self.trainer))
            if resp.result == job_pb2.GetTaskResponse.TASK and resp.HasField("task"):
                t = resp.task
                p = getattr(t, "pass")
                recs = self.permutation(p)[t.begin:t.end] if t.kind == job_pb2.TASK_KIND_TRAIN else np.empty(0, np.int64)
                return Task(t, recs)
            if resp.result == job_pb2.GetTaskResponse.JOB_OVER:
                self._leave()
                return None
            self._leave()
            wait = resp.retry_after_ms / 1000.0 if resp.retry_after_ms > 0 else 0.2
            if self.on_wait is not None:
                self.on_wait(min(wait, self.max_wait))
            else:
                time.sleep(min(wait, self.max_wait))

    def job_over(self) -> bool:
        """Whether the job has ended (succeeded, failed or cancelled), read
        from the master; False if it cannot be read now."""
        from raftps import jobs
        try:
            return jobs.status(self.client, self.job).state in jobs.TERMINAL
        except errors.NotFound:
            return True  # deleted
        except errors.RaftpsError:
            return False

    def finish(self, task: Task, loss: float | None = None, examples: int | None = None,
               accuracy: float = 0.0, step: int = 0) -> bool:
        """Reports a task finished (mean loss over its examples); returns
        whether the master accepted it (False for a requeued task's stale
        finish, which is harmless)."""
        n = task.examples if examples is None else examples
        if loss is None:
            loss = task.loss_sum / task.examples if task.examples else 0.0
        m = job_pb2.TaskMetrics(loss=loss, examples=n, accuracy=accuracy, step=step,
                                duration_ms=int((time.monotonic() - task.started) * 1000))
        resp = self._retry("TaskFinished", job_pb2.TaskFinishedRequest(
            job=self.job, task_id=task.id, epoch=task.epoch, trainer=self.trainer, metrics=m))
        self.tasks_done += 1
        if not resp.accepted:
            self.stale_finishes += 1
        return resp.accepted

    def fail(self, task: Task, reason: str) -> None:
        self._retry("TaskFailed", job_pb2.TaskFailedRequest(job=self.job, task_id=task.id, epoch=task.epoch,
                                                            trainer=self.trainer, reason=reason[:1000]))


class TaskBatches:
    """Mini-batches of record indices from the master's tasks: an iterable
    usable as a torch DataLoader ``batch_sampler`` (with num_workers=0) or
    directly.

    Each task's records are cut into batches of ``batch_size`` in order;
    when the batch after a task's last one is asked for, the task is
    reported finished with the mean of the losses given to ``record()``.
    Iteration ends when the job is over. Iterating again resumes where the
    last iteration stopped (an elastic restart does not lose the task);
    ``state_dict()``/``load_state_dict()`` save and restore the position in
    the current task (raftps.torch.elastic.TorchState does this at each
    commit). ``eval_fn(task) -> (loss, accuracy, examples)`` runs eval tasks
    (without one they are reported with no metrics).
    """

    def __init__(self, source: TaskSource, batch_size: int | None = None,
                 eval_fn: Callable[[Task], tuple[float, float, int]] | None = None):
        self.source = source
        self.batch_size = batch_size or source.spec.batch_size
        self.eval_fn = eval_fn
        self.task: Task | None = None
        self.cursor = 0  # next record position in the current task
        self.done = False
        self.steps = 0
        # on_over(), if set, runs each time an iteration ends with the job
        # (allreduce mode: joins the group's steps until every member is done).
        self.on_over: Callable[[], None] | None = None

    def job_over(self) -> bool:
        """Whether the job has ended (see TaskSource.job_over); if so the
        iteration is over too (elastic.run asks after a failure: a task
        resumed from a commit after the job ended would fail forever)."""
        if not self.done and self.source.job_over():
            self.done = True
        return self.done

    def record(self, loss: float, n: int) -> None:
        """Adds a trained batch's mean loss (n examples) to the task's metrics."""
        if self.task is not None:
            self.task.loss_sum += float(loss) * n
            self.task.examples += n

    def __iter__(self) -> Iterator[np.ndarray]:
        while not self.done:
            if self.task is not None and self.cursor >= len(self.task.records):
                self.source.finish(self.task)
                self.task = None
            if self.task is None:
                t = self.source.next()
                if t is None:
                    self.done = True
                    break
                if t.eval:
                    if self.eval_fn is not None:
                        loss, acc, n = self.eval_fn(t)
                        self.source.finish(t, loss=loss, examples=n, accuracy=acc)
                    else:
                        self.source.finish(t, loss=0.0, examples=0)
                    continue
                self.task, self.cursor = t, 0
                continue
            lo = self.cursor
            hi = min(lo + self.batch_size, len(self.task.records))
            self.cursor = hi
            self.steps += 1
            yield self.task.records[lo:hi]
        if self.on_over is not None:
            self.on_over()

    def __len__(self) -> int:  # DataLoader asks; an upper bound is not known
        return max(int(self.source.records // self.batch_size), 1)

    def state_dict(self) -> dict:
        t = self.task
        return {"task": None if t is None else (t.id, t.epoch), "cursor": self.cursor,
                "len": 0 if t is None else len(t.records),
                "loss_sum": 0.0 if t is None else t.loss_sum, "examples": 0 if t is None else t.examples}

    def load_state_dict(self, d: dict) -> None:
        """Goes back to the position of ``d`` in the current task; a ``d``
        taken at the end of the task before the current one, or between
        tasks (no task), means the current task's start."""
        t = self.task
        if t is None:
            return
        if d.get("task") == (t.id, t.epoch):
            self.cursor = d["cursor"]
            t.loss_sum, t.examples = d["loss_sum"], d["examples"]
        elif d.get("task") is None or d["cursor"] >= d["len"]:
            self.cursor = 0
            t.loss_sum, t.examples = 0.0, 0
