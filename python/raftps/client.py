"""raftps.Client: the metadata API of a raftps cluster (KV, Txn, leases,
watches, cluster status) over gRPC, like etcd's clientv3.

Any node serves every call (followers forward writes to the leader), so
the client tries its endpoints in turn: a call that gets Unavailable or
times out on one node is retried on the next until its timeout passes.
Every call takes ``timeout`` (seconds; default the client's). Errors are
:mod:`raftps.errors` classes carrying the server's gRPC code and message.

    with raftps.Client(["127.0.0.1:7000", "127.0.0.1:7010"]) as c:
        rev = c.put("/hello", b"world")
        kv = c.get("/hello")                       # KeyValue or None
        ok = c.txn(compare=[c.cmp_value("/hello", "==", b"world")],
                   success=[c.op_put("/hello", b"next")]).succeeded
        with c.lease(ttl=5) as lease:              # kept alive by a thread
            c.put("/alive", b"1", lease=lease.id)
        for ev in c.watch("/jobs/", prefix=True, start_revision=rev):
            ...                                    # resumes across node deaths

``raftps.Client()`` with no endpoints reads RAFTPS_ENDPOINTS (a
comma-separated list) and RAFTPS_COMMAND_TIMEOUT as the Go CLI does.

Security: a cluster runs mutual TLS unless its nodes were started with
--insecure. Give the cluster CA and a client certificate and key
(``cacert=``, ``cert=``, ``key=``, or a :class:`raftps.TLS`, or the
environment variables RAFTPS_CACERT, RAFTPS_CERT, RAFTPS_KEY as the Go CLI
takes them); without any the client speaks plaintext. A call the
certificate's role does not allow raises PermissionDenied.

Exactly-once writes: every write (Put, DeleteRange, Txn, lease grant and
revoke, job and task calls) carries a request id, the client's random id
and a sequence number (gRPC metadata raftps-client-id, raftps-seq,
raftps-acked: api/rpctypes.RequestID), the same on each retry. A write
whose node applied it but whose answer was lost (the node died, a timeout)
is retried on another node and not applied again: the cluster answers the
retry with the first result (fsm/session.go), as for Go's client.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import queue
import re
import secrets
import threading
import time
from typing import Iterable, Iterator, Sequence

import grpc

from raftps import errors
from raftps import tls as _tls
from raftps.v1 import job_pb2_grpc, kv_pb2, kv_pb2_grpc

DEFAULT_TIMEOUT = 10.0
# The Go CLI's --endpoints: its environment variable and default.
ENV_ENDPOINTS, DEFAULT_ENDPOINT = "RAFTPS_ENDPOINTS", "127.0.0.1:7000"
# The Go CLI's --command-timeout (a Go duration: "10s", "1m30s", "500ms").
ENV_COMMAND_TIMEOUT = "RAFTPS_COMMAND_TIMEOUT"
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|\u00b5s|ms|s|m|h)")


def go_duration(text: str, what: str = "duration") -> float:
    """Seconds of a positive Go duration string ("10s", "1m30s", "250ms"),
    as the Go CLI's duration flags take them. Raises InvalidArgument."""
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise errors.InvalidArgument(f"{what}={text!r}: not a duration (e.g. 10s, 1m30s, 500ms)")
    secs = sum(float(n) * _DURATION_UNITS[u] for n, u in parts)
    if secs <= 0:
        raise errors.InvalidArgument(f"{what}={text!r}: must be positive")
    return secs
_MAX_MSG = 1 << 30
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", _MAX_MSG),
    ("grpc.max_send_message_length", _MAX_MSG),
    ("grpc.enable_retries", 0),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]

# Methods that change state: their calls carry a request id (exactly-once).
WRITES = frozenset({
    ("kv", "Put"), ("kv", "DeleteRange"), ("kv", "Txn"), ("lease", "LeaseGrant"), ("lease", "LeaseRevoke"),
    ("master", "SubmitJob"), ("master", "CancelJob"), ("master", "DeleteJob"), ("master", "GetTask"),
    ("master", "TaskFinished"), ("master", "TaskFailed"),
})

# gRPC metadata keys of a request id (api/rpctypes/request.go).
MD_CLIENT_ID, MD_SEQ, MD_ACKED = "raftps-client-id", "raftps-seq", "raftps-acked"


