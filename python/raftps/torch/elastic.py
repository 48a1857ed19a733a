"""Horovod Elastic's API on raftps: ``run``, ``TorchState``,
``HostsUpdatedInterrupt``.

    state = elastic.TorchState(model, opt, batches=batches, epoch=0)
    state.register_reset_callbacks([lambda: set_lr(len(session.members()))])

    @elastic.run
    def train(state):
        for idx in state.batches:              # raftps.tasks.TaskBatches
            ...; opt.step(); state.commit()    # may raise HostsUpdatedInterrupt

    train(state)

Semantics, as Horovod's:

- ``commit()`` saves a copy of the model, optimizer and user state, then
  checks the job's trainer set (the keys under /jobs/<job>/trainers/,
  followed by the trainer's :class:`raftps.tasks.TrainerSession`): if it
  changed since the last reset — a trainer joined, or died and its lease
  expired — it raises :class:`HostsUpdatedInterrupt`, on every live
  trainer at its next commit.
- ``run`` catches it, runs the reset callbacks once (per interrupt, which
  covers every change seen until then), syncs (pulls the parameters from
  the pservers) and calls the function again, which resumes from the
  state (TaskBatches resume inside their task).
- On a failure (a :mod:`raftps.errors` Unavailable / DeadlineExceeded /
  Aborted that outlived the client's retries, or :class:`TrainerFailure`)
  ``run`` first asks whether the job has ended (a TaskBatches in the user
  state asks the master): then its pservers are gone, the task could never
  be pushed, and ``run`` returns None without restoring. A job ends under
  a live trainer's task when the task's other copy finished it last: the
  master's speculative backup of a slow task at the end of a pass (first
  copy to finish wins), or a requeue after this trainer's lease lapsed.
  Otherwise ``run`` restores the last commit (model, optimizer, user
  state, the TaskBatches position), runs the reset callbacks, syncs and
  goes on. Other exceptions propagate.

The parameters themselves live on the pservers, which are the source of
truth: ``sync()`` pulls them (where Horovod broadcasts rank 0's).
"""

from __future__ import annotations

import copy
import functools
from typing import Callable

import torch

from raftps import errors


class HostsUpdatedInterrupt(RuntimeError):
    """The job's trainer set changed; raised by ``State.commit()``."""

    def __init__(self, skip_sync: bool = False, members=None):
        super().__init__("raftps: the job's trainer set changed")
        self.skip_sync = skip_sync
        self.members = members


class TrainerFailure(RuntimeError):
    """Raise it (or let an error it wraps) to make ``run`` restore the last
    commit and go on."""


RECOVERABLE = (errors.Unavailable, errors.DeadlineExceeded, errors.Aborted, TrainerFailure)


