"""raftps.torch.rendezvous: torchrun's dynamic rendezvous on a raftps
cluster (``--rdzv_backend raftps``), so that the rendezvous outlives any
one node: c10d's backend keeps its state in a TCPStore inside one agent,
torch's etcd backends need the etcd v2 API.

    python3 -m raftps.torchrun --nnodes 1:3 --nproc_per_node 1 \\
        --rdzv_backend raftps --rdzv_endpoint 127.0.0.1:7000,127.0.0.1:7010 \\
        --rdzv_id exp-1 train.py

``--rdzv_endpoint`` is the raftps endpoints (comma-separated; default
RAFTPS_ENDPOINTS); mutual TLS comes from RAFTPS_CACERT, RAFTPS_CERT and
RAFTPS_KEY (:class:`raftps.Client`). ``--rdzv_conf`` also takes
``read_timeout`` (seconds of one raftps call, default 60) and
``lease_ttl`` (seconds, the store's lease, default 30), besides torch's
``join_timeout``, ``last_call_timeout`` and ``close_timeout``.

The run id is a job name: the rendezvous lives in that job's torch store,
``/torch/store/<run_id>/rendezvous/``, so a trainer certificate of the
job (``raftps tls cert create --role trainer --job <run_id>``, or a
pattern such as ``'exp-*'``) is all an agent needs; other certificates
are refused (PermissionDenied). The state (torch's pickled rendezvous
state, opaque here) is the key ``.../rendezvous/state``; its fencing
token is the key's mod revision, and ``set_state`` is a Txn that writes
only if the mod revision is still the token's (compare-and-swap, checked
by the cluster, not by a clock). The handler's store is a
:class:`raftps.torch.Store` under ``.../rendezvous/store/``.

:func:`register` adds the backend to torch's handler registry (torch 1.13:
``python3 -m raftps.torchrun`` calls it); newer torch finds it through
the ``torchrun.handlers`` entry point of the package.
"""

from __future__ import annotations

import datetime
from typing import Optional, Tuple

from torch.distributed.elastic.rendezvous import RendezvousParameters, rendezvous_handler_registry
from torch.distributed.elastic.rendezvous.api import RendezvousConnectionError
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
    RendezvousBackend, Token, create_handler as _dynamic_handler,
)

from raftps import errors
from raftps.client import Client
from raftps.torch.store import Store, store_prefix

NAME = "raftps"


def rendezvous_prefix(run_id: str) -> str:
    """The keys of a run's rendezvous, in the torch store of the job named
    ``run_id``: ``/torch/store/<run_id>/rendezvous/``."""
    if not run_id or "/" in run_id:
        raise ValueError(f"raftps rendezvous: run id {run_id!r} must be a non-empty name without '/'")
    return store_prefix(run_id) + "rendezvous/"


class RaftpsRendezvousBackend(RendezvousBackend):
    """A ``RendezvousBackend`` on a raftps cluster: the state is one key,
    its fencing token the key's mod revision (an int).

    Raises RendezvousConnectionError when the cluster cannot be reached
    (every endpoint tried within the client's timeout)."""

    def __init__(self, client: Client, run_id: str):
        self.client = client
        self.key = (rendezvous_prefix(run_id) + "state").encode()

    @property
    def name(self) -> str:
        return NAME

    def _call(self, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (errors.Unavailable, errors.DeadlineExceeded) as e:
            raise RendezvousConnectionError(f"raftps rendezvous: the cluster is unreachable: {e}") from e

    def get_state(self) -> Optional[Tuple[bytes, Token]]:
        """The state and its fencing token (mod revision), or None."""
        kv = self._call(self.client.get, self.key)
        return None if kv is None else (kv.value, kv.mod_revision)

    def set_state(self, state: bytes, token: Optional[Token] = None) -> Optional[Tuple[bytes, Token, bool]]:
        """Writes ``state`` if the stored state's token is ``token`` (None:
        if there is no state). Returns the state after the call, its token
        and whether this write made it; None if there is no state (it was
        deleted under us)."""
        c = self.client
        if token is None:
            cmp = c.cmp_version(self.key, "==", 0)
        elif isinstance(token, int) and not isinstance(token, bool):
            cmp = c.cmp_mod_revision(self.key, "==", token)
        else:  # not one of ours: cannot match
            cur = self.get_state()
            return None if cur is None else (*cur, False)
        resp = self._call(c.txn, [cmp], [c.op_put(self.key, bytes(state))], [c.op_get(self.key)])
        if resp.succeeded:
            return bytes(state), resp.header.revision, True
        kvs = resp.responses[0].response_range.kvs
        return (kvs[0].value, kvs[0].mod_revision, False) if kvs else None


def create_backend(params: RendezvousParameters) -> Tuple[RaftpsRendezvousBackend, Store]:
    """The backend and the handler's store for torchrun's parameters:
    ``endpoint`` = raftps endpoints, ``run_id``, and the ``read_timeout``
    and ``lease_ttl`` settings of ``--rdzv_conf``."""
    timeout = params.get_as_int("read_timeout", 60)
    ttl = params.get_as_int("lease_ttl", 30)
    if timeout <= 0 or ttl <= 0:
        raise ValueError(f"raftps rendezvous: read_timeout {timeout} and lease_ttl {ttl} must be positive seconds")
    client = Client(params.endpoint or None, timeout=float(timeout))
    try:
        backend = RaftpsRendezvousBackend(client, params.run_id)
        store = Store(client, prefix=rendezvous_prefix(params.run_id) + "store/", ttl=ttl,
                      timeout=datetime.timedelta(seconds=timeout))
    except errors.RaftpsError as e:
        client.close()
        raise RendezvousConnectionError(f"raftps rendezvous: {e}") from e
    return backend, store


def create_rendezvous_handler(params: RendezvousParameters):
    """torch's DynamicRendezvousHandler on the raftps backend."""
    backend, store = create_backend(params)
    return _dynamic_handler(store, backend, params)


def register() -> None:
    """Registers the ``raftps`` backend in torch's handler registry (a
    second call is a no-op)."""
    rendezvous_handler_registry.register(NAME, create_rendezvous_handler)


def torchrun_handler():
    """The ``torchrun.handlers`` entry point (newer torch): the creator."""
    return create_rendezvous_handler
