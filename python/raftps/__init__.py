"""raftps for Python: a client of a raftps cluster and PyTorch trainers on
its parameter servers.

Layers, each usable alone:

- :class:`raftps.Client` (raftps.client): KV, Txn, leases, watches, status.
- :mod:`raftps.jobs`: submit, status, cancel, job events.
- :mod:`raftps.ps`: a job's parameters as numpy float32 arrays (pull/push).
- :mod:`raftps.tasks`: the master's task queue as a data source.
- :mod:`raftps.torch`: DistributedOptimizer and elastic (Horovod-style);
  ``Store``, a torch.distributed.Store on raftps's KV.
- ``python3 -m raftps.torchrun``: torchrun with the ``raftps`` rendezvous
  backend (:mod:`raftps.torch.rendezvous`).
- :mod:`raftps.checkpoint`: load an exported safetensors checkpoint.

Errors are :mod:`raftps.errors` classes, one per gRPC status code.
Mutual TLS: :class:`raftps.TLS` (raftps.tls), or ``Client(cacert=, cert=,
key=)``, or RAFTPS_CACERT, RAFTPS_CERT, RAFTPS_KEY.
"""

from raftps.client import Client, Event, KeyValue, Lease, Watcher, prefix_end
from raftps.errors import (
    Aborted, AlreadyExists, DeadlineExceeded, FailedPrecondition, Fenced, Internal,
    InvalidArgument, LeaseLost, NotFound, OutOfRange, PermissionDenied, RaftpsError, StalePush,
    Unavailable,
)
from raftps.tls import TLS

__all__ = [
    "Client", "Event", "KeyValue", "Lease", "Watcher", "prefix_end",
    "RaftpsError", "NotFound", "InvalidArgument", "Unavailable", "FailedPrecondition",
    "DeadlineExceeded", "AlreadyExists", "Aborted", "OutOfRange", "Internal", "StalePush",
    "Fenced", "LeaseLost", "PermissionDenied", "TLS",
]
__version__ = "0.1.0"
