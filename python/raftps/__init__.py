"""raftps for Python: a client of a raftps cluster and PyTorch trainers on
its parameter servers.

Layers, each usable alone:

- :class:`raftps.Client` (raftps.client): KV, Txn, leases, watches, status.
- :mod:`raftps.jobs`: submit, status, cancel, job events.
- :mod:`raftps.ps`: a job's parameters as numpy float32 arrays (pull/push).
- :mod:`raftps.tasks`: the master's task queue as a data source.
- :mod:`raftps.torch`: DistributedOptimizer and elastic (Horovod-style).
- :mod:`raftps.checkpoint`: load an exported safetensors checkpoint.

Errors are :mod:`raftps.errors` classes, one per gRPC status code.
"""

from raftps.client import Client, Event, KeyValue, Lease, Watcher, prefix_end
from raftps.errors import (
    Aborted, AlreadyExists, DeadlineExceeded, FailedPrecondition, Fenced, Internal,
    InvalidArgument, LeaseLost, NotFound, OutOfRange, RaftpsError, StalePush, Unavailable,
)

__all__ = [
    "Client", "Event", "KeyValue", "Lease", "Watcher", "prefix_end",
    "RaftpsError", "NotFound", "InvalidArgument", "Unavailable", "FailedPrecondition",
    "DeadlineExceeded", "AlreadyExists", "Aborted", "OutOfRange", "Internal", "StalePush",
    "Fenced", "LeaseLost",
]
__version__ = "0.1.0"
