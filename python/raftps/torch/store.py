"""raftps.torch.Store: a ``torch.distributed.Store`` over raftps's
Raft-replicated KV, for ``init_process_group("gloo", store=...)`` and
torchrun's rendezvous.

    client = raftps.Client()                       # RAFTPS_ENDPOINTS, RAFTPS_CACERT/CERT/KEY
    store = raftps.torch.Store(client, "exp-1")    # keys under /torch/store/exp-1/
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2)

A TCPStore lives in one training process: when its host dies, every
process of the group loses its store. This store lives on every raftps
node: a call that finds its node dead is retried on another
(:class:`raftps.Client`), and a ``wait`` resumes its watch there, so the
group keeps working while a majority of raftps nodes is up.

Semantics (those of c10d's TCPStore):

- keys are ``str``, values ``bytes``; every key is stored under the job's
  prefix ``/torch/store/<job>/`` (``prefix=`` to change it);
- ``get`` waits for a missing key up to the store's timeout;
- ``add`` keeps a decimal integer (``get`` reads it as ``b"3"``) and is
  atomic: a Txn that compares the key's mod revision, retried on a lost
  race, applied once even if an answer is lost (request ids);
- ``compare_set(key, expected, desired)`` writes ``desired`` if the key
  holds ``expected`` (or is missing and ``expected`` is empty) and returns
  the value after the call;
- ``wait`` blocks on a watch of the keys (no polling) and raises
  :class:`raftps.errors.DeadlineExceeded` after the timeout;
- every key is written on the store's lease (``ttl`` seconds, kept alive
  by a thread): when the process that wrote a key dies, or ``close()`` is
  called, its keys go once the lease expires or is revoked.

Under mutual TLS the client's certificate must be allowed to write the
prefix: an admin certificate, or a trainer certificate for the job (it
writes single keys under ``/torch/store/<its job>/``, not another prefix).
"""

from __future__ import annotations

import datetime
import time
from typing import Sequence

import torch.distributed as dist

from raftps import errors
from raftps.client import Client, KeyValue, prefix_end

DEFAULT_TIMEOUT = datetime.timedelta(seconds=300)  # torch's default_pg_timeout


def store_prefix(job: str) -> str:
    """The keys of a job's store: ``/torch/store/<job>/``."""
    if not job or "/" in job:
        raise errors.InvalidArgument(f"raftps.torch.Store: job {job!r} must be a non-empty name without '/'")
    return f"/torch/store/{job}/"