def prefix_end(prefix: bytes) -> bytes:
    """The range end covering every key with ``prefix`` (etcd's
    GetPrefixRangeEnd; schema.PrefixEnd in Go)."""
    end = bytearray(prefix)
    for i in range(len(end) - 1, -1, -1):
        if end[i] < 0xFF:
            end[i] += 1
            return bytes(end[: i + 1])
    return b"\x00"


def _b(x: bytes | str) -> bytes:
    return x.encode() if isinstance(x, str) else bytes(x)


@dataclasses.dataclass(frozen=True)
class KeyValue:
    """One key: value and revisions (create/mod revision, version, lease)."""

    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int

    @classmethod
    def from_pb(cls, kv: kv_pb2.KeyValue) -> "KeyValue":
        return cls(kv.key, kv.value, kv.create_revision, kv.mod_revision, kv.version, kv.lease)


@dataclasses.dataclass(frozen=True)
class Event:
    """A watch event: type "PUT" or "DELETE", the key after the event
    (``kv.mod_revision`` is the event's revision) and the previous key if
    asked for."""

    type: str
    kv: KeyValue
    prev_kv: KeyValue | None

    @property
    def revision(self) -> int:
        return self.kv.mod_revision


class Client:
    """A connection to a raftps cluster.

    Args:
        endpoints: gRPC addresses ("host:port") of nodes, a list or a
            comma-separated string; default RAFTPS_ENDPOINTS, else
            127.0.0.1:7000 (the Go CLI's --endpoints and its default).
        timeout: default timeout of each call in seconds (retries on other
            endpoints included); default RAFTPS_COMMAND_TIMEOUT (a Go
            duration, as the CLI's --command-timeout), else 10.
        cacert, cert, key: PEM files of the cluster CA, the client
            certificate and its key (mutual TLS); each missing one is read
            from RAFTPS_CACERT, RAFTPS_CERT, RAFTPS_KEY. All three or none.
        tls: a :class:`raftps.TLS` (instead of the three paths).
        insecure: plaintext even if the environment names TLS files (for
            nodes started with --insecure).
        interceptors: gRPC client interceptors wrapped around every channel
            (tests use them to lose answers).

    Raises InvalidArgument for no endpoints or an incomplete or unreadable
    set of TLS files.
    """

    def __init__(self, endpoints: Sequence[str] | str | None = None, timeout: float | None = None, *,
                 cacert: str | None = None, cert: str | None = None, key: str | None = None,
                 tls: "_tls.TLS | None" = None, insecure: bool = False, interceptors: Sequence = ()):
        if endpoints is None:
            endpoints = os.environ.get(ENV_ENDPOINTS, DEFAULT_ENDPOINT)
        if isinstance(endpoints, str):
            endpoints = endpoints.split(",")
        self.endpoints = [e.strip() for e in endpoints if e and e.strip()]
        if not self.endpoints:
            raise errors.InvalidArgument("raftps.Client: no endpoints")
        if timeout is None:
            env = os.environ.get(ENV_COMMAND_TIMEOUT)
            timeout = go_duration(env, ENV_COMMAND_TIMEOUT) if env else DEFAULT_TIMEOUT
        self.timeout = timeout
        if insecure:
            self.tls = None
        else:
            self.tls = tls if tls is not None else _tls.TLS.resolve(cacert, cert, key)
        # credentials are shared with the pserver channels (raftps.ps).
        self.credentials = self.tls.credentials() if self.tls is not None else None
        self._channels = [_tls.channel(e, self.credentials, CHANNEL_OPTIONS) for e in self.endpoints]
        chans = [grpc.intercept_channel(ch, *interceptors) if interceptors else ch for ch in self._channels]
        self._stubs = [_Stubs(ch) for ch in chans]
        self._cur = 0
        self._mu = threading.Lock()
        self._closed = False
        self._leases: list[Lease] = []
        # Request ids (exactly-once writes): the last seq handed out and
        # the seqs whose answer is not settled yet.
        self.client_id = secrets.token_hex(16)
        self._seq = 0
        self._inflight: set[int] = set()

    # -- plumbing ---------------------------------------------------------

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stops lease keepalives and closes every channel."""
        if self._closed:
            return
        self._closed = True
        for l in list(self._leases):
            l.stop()
        _tls.close_channels(self._channels)

    def _pick(self, shift: int = 0) -> int:
        with self._mu:
            return (self._cur + shift) % len(self._stubs)

    def _advance(self, failed: int) -> None:
        with self._mu:
            if self._cur == failed:
                self._cur = (failed + 1) % len(self._stubs)

    @contextlib.contextmanager
    def request_id(self) -> Iterator[int]:
        """A sequence number for one write, settled (its answer no longer
        needed) when the block ends: pass it as ``call(..., seq=)`` to every
        attempt of a write retried outside :meth:`call`, so that it is
        applied once."""
        with self._mu:
            self._seq += 1
            seq = self._seq
            self._inflight.add(seq)
        try:
            yield seq
        finally:
            with self._mu:
                self._inflight.discard(seq)

    def _metadata(self, seq: int) -> tuple:
        with self._mu:
            acked = min(self._inflight, default=self._seq + 1)
        return ((MD_CLIENT_ID, self.client_id), (MD_SEQ, str(seq)), (MD_ACKED, str(acked)))

    def call(self, service: str, method: str, request, timeout: float | None = None, retry: bool = True,
             seq: int | None = None):
        """Calls ``service.method`` (e.g. "kv", "Range") on a node, moving to
        the next endpoint on Unavailable or a timeout until ``timeout``
        seconds passed. A write (:data:`WRITES`) carries one request id on
        every attempt (``seq``, from :meth:`request_id`, or a fresh one), so
        it is applied at most once. Raises a :mod:`raftps.errors` class."""
        if seq is None and (service, method) in WRITES:
            with self.request_id() as s:
                return self.call(service, method, request, timeout, retry, s)
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        backoff = 0.05
        attempt = 0
        while True:
            idx = self._pick()
            fn = getattr(getattr(self._stubs[idx], service), method)
            left = deadline - time.monotonic()
            # Give one node at most a share of the budget so that a dead
            # endpoint that swallows packets does not eat all of it.
            per_try = max(min(left, max(timeout / 2, 1.0)), 0.001)
            try:
                if seq is None:
                    return fn(request, timeout=per_try)
                return fn(request, timeout=per_try, metadata=self._metadata(seq))
            except grpc.RpcError as e:
                err = errors.from_grpc(e)
            if not retry or not isinstance(err, errors.RETRYABLE):
                raise err
            self._advance(idx)
            attempt += 1
            if time.monotonic() + backoff >= deadline:
                raise err
            if attempt % len(self._stubs) == 0:
                time.sleep(backoff)
                backoff = min(backoff * 2, 1.0)

    # -- KV ---------------------------------------------------------------

    def get(self, key: bytes | str, *, serializable: bool = False, timeout: float | None = None) -> KeyValue | None:
        """The key's current KeyValue, or None. Linearizable unless
        ``serializable`` (then it may be stale, served by any node)."""
        kvs = self.range(key, serializable=serializable, timeout=timeout)
        return kvs[0] if kvs else None

    def range(self, key: bytes | str, end: bytes | str | None = None, *, prefix: bool = False,
              limit: int = 0, serializable: bool = False, keys_only: bool = False,
              timeout: float | None = None) -> list[KeyValue]:
        """Keys in [key, end) (``prefix=True``: every key starting with key;
        no end: the key alone), sorted by key."""
        return [KeyValue.from_pb(kv) for kv in self.range_pb(
            key, end, prefix=prefix, limit=limit, serializable=serializable,
            keys_only=keys_only, timeout=timeout).kvs]

    def range_pb(self, key, end=None, *, prefix=False, limit=0, serializable=False, keys_only=False,
                 count_only=False, timeout=None) -> kv_pb2.RangeResponse:
        """Range returning the raw RangeResponse (with its header revision)."""
        k = _b(key)
        e = prefix_end(k) if prefix else (_b(end) if end is not None else b"")
        req = kv_pb2.RangeRequest(key=k, range_end=e, limit=limit, serializable=serializable,
                                  keys_only=keys_only, count_only=count_only)
        return self.call("kv", "Range", req, timeout)

    def put(self, key: bytes | str, value: bytes | str, *, lease: int = 0, timeout: float | None = None) -> int:
        """Writes key and returns the revision of the write."""
        req = kv_pb2.PutRequest(key=_b(key), value=_b(value), lease=lease)
        return self.call("kv", "Put", req, timeout).header.revision

    def delete(self, key: bytes | str, end: bytes | str | None = None, *, prefix: bool = False,
               timeout: float | None = None) -> int:
        """Deletes key (or the range / prefix) and returns how many keys went."""
        k = _b(key)
        e = prefix_end(k) if prefix else (_b(end) if end is not None else b"")
        return self.call("kv", "DeleteRange", kv_pb2.DeleteRangeRequest(key=k, range_end=e), timeout).deleted

    # Txn building blocks: compares and ops.
    _CMP = {"==": kv_pb2.Compare.EQUAL, "!=": kv_pb2.Compare.NOT_EQUAL,
            ">": kv_pb2.Compare.GREATER, "<": kv_pb2.Compare.LESS}

    @classmethod
    def _cmp(cls, key, op: str) -> kv_pb2.Compare:
        if op not in cls._CMP:
            raise errors.InvalidArgument(f"compare: operator {op!r} (want ==, !=, >, <)")
        return kv_pb2.Compare(key=_b(key), result=cls._CMP[op])

    @classmethod
    def cmp_value(cls, key, op: str, value: bytes | str) -> kv_pb2.Compare:
        c = cls._cmp(key, op)
        c.target, c.value = kv_pb2.Compare.VALUE, _b(value)
        return c

    @classmethod
    def cmp_version(cls, key, op: str, version: int) -> kv_pb2.Compare:
        """version 0 == the key does not exist."""
        c = cls._cmp(key, op)
        c.target, c.version = kv_pb2.Compare.VERSION, version
        return c

    @classmethod
    def cmp_mod_revision(cls, key, op: str, rev: int) -> kv_pb2.Compare:
        c = cls._cmp(key, op)
        c.target, c.mod_revision = kv_pb2.Compare.MOD, rev
        return c

    @classmethod
    def cmp_create_revision(cls, key, op: str, rev: int) -> kv_pb2.Compare:
        c = cls._cmp(key, op)
        c.target, c.create_revision = kv_pb2.Compare.CREATE, rev
        return c

    @staticmethod
    def op_put(key, value, lease: int = 0) -> kv_pb2.RequestOp:
        return kv_pb2.RequestOp(request_put=kv_pb2.PutRequest(key=_b(key), value=_b(value), lease=lease))

    @staticmethod
    def op_get(key, end=None, prefix: bool = False) -> kv_pb2.RequestOp:
        k = _b(key)
        e = prefix_end(k) if prefix else (_b(end) if end is not None else b"")
        return kv_pb2.RequestOp(request_range=kv_pb2.RangeRequest(key=k, range_end=e))

    @staticmethod
    def op_delete(key, end=None, prefix: bool = False) -> kv_pb2.RequestOp:
        k = _b(key)
        e = prefix_end(k) if prefix else (_b(end) if end is not None else b"")
        return kv_pb2.RequestOp(request_delete_range=kv_pb2.DeleteRangeRequest(key=k, range_end=e))

    def txn(self, compare: Iterable[kv_pb2.Compare] = (), success: Iterable[kv_pb2.RequestOp] = (),
            failure: Iterable[kv_pb2.RequestOp] = (), timeout: float | None = None) -> kv_pb2.TxnResponse:
        """If every compare holds, applies ``success``, else ``failure``,
        atomically. Returns the TxnResponse (``.succeeded``, ``.responses``,
        ``.header.revision``)."""
        req = kv_pb2.TxnRequest(compare=list(compare), success=list(success), failure=list(failure))
        return self.call("kv", "Txn", req, timeout)

    def cas(self, key, old: bytes | str | None, new: bytes | str, timeout: float | None = None) -> bool:
        """Compare-and-swap: writes ``new`` if the key holds ``old`` (None:
        if the key does not exist). Returns whether it wrote."""
        c = self.cmp_version(key, "==", 0) if old is None else self.cmp_value(key, "==", old)
        return self.txn([c], [self.op_put(key, new)], timeout=timeout).succeeded

    # -- leases -----------------------------------------------------------

    def lease_grant(self, ttl: int, timeout: float | None = None) -> int:
        """Grants a lease of ``ttl`` seconds and returns its id."""
        return self.call("lease", "LeaseGrant", kv_pb2.LeaseGrantRequest(ttl=ttl), timeout).id

    def lease_revoke(self, lease_id: int, timeout: float | None = None) -> None:
        """Revokes a lease and deletes its keys (NotFound if unknown)."""
        self.call("lease", "LeaseRevoke", kv_pb2.LeaseRevokeRequest(id=lease_id), timeout)

    def lease_keepalive_once(self, lease_id: int, timeout: float | None = None) -> int:
        """Renews a lease once; returns its TTL (NotFound if it expired)."""
        timeout = self.timeout if timeout is None else timeout

        def once(req, timeout):
            for resp in self._stubs[self._pick()].lease.LeaseKeepAlive(iter([req]), timeout=timeout):
                return resp
            raise errors.Unavailable("lease keepalive: the stream ended without an answer")

        deadline = time.monotonic() + timeout
        while True:
            idx = self._pick()
            try:
                resp = once(kv_pb2.LeaseKeepAliveRequest(id=lease_id), max(deadline - time.monotonic(), 0.001))
            except grpc.RpcError as e:
                err = errors.from_grpc(e)
                if not isinstance(err, errors.RETRYABLE) or time.monotonic() >= deadline:
                    raise err
                self._advance(idx)
                time.sleep(0.05)
                continue
            if resp.ttl <= 0:
                raise errors.LeaseLost(f"lease {lease_id} expired")
            return resp.ttl

    def lease_ttl(self, lease_id: int, keys: bool = False, timeout: float | None = None) -> kv_pb2.LeaseTimeToLiveResponse:
        """The lease's remaining TTL (``.ttl``, -1 if gone), granted TTL and keys."""
        return self.call("lease", "LeaseTimeToLive", kv_pb2.LeaseTimeToLiveRequest(id=lease_id, keys=keys), timeout)

    def lease(self, ttl: int, keepalive: bool = True) -> "Lease":
        """Grants a lease and (by default) keeps it alive from a daemon
        thread every ttl/3 seconds until ``stop()``/``revoke()`` or the end
        of the ``with`` block (which revokes it)."""
        l = Lease(self, self.lease_grant(ttl), ttl)
        if keepalive:
            l.start()
        self._leases.append(l)
        return l

    # -- watch ------------------------------------------------------------

    def watch(self, key: bytes | str, end: bytes | str | None = None, *, prefix: bool = False,
              start_revision: int = 0, prev_kv: bool = False) -> "Watcher":
        """An iterator of :class:`Event` for key (or the range / prefix) from
        ``start_revision`` (0: from the next write), ordered by revision,
        with no gap and no duplicate across node deaths: when a node's
        stream breaks, the watcher reconnects to another endpoint from the
        revision after the last one delivered. A compacted start revision
        raises OutOfRange. ``cancel()`` (or the with block) ends it."""
        k = _b(key)
        e = prefix_end(k) if prefix else (_b(end) if end is not None else b"")
        return Watcher(self, k, e, start_revision, prev_kv)

    # -- cluster ----------------------------------------------------------

    def status(self, timeout: float | None = None):
        """The answering node's Raft status (StatusResponse: id, leader,
        term, commit/applied index, voters, revision)."""
        return self.call("cluster", "Status", _cluster_pb2().StatusRequest(), timeout)

    def members(self, timeout: float | None = None):
        """Gossip members with their roles, addresses, status and suffrage."""
        return list(self.call("cluster", "Members", _cluster_pb2().MembersRequest(), timeout).members)

    def leader(self, timeout: float | None = None) -> str:
        """The id of the current Raft leader (as the answering node sees it)."""
        return self.status(timeout).leader


