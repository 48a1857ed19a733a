"""Task-driven data for PyTorch: batches of the records the master hands
this trainer."""

from __future__ import annotations

from typing import Sequence

import torch

from raftps.tasks import TaskBatches


class TaskDataset(torch.utils.data.IterableDataset):
    """An IterableDataset of mini-batches ``tuple(t[idx] for t in tensors)``
    where idx are the record indices of the next batch of the current task
    (see :class:`raftps.tasks.TaskBatches`: tasks are reported finished
    after their last batch, the iteration ends with the job, and a new
    iteration resumes where the last one stopped). Use it with
    ``DataLoader(ds, batch_size=None)`` or iterate it directly.

    Also usable without it: ``TaskBatches`` is a DataLoader
    ``batch_sampler`` over any map-style dataset (num_workers=0).
    """

    def __init__(self, batches: TaskBatches, tensors: Sequence[torch.Tensor]):
        self.batches = batches
        self.tensors = tensors

    def __iter__(self):
        for idx in self.batches:
            i = torch.from_numpy(idx)
            yield tuple(t[i] for t in self.tensors)

    def record(self, loss: float, n: int) -> None:
        self.batches.record(loss, n)