class Store(dist.Store):
    """A ``torch.distributed.Store`` on a raftps cluster (see the module doc).

    Args:
        client: a :class:`raftps.Client` (the store does not close it).
        job: the name whose prefix holds the keys (``/torch/store/<job>/``).
        ttl: seconds of the store's lease (the keys of a dead process go
            this long after its last keepalive).
        timeout: how long ``get`` and ``wait`` wait for a key (a
            ``datetime.timedelta``; ``set_timeout`` changes it).
        prefix: the key prefix instead of the job's.
    """

    def __init__(self, client: Client, job: str = "", *, ttl: int = 30,
                 timeout: datetime.timedelta = DEFAULT_TIMEOUT, prefix: str | None = None):
        super().__init__()
        self.client = client
        self.prefix = (prefix if prefix is not None else store_prefix(job)).encode()
        super().set_timeout(timeout)  # the ``timeout`` property, read by torch too
        self.lease = client.lease(ttl)

    # -- helpers -----------------------------------------------------------

    def _key(self, key: str) -> bytes:
        return self.prefix + key.encode()

    def _seconds(self, timeout: datetime.timedelta | None) -> float:
        t = self.timeout if timeout is None else timeout
        return t.total_seconds()

    @staticmethod
    def _bytes(value) -> bytes:
        return value.encode() if isinstance(value, str) else bytes(value)

    # -- torch.distributed.Store -------------------------------------------

    def set(self, key: str, value) -> None:
        """Writes ``value`` (bytes or str) under ``key``."""
        self.client.put(self._key(key), self._bytes(value), lease=self.lease.id)

    def get(self, key: str) -> bytes:
        """The key's value, waiting for the key up to the store's timeout
        (DeadlineExceeded after it)."""
        k = self._key(key)
        deadline = time.monotonic() + self._seconds(None)
        while True:
            kv = self.client.get(k)
            if kv is not None:
                return kv.value
            # Deleted between the wait and the read: wait again.
            self.wait([key], datetime.timedelta(seconds=max(deadline - time.monotonic(), 0)))

    def add(self, key: str, amount: int) -> int:
        """Adds ``amount`` to the integer under ``key`` (missing: 0) and
        returns the sum; atomic (compare on the key's mod revision, retried
        on a lost race)."""
        c = self.client
        k = self._key(key)
        kv = c.get(k)
        while True:
            rev = kv.mod_revision if kv is not None else 0
            try:
                cur = int(kv.value) if kv is not None else 0
            except ValueError:
                raise errors.InvalidArgument(f"raftps.torch.Store.add: key {key!r} holds {kv.value[:32]!r}, "
                                             "not an integer") from None
            new = cur + int(amount)
            resp = c.txn([c.cmp_mod_revision(k, "==", rev)], [c.op_put(k, str(new), self.lease.id)], [c.op_get(k)])
            if resp.succeeded:
                return new
            kvs = resp.responses[0].response_range.kvs
            kv = KeyValue.from_pb(kvs[0]) if kvs else None

    def compare_set(self, key: str, expected, desired) -> bytes:
        """Writes ``desired`` if the key holds ``expected`` (or is missing
        and ``expected`` is empty); returns the key's value after the call
        (``expected`` if the key is missing and ``expected`` is not empty,
        as TCPStore)."""
        c = self.client
        k, exp, want = self._key(key), self._bytes(expected), self._bytes(desired)
        while True:
            resp = c.txn([c.cmp_value(k, "==", exp)], [c.op_put(k, want, self.lease.id)], [c.op_get(k)])
            if resp.succeeded:
                return want
            kvs = resp.responses[0].response_range.kvs
            if kvs:
                return kvs[0].value
            if exp:
                return exp
            # Missing and expected empty: create it unless someone just did.
            resp = c.txn([c.cmp_version(k, "==", 0)], [c.op_put(k, want, self.lease.id)], [c.op_get(k)])
            if resp.succeeded:
                return want

    def check(self, keys: Sequence[str]) -> bool:
        """Whether every key exists now."""
        return self._missing(keys)[0] == set()

    def _missing(self, keys: Sequence[str]) -> tuple[set[bytes], int]:
        """The keys missing now and the revision read at (one Txn)."""
        c = self.client
        ks = [self._key(k) for k in keys]
        resp = c.txn(success=[c.op_get(k) for k in ks])
        have = {r.response_range.kvs[0].key for r in resp.responses if r.response_range.kvs}
        return set(ks) - have, resp.header.revision

    def wait(self, keys: Sequence[str], timeout: datetime.timedelta | None = None) -> None:
        """Blocks until every key exists (a watch of the store's prefix
        from the revision the keys were read at: no polling, no missed
        write); DeadlineExceeded after ``timeout`` (default the store's)."""
        missing, rev = self._missing(keys)
        if not missing:
            return
        deadline = time.monotonic() + self._seconds(timeout)
        with self.client.watch(self.prefix, prefix=True, start_revision=rev + 1) as w:
            while missing:
                left = deadline - time.monotonic()
                if left <= 0:
                    names = sorted(k[len(self.prefix):].decode() for k in missing)
                    raise errors.DeadlineExceeded(
                        f"raftps.torch.Store.wait: keys {names} not set within {self._seconds(timeout):g}s")
                ev = w.get(timeout=left)
                if ev is None:
                    continue
                if ev.type == "PUT":
                    missing.discard(ev.kv.key)

    def delete_key(self, key: str) -> bool:
        """Deletes ``key``; whether it existed."""
        return self.client.delete(self._key(key)) > 0

    def num_keys(self) -> int:
        """How many keys the store holds."""
        p = self.prefix
        return self.client.range_pb(p, prefix_end(p), count_only=True).count

    def set_timeout(self, timeout: datetime.timedelta) -> None:
        """How long ``get`` and ``wait`` wait from now on."""
        super().set_timeout(timeout)

    def close(self) -> None:
        """Revokes the store's lease: the keys this store wrote go now."""
        self.lease.revoke()