def _cluster_pb2():
    return kv_pb2


class _Stubs:
    def __init__(self, ch: grpc.Channel):
        self.kv = kv_pb2_grpc.KVStub(ch)
        self.lease = kv_pb2_grpc.LeaseStub(ch)
        self.watch = kv_pb2_grpc.WatchStub(ch)
        self.cluster = kv_pb2_grpc.ClusterStub(ch)
        self.master = job_pb2_grpc.MasterStub(ch)


class Lease:
    """A lease kept alive by a daemon thread (see :meth:`Client.lease`).

    ``lost`` is set (and ``on_lost`` callbacks run once) if a renewal finds
    the lease gone or renewals fail for a whole TTL."""

    def __init__(self, client: Client, lease_id: int, ttl: int):
        self.client, self.id, self.ttl = client, lease_id, ttl
        self.lost = threading.Event()
        self.on_lost: list = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"raftps-lease-{self.id}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        period = max(self.ttl / 3.0, 0.2)
        last_ok = time.monotonic()
        while not self._stop.wait(period):
            try:
                self.client.lease_keepalive_once(self.id, timeout=period)
                last_ok = time.monotonic()
            except errors.NotFound:
                self._lose()
                return
            except errors.RaftpsError:
                if time.monotonic() - last_ok > self.ttl:
                    self._lose()
                    return
            except ValueError:  # channel closed under us
                return

    def _lose(self) -> None:
        if not self.lost.is_set():
            self.lost.set()
            for cb in self.on_lost:
                cb(self)

    def stop(self) -> None:
        """Stops the keepalives (the lease then expires after its TTL)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def revoke(self) -> None:
        """Stops the keepalives and revokes the lease (its keys go at once)."""
        self.stop()
        try:
            self.client.lease_revoke(self.id)
        except errors.NotFound:
            pass

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc) -> None:
        self.revoke()


_END = object()


class Watcher:
    """Iterator of watch events that resumes across node failures (see
    :meth:`Client.watch`). Not thread-safe to iterate from two threads."""

    def __init__(self, client: Client, key: bytes, end: bytes, start_revision: int, prev_kv: bool):
        self.client = client
        self.key, self.end, self.prev_kv = key, end, prev_kv
        if start_revision <= 0:
            # "From now" must mean one revision on every node we may resume
            # on: read the current revision once (linearizable).
            start_revision = client.range_pb(key, count_only=True).header.revision + 1
        self.next_revision = start_revision
        self.reconnects = 0
        self._q: queue.Queue = queue.Queue(maxsize=1024)
        self._cancelled = threading.Event()
        self._call = None
        self._mu = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="raftps-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        c = self.client
        backoff = 0.05
        while not self._cancelled.is_set():
            idx = c._pick()
            req = kv_pb2.WatchRequest(key=self.key, range_end=self.end,
                                      start_revision=self.next_revision, prev_kv=self.prev_kv)
            try:
                call = c._stubs[idx].watch.Watch(req)
                with self._mu:
                    self._call = call
                if self._cancelled.is_set():
                    call.cancel()
                for resp in call:
                    backoff = 0.05
                    if resp.canceled:
                        raise errors.OutOfRange(resp.cancel_reason or "watch canceled by the server")
                    evs = [e for e in resp.events if e.kv.mod_revision >= self.next_revision]
                    if not evs:
                        continue
                    out = [Event("DELETE" if e.type == kv_pb2.Event.DELETE else "PUT", KeyValue.from_pb(e.kv),
                                 KeyValue.from_pb(e.prev_kv) if e.HasField("prev_kv") else None) for e in evs]
                    # A response carries whole revisions: resume after its last.
                    self.next_revision = out[-1].kv.mod_revision + 1
                    for ev in out:
                        self._put(ev)
                err: errors.RaftpsError = errors.Unavailable("watch stream ended")
            except grpc.RpcError as e:
                err = errors.from_grpc(e)
            except errors.RaftpsError as e:
                err = e
            except ValueError:  # the client was closed under the watch
                break
            if self._cancelled.is_set() or c._closed:
                break
            if not isinstance(err, (errors.Unavailable, errors.DeadlineExceeded, errors.Aborted,
                                    errors.Cancelled, errors.Unknown, errors.Internal)):
                self._put(err)
                return
            c._advance(idx)
            self.reconnects += 1
            time.sleep(backoff)
            backoff = min(backoff * 2, 1.0)
        self._put(_END)

    def _put(self, item) -> None:
        while not self._cancelled.is_set():
            try:
                self._q.put(item, timeout=0.1)
                return
            except queue.Full:
                continue
        if item is _END:
            try:
                self._q.put_nowait(item)
            except queue.Full:
                pass

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        item = self._q.get()
        if item is _END:
            self._q.put(_END)
            raise StopIteration
        if isinstance(item, BaseException):
            self._q.put(item)
            raise item
        return item

    def get(self, timeout: float | None = None) -> Event | None:
        """The next event, or None if none arrives within ``timeout`` seconds."""
        try:
            item = self._q.get(timeout=timeout)
        except queue.Empty:
            return None
        if item is _END:
            self._q.put(_END)
            raise StopIteration
        if isinstance(item, BaseException):
            self._q.put(item)
            raise item
        return item

    def cancel(self) -> None:
        """Ends the watch; iteration stops after the events already queued."""
        self._cancelled.set()
        with self._mu:
            if self._call is not None:
                self._call.cancel()
        try:
            self._q.put_nowait(_END)
        except queue.Full:
            pass

    def __enter__(self) -> "Watcher":
        return self

    def __exit__(self, *exc) -> None:
        self.cancel()
