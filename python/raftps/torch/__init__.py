"""raftps.torch: PyTorch trainers on raftps's parameter servers.

- :class:`DistributedOptimizer`: after ``loss.backward()``, ``step()``
  pushes the gradients to the pservers (which apply the job's optimizer)
  and pulls the updated parameters back into the model: the
  parameter-server counterpart of ``hvd.DistributedOptimizer``.
- :mod:`raftps.torch.elastic`: ``run``, ``TorchState``,
  ``HostsUpdatedInterrupt`` (Horovod Elastic's API).
- :mod:`raftps.torch.allreduce`: the allreduce mode
  (``DistributedOptimizer(model, session=..., mode="allreduce")``, init,
  rank, size, allreduce, broadcast_parameters, broadcast_optimizer_state).
- :class:`Store`: a ``torch.distributed.Store`` on raftps's replicated KV
  (Gloo process groups and torchrun rendezvous that outlive any one node).
- :class:`TaskDataset` / :func:`param_specs`: the master's tasks as a data
  source; a model's parameter list for an ``external`` job spec.
"""

from raftps.torch.optimizer import DistributedOptimizer, param_specs
from raftps.torch.data import TaskDataset
from raftps.torch import elastic
from raftps.torch.store import Store
from raftps.torch import allreduce

__all__ = ["DistributedOptimizer", "param_specs", "TaskDataset", "elastic", "Store", "allreduce"]