class State:
    """Base of TorchState: user state as attributes, commits, reset callbacks."""

    def __init__(self, session=None, **user_state):
        self._session = session
        self._reset_callbacks: list[Callable[[], None]] = []
        self._user_keys = list(user_state)
        for k, v in user_state.items():
            setattr(self, k, v)
        self._known_gen = session.generation if session is not None else 0
        self.commits = 0
        self.sync_failures = 0
        self.resets = 0
        self.restores = 0
        self.last_failure = ""  # the error of the last restore (type: message)
        self._saved_user: dict = {}

    def register_reset_callbacks(self, callbacks) -> None:
        """Callbacks run (in order, no arguments) after each reset: a
        trainer-set change or a restore after a failure."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self) -> None:
        if self._session is not None:
            self._known_gen = self._session.generation
        self.resets += 1
        for cb in self._reset_callbacks:
            cb()

    def members(self) -> frozenset:
        return self._session.members() if self._session is not None else frozenset()

    def check_host_updates(self) -> None:
        """Raises HostsUpdatedInterrupt if the trainer set changed since the
        last reset."""
        if self._session is not None and self._session.generation != self._known_gen:
            raise HostsUpdatedInterrupt(skip_sync=False, members=self._session.members())

    def commit(self) -> None:
        """Saves the state, then checks for trainer-set changes."""
        self.save()
        self.commits += 1
        self.check_host_updates()

    def _save_user(self) -> None:
        d = {}
        for k in self._user_keys:
            v = getattr(self, k)
            d[k] = ("sd", v.state_dict()) if hasattr(v, "state_dict") and hasattr(v, "load_state_dict") \
                else ("v", copy.deepcopy(v))
        self._saved_user = d

    def _restore_user(self) -> None:
        for k, (kind, v) in self._saved_user.items():
            if kind == "sd":
                getattr(self, k).load_state_dict(copy.deepcopy(v))
            else:
                setattr(self, k, copy.deepcopy(v))

    def save(self) -> None:
        self._save_user()

    def restore(self) -> None:
        self._restore_user()
        self.restores += 1

    def sync(self) -> None:
        pass

    def job_over(self) -> bool:
        """Whether a user-state value that knows its job (a TaskBatches:
        ``job_over()``) reports the job ended."""
        for k in self._user_keys:
            f = getattr(getattr(self, k, None), "job_over", None)
            if callable(f) and f():
                return True
        return False


class TorchState(State):
    """State of a PyTorch trainer: the model, its DistributedOptimizer and
    any user state (``epoch=0``, a TaskBatches, ...) as attributes.
    ``session`` defaults to the optimizer's."""

    def __init__(self, model: torch.nn.Module, optimizer, session=None, **user_state):
        self.model, self.optimizer = model, optimizer
        super().__init__(session=session or getattr(optimizer, "session", None), **user_state)
        if hasattr(optimizer, "on_idle_update"):
            # Allreduce mode: an update applied while this trainer has no
            # batch (or its job is over) is saved as a commit would.
            optimizer.on_idle_update = self.save
        self.save()

    def save(self) -> None:
        self._model_state = copy.deepcopy(self.model.state_dict())
        self._opt_state = copy.deepcopy(self.optimizer.state_dict())
        super().save()

    def restore(self) -> None:
        self.model.load_state_dict(self._model_state)
        self.optimizer.load_state_dict(self._opt_state)
        self._failed = True
        super().restore()

    @property
    def rank(self) -> int:
        """This trainer's rank (the optimizer's: group rank in allreduce
        mode, place among the registered trainers in PS mode)."""
        return self.optimizer.rank

    @property
    def size(self) -> int:
        """How many trainers train together (the optimizer's)."""
        return self.optimizer.size

    def check_host_updates(self) -> None:
        """PS mode: the trainer set changed since the last reset. Allreduce
        mode: the group must re-form (a newer generation, a member gone, an
        eligible trainer waiting)."""
        updated = getattr(self.optimizer, "hosts_updated", None)
        if updated is None:
            return super().check_host_updates()
        if updated():
            raise HostsUpdatedInterrupt(skip_sync=False, members=self.members())

    def on_reset(self) -> None:
        """Allreduce mode re-forms the group first (a new generation after a
        failure), so the callbacks see the new rank and size."""
        reform = getattr(self.optimizer, "reform", None)
        if reform is not None:
            reform(getattr(self, "_failed", False))
        self._failed = False
        super().on_reset()

    def sync(self) -> None:
        """Allreduce mode: broadcasts rank 0's model and optimizer state.
        PS mode: see below."""
        bcast = getattr(self.optimizer, "sync", None)
        if bcast is not None:
            return bcast()
        self._pull()

    def _pull(self) -> None:
        """Pulls the parameters from the pservers (the source of truth). A
        pull that fails with a recoverable error (e.g. the job just ended
        and its slots are gone, or a slot is down) is counted in
        ``sync_failures`` and skipped: the model keeps the last commit, and
        the next push fails and restores again if the pservers are still
        unreachable, or the task source reports the job over."""
        pull = getattr(self.optimizer, "pull", None)
        if pull is not None:
            try:
                pull()
            except RECOVERABLE:
                self.sync_failures += 1


def run(func):
    """Decorator: runs ``func(state, ...)`` until it returns, resetting on
    HostsUpdatedInterrupt and restoring the last commit on a failure (see
    the module doc)."""

    @functools.wraps(func)
    def wrapper(state: State, *args, **kwargs):
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()  # allreduce mode: a collective, which may fail too
                return func(state, *args, **kwargs)
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
            except RECOVERABLE as e:
                state.last_failure = f"{type(e).__name__}: {e}"
                # Asked first: a job that ended under this trainer (its
                # task's other copy, a speculative backup or a requeue,
                # finished the last task) took its pservers away; that
                # is no fault to roll back from.
                if state.job_over():
                    return None
                state.restore()
                skip_sync = False
            state.on_reset()

    return wrapper
