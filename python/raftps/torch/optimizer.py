"""DistributedOptimizer: a torch model trained by raftps's pservers."""

from __future__ import annotations

import math
from typing import Callable, Iterable

import numpy as np
import torch

from raftps import errors
from raftps.ps import ParamClient


def param_specs(model: torch.nn.Module, init: str = "torch") -> list[dict]:
    """The ``params`` list of an ``external`` job spec for ``model``: one
    dense parameter per ``model.named_parameters()`` entry, same name and
    shape.

    ``init="torch"`` mirrors PyTorch's default Linear/Conv initialization
    (uniform in ±1/sqrt(fan_in) for weights and biases, fan_in = the
    product of every dimension but the first of the layer's weight);
    otherwise ``init`` names a raftps initializer (INIT_ZEROS,
    INIT_UNIFORM, INIT_NORMAL, INIT_GLOROT) for every parameter.
    """
    out = []
    fan_in = None
    for name, p in model.named_parameters():
        shape = list(p.shape)
        d = {"name": name, "shape": shape}
        if init == "torch":
            if p.dim() >= 2:
                fan_in = math.prod(shape[1:])
            fi = fan_in or shape[0]
            d.update(init="INIT_UNIFORM", scale=1.0 / math.sqrt(fi))
        else:
            d["init"] = init
        out.append(d)
    return out


class GradScaled(torch.optim.Optimizer):
    """An optimizer whose param groups carry "grad_scale" (the factor a
    reset sets, Horovod's learning rate scaling), as a property."""

    @property
    def grad_scale(self) -> float:
        return self.param_groups[0]["grad_scale"]

    @grad_scale.setter
    def grad_scale(self, v: float) -> None:
        for g in self.param_groups:
            g["grad_scale"] = v


class DistributedOptimizer(GradScaled):
    """Trains ``named_parameters`` on the job's pservers.

    Construction pulls the parameters into the model. ``step()`` pushes
    every parameter's ``.grad`` (``examples`` weights the sync average; set
    it per batch with ``step(examples=n)`` or ``set_examples``), then pulls
    the new parameters into the model in place (no copy beyond the one out
    of the received message). In sync mode ``step()`` returns when the step
    has been applied with every trainer's gradients.

    A stale push (the sync step moved on without this trainer, e.g. it just
    joined) re-pulls and, given a ``closure`` that recomputes the loss and
    gradients, redoes the batch as Go's trainer does; without one the batch
    is dropped and ``step()`` returns None. Otherwise it returns the
    closure's loss (or True).

    The learning rate and optimizer live on the pservers (the job spec).
    ``grad_scale`` multiplies the gradients before the push; with SGD and
    momentum that is the learning rate scaled by it (e.g. rescaled by the
    trainer count in an elastic reset callback).

    ``DistributedOptimizer(model, session=session, mode="allreduce")``
    returns a :class:`raftps.torch.allreduce.AllreduceOptimizer` instead:
    the same script, gradients averaged over a Gloo group of the job's
    trainers. Both have ``rank`` and ``size``.

    Args:
        ps: the job's :class:`raftps.ps.ParamClient`, or the model (then
            ``session`` is required and names the job and trainer).
        named_parameters: ``model.named_parameters()``; names must be the
            job's param names. Parameters must be CPU float32 tensors.
        mode: "ps" (this class) or "allreduce".
        session: the trainer's :class:`raftps.tasks.TrainerSession` (used by
            elastic.TorchState to see trainer-set changes).
    """

    def __new__(cls, *args, mode: str = "ps", **kwargs):
        if mode == "allreduce":
            # Not a subclass: Python does not run __init__ again on it.
            from raftps.torch.allreduce import AllreduceOptimizer
            return AllreduceOptimizer(*args, **kwargs)
        if mode != "ps":
            raise errors.InvalidArgument(f"DistributedOptimizer: mode {mode!r} is not 'ps' or 'allreduce'")
        return super().__new__(cls)

    def __init__(self, ps, named_parameters: Iterable[tuple[str, torch.nn.Parameter]] | None = None,
                 session=None, examples: int = 1, mode: str = "ps"):
        if isinstance(ps, torch.nn.Module):  # DistributedOptimizer(model, session=session)
            if session is None:
                raise errors.InvalidArgument("DistributedOptimizer(model): session= is required")
            named_parameters = ps.named_parameters()
            ps = ParamClient(session.client, session.job, session.id)
        named = list(named_parameters)
        if not named:
            raise errors.InvalidArgument("DistributedOptimizer: no parameters")
        super().__init__([p for _, p in named], {"grad_scale": 1.0})
        self.ps, self.session = ps, session
        self.named = named
        self.examples = examples
        self.stale = 0
        self.steps = 0
        layout = ps.layout
        for n, p in named:
            lp = layout.by_name.get(n)
            if lp is None or lp.embedding:
                raise errors.InvalidArgument(f"DistributedOptimizer: {n!r} is not a dense param of job {ps.job!r}")
            if tuple(p.shape) != lp.shape or p.dtype != torch.float32 or p.device.type != "cpu":
                raise errors.InvalidArgument(
                    f"DistributedOptimizer: {n!r} is {tuple(p.shape)} {p.dtype} on {p.device}, job has {lp.shape} float32 on cpu")
        self.pull()

    @property
    def rank(self) -> int:
        """This trainer's place among the job's registered trainers (by
        name; 0 without a session)."""
        if self.session is None:
            return 0
        return sorted(self.session.members() | {self.session.id}).index(self.session.id)

    @property
    def size(self) -> int:
        """How many trainers are registered to the job (1 without a session)."""
        return len(self.session.members() | {self.session.id}) if self.session is not None else 1


    def set_examples(self, n: int) -> None:
        self.examples = n

    def attach(self, batches) -> None:
        """Gives a :class:`raftps.tasks.TaskBatches`' source this optimizer's
        ParamClient (it leaves the sync steps while the master has no task
        for this trainer); the allreduce optimizer's ``attach`` hooks the
        same place, so one script serves both modes."""
        batches.source.ps = self.ps

    def pull(self) -> None:
        """Pulls the parameters from the pservers into the model, in place."""
        with torch.no_grad():
            self.ps.pull({n: p.data.numpy() for n, p in self.named})

    def _grads(self) -> dict[str, np.ndarray]:
        s = self.grad_scale
        out = {}
        for n, p in self.named:
            if p.grad is None:
                continue
            g = p.grad.detach()
            if s != 1.0:
                g = g * s
            out[n] = g.contiguous().numpy()
        return out

    @torch.no_grad()
    def step(self, closure: Callable[[], torch.Tensor] | None = None, examples: int | None = None):
        if examples is not None:
            self.examples = examples
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        while True:
            try:
                self.ps.push(self._grads(), examples=self.examples)
                break
            except errors.StalePush:
                self.stale += 1
                self.pull()
                if closure is None:
                    return None
                with torch.enable_grad():
                    self.zero_grad()
                    loss = closure()
        self.pull()
        self.steps += 1
        return loss if loss is not None else True

    def leave_step(self) -> None:
        """Leaves the pservers' sync steps until the next push."""
        self.ps.leave_step()
