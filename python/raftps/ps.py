"""raftps.ps: a trainer's client of one job's parameter servers, the
Python twin of Go's psclient.Client (pserver/psclient).

    ps = raftps.ps.ParamClient(client, "mnist", trainer="py-1")
    params = ps.new_params()          # name -> np.float32 array of its shape
    ps.pull(params)                   # fills them in place; records each slot's version
    ps.push({"fc.weight": g_w, "fc.bias": g_b}, examples=64)   # sync: returns after the step
    rows = ps.pull_rows("emb", [3, 7, 3])                        # len(rows) x dim
    ps.push({}, sparse={"emb": ([3, 7], grads)}, examples=64)

How it finds and follows the pservers, exactly as the Go client does:

- Parameters are cut as pserver/wire/layout.go cuts them: dense tensors into
  blocks of ``dense_block_size`` float32s, block b of parameter p in
  virtual shard (FNV-1a-32(p) + b) mod num_virtual_shards, embedding row r
  in FNV-1a-64(p || r as 8 bytes LE) mod num_virtual_shards, and vshard v
  served by slot v mod num_pservers.
- A slot's address comes from its record under /jobs/<job>/ps/<slot>
  (schema.SlotRecord JSON); a watch of that prefix follows moves at once.
- A replicated slot's replica epoch is the mod_revision of its replica
  record /jobs/<job>/replicas/<slot> (schema.ReplicaRecord JSON), read
  with the claim by trainer/agent's resolver rules: a claimed slot whose
  record names the claim's holder as primary gets the record's epoch; a
  claimed slot with no record, or whose record names another node, gets
  epoch 0 (not checked); a slot with a record and no claim (its primary
  was just promoted) resolves to the record's primary at its epoch. Every
  pull and push carries the epoch resolved with the slot's address
  (PullRequest.epoch, PushRequest.epoch). A primary that serves another
  epoch, or was deposed, refuses it (FailedPrecondition, ErrorInfo reason
  SLOT_EPOCH): the slot is resolved again and the call retried (a push
  with the same push id), within the Unavailable retry budget below.
- A slot answering Unavailable (not hosted here, or fenced after its
  holder lost its lease) is re-resolved and retried, 20 ms backoff doubling
  to 250 ms, for ``retry_for`` seconds (60: past a handover, which waits
  out the old holder's lease TTL, also under CPU load) or, if given,
  ``retries`` times; then :class:`raftps.errors.Unavailable`.
- Every push goes to every slot (an empty one if it holds none of the
  gradients) with the version that slot returned on the last pull (sync
  mode: the lowest of them, one step on every slot), as the sync step,
  and the slot's incarnation of that pull. A stale push
  (FailedPrecondition: the sync step moved on, the async staleness bound,
  or, in sync mode, the slot was restored under a new claim since the pull)
  raises :class:`raftps.errors.StalePush`: pull again and recompute the
  batch.
- Every push carries a push id (PushRequest.push_id), as the Go client's:
  one per :meth:`ParamClient.push` call, shared by its slots and the same on
  each retry, counting up from a random 63-bit start and never 0. A slot
  applies a (trainer, push id) at most once and answers a retry with the
  version the first attempt produced, so a push retried after an ambiguous
  Unavailable (its answer lost) is applied once, sync or async.

Pserver connections use the Client's TLS material (mutual TLS with its
certificate; plaintext if the Client has none). A certificate whose role
may not push or pull (a reader's, or a trainer's for another job) raises
:class:`raftps.errors.PermissionDenied`, never retried.

Tensor data moves as packed little-endian float32 (api pserver.proto
Tensor.data), encoded and decoded by raftps._psconn's own protobuf wire
code, so protobuf Python never builds or parses the big ``bytes`` fields.
A slot whose dense parameters are more than ``stream_bytes`` (default
STREAM_CHUNK_BYTES, 4 MiB, as the Go client) is pulled over PullStream
and pushed over PushStream in messages of at most STREAM_CHUNK_BYTES of
data: the pserver sends the next message while the trainer places the
last, and parses the last pushed while the trainer sends the next. The
transport (raftps._psconn) is gRPC's C core called through ctypes where
Debian's libgrpc29 loads (raftps._grpccore): a push is gathered from its
headers and zero-copy views of the gradients into the slice gRPC sends
(one copy), and a pulled message is joined once by the C core and its
blocks copied from there straight into the destination arrays (which may
be numpy views of torch tensors), as the Go client does; elsewhere, or
with RAFTPS_PS_TRANSPORT=grpcio, it is grpcio, which copies every message
once more on the way out and three times more on the way in. Each call
runs on the ParamClient thread of its slot.

The client's CPU per byte against the Go client's, the profile of where
it goes, and what was tried: python/PERFORMANCE.md.
"""

from __future__ import annotations

import concurrent.futures
import json
import random
import struct
import threading
import time
from typing import Mapping, Sequence

import grpc
import numpy as np

from raftps import _malloc, _psconn, errors
from raftps._psconn import _Push, _chunk_tensors, _decode_pull, _enc_varint, _encode_push, _tag  # noqa: F401
from raftps.client import Client
from raftps.v1 import job_pb2, pserver_pb2

# The data path moves model-sized messages: keep their buffers in the heap
# (raftps._malloc). Done at import, before grpcio's threads take malloc
# arenas of their own; RAFTPS_MALLOC_TUNING=0 opts out.
_malloc.keep_message_buffers()

DEFAULT_NUM_VIRTUAL_SHARDS = 64
DEFAULT_DENSE_BLOCK_SIZE = 65536
# STREAM_CHUNK_BYTES is pserver/wire's StreamChunkBytes: a slot's dense pull
# or push of more data bytes than this goes over PullStream / PushStream in
# messages of at most this much tensor data (a block larger than it is a
# message of its own).
STREAM_CHUNK_BYTES = 4 << 20

# _SLOT_EPOCH is the ErrorInfo reason of errs.ErrSlotEpoch (api/rpctypes):
# the request's replica epoch is not the slot's; re-resolve and retry.
_SLOT_EPOCH = "SLOT_EPOCH"

def fnv1a32(data: bytes) -> int:
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


class Param:
    """How one parameter is cut (pserver.ParamLayout)."""

    def __init__(self, spec: job_pb2.ParamSpec, index: int, block_size: int):
        self.spec, self.index = spec, index
        self.name = spec.name
        self.shape = tuple(int(d) for d in spec.shape)
        self.size = int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1
        self.embedding = spec.embedding
        self.hash = fnv1a32(self.name.encode())
        self._name_bytes = self.name.encode()
        if self.embedding:
            if len(self.shape) != 2:
                raise errors.InvalidArgument(f"embedding {self.name!r}: shape {self.shape}, want [buckets, dim]")
            self.buckets, self.dim = self.shape
            self.blocks = 0
        else:
            self.buckets = self.dim = 0
            self.blocks = -(-self.size // block_size)


class Layout:
    """The sharding of a job's parameters over its pserver slots
    (pserver/wire's Layout): immutable."""

    def __init__(self, spec: job_pb2.JobSpec):
        self.num_vshards = spec.num_virtual_shards or DEFAULT_NUM_VIRTUAL_SHARDS
        self.num_pservers = spec.num_pservers or 1
        self.block_size = spec.dense_block_size or DEFAULT_DENSE_BLOCK_SIZE
        self.params = [Param(p, i, self.block_size) for i, p in enumerate(spec.params)]
        self.by_name = {p.name: p for p in self.params}
        if len(self.by_name) != len(self.params):
            raise errors.InvalidArgument("job spec: duplicate param names")

    def block_range(self, p: Param, b: int) -> tuple[int, int]:
        lo = b * self.block_size
        return lo, min(lo + self.block_size, p.size)

    def vshard_of_block(self, p: Param, b: int) -> int:
        return (p.hash + b) % self.num_vshards

    def slot_of_block(self, p: Param, b: int) -> int:
        return self.vshard_of_block(p, b) % self.num_pservers

    def vshard_of_row(self, p: Param, row: int) -> int:
        return fnv1a64(p._name_bytes + struct.pack("<q", row)) % self.num_vshards

    def slot_of_row(self, p: Param, row: int) -> int:
        return self.vshard_of_row(p, row) % self.num_pservers


# The connection class of slot pservers (raftps._psconn: the C core's where
# it loads, else grpcio's; RAFTPS_PS_TRANSPORT chooses).
_SlotConn = _psconn.conn_class()


def _slot_prefix(job: str) -> str:
    # schema.SlotPrefix
    return f"/jobs/{job}/ps/"


def _replica_prefix(job: str) -> str:
    # schema.ReplicaPrefix: /jobs/<job>/replicas/<slot> holds a replicated
    # slot's ReplicaRecord; its mod_revision is the slot's replica epoch.
    return f"/jobs/{job}/replicas/"


def _by_slot(kvs) -> dict:
    """slot -> (parsed JSON value, mod_revision) of the keys .../<slot>."""
    out = {}
    for kv in kvs:
        try:
            slot = int(kv.key.decode().rsplit("/", 1)[1])
            value = json.loads(kv.value)
        except (ValueError, IndexError):
            continue
        if isinstance(value, dict):
            out[slot] = (value, kv.mod_revision)
    return out


def _record_primary(rec: dict) -> str:
    """The primary's address of a valid replica record (schema's
    ReplicaRecord.Validate: the primary named, no node twice), else ""."""
    members = [rec.get("primary")] + list(rec.get("backups") or [])
    if not all(isinstance(m, dict) and m.get("node") for m in members):
        return ""
    if len({m["node"] for m in members}) != len(members):
        return ""
    return members[0].get("addr", "") or ""


def _targets(claims: dict, records: dict) -> dict[int, tuple[str, int]]:
    """slot -> (address, replica epoch) by the Go resolver's rules
    (trainer/agent's resolver.Targets): a claimed slot whose replica record
    names the claim's holder as primary gets the record's epoch; a claimed
    slot with no record, or whose record names another node (a restore not
    yet recorded), gets epoch 0 (not checked); a replicated slot with no
    claim (its primary was just promoted) resolves to the record's primary
    at its epoch."""
    out = {}
    for slot, (rec, _) in claims.items():
        addr = rec.get("addr", "")
        if addr:
            out[slot] = (addr, 0)
    for slot, (rec, mod_revision) in records.items():
        addr = _record_primary(rec)
        if not addr or mod_revision <= 0:
            continue
        if slot not in out or out[slot][0] == addr:
            out[slot] = (addr, mod_revision)
    return out


class ParamClient:
    """A trainer's view of a job's pservers (see the module doc).

    Args:
        client: a :class:`raftps.Client` of the cluster (slot records, job spec).
        job: the job's name.
        trainer: this trainer's id (sync steps count trainers by id; it must
            be registered under /jobs/<job>/trainers/ to be waited for, see
            :class:`raftps.tasks.TrainerSession`).
        spec: the JobSpec (default: read with GetJob).
        retries: Unavailable retries per call (re-resolving the slot each time;
            backoff 20 ms doubling to 250 ms); None (default): retry for
            ``retry_for`` seconds instead of a count.
        retry_for: seconds a call retries Unavailable when ``retries`` is
            None (default 60: longer than a slot handover, which waits out
            the old holder's lease TTL, even on a loaded machine).
        timeout: seconds per pserver call (a sync push waits for the step).
        watch: follow slot moves with a watch (default True).
        stream_bytes: a slot whose dense parameters are more than this many
            bytes is pulled and pushed over PullStream / PushStream in
            messages of at most STREAM_CHUNK_BYTES of data (default
            STREAM_CHUNK_BYTES, as the Go client; negative: always unary).
    """

    def __init__(self, client: Client, job: str, trainer: str, spec: job_pb2.JobSpec | None = None,
                 retries: int | None = None, timeout: float = 60.0, watch: bool = True,
                 retry_for: float = 60.0, stream_bytes: int = STREAM_CHUNK_BYTES):
        self.client, self.job, self.trainer = client, job, trainer
        if spec is None:
            from raftps import jobs
            spec = jobs.status(client, job).spec
        self.spec = spec
        self.layout = Layout(spec)
        self.retries, self.timeout, self.retry_for = retries, timeout, retry_for
        # Loopback polls are cheap: a short cap brings a trainer back within
        # a quarter second of its slot being served again.
        self.max_backoff = 0.25
        n = self.layout.num_pservers
        self.versions = [0] * n
        # Per slot, the incarnation of the last pull (0: unknown); pushes
        # carry it (PushRequest.incarnation).
        self.incarnations = [0] * n
        self._mu = threading.Lock()
        # The last push id used (guarded by _mu); like the Go client's, it
        # starts at a random 63-bit value so ids of a restarted trainer of
        # the same name do not repeat the ones the slots remember.
        self._push_id = random.SystemRandom().getrandbits(63)
        self._addrs: dict[int, str] = {}
        self._conns: dict[str, _SlotConn] = {}
        self._blocks: list[list[tuple[Param, int, int, int]]] = [[] for _ in range(n)]
        for p in self.layout.params:
            for b in range(p.blocks):
                lo, hi = self.layout.block_range(p, b)
                self._blocks[self.layout.slot_of_block(p, b)].append((p, b, lo, hi))
        # Per slot: whether its dense data goes over the streaming calls.
        self._stream = [stream_bytes >= 0 and 4 * sum(hi - lo for (_, _, lo, hi) in blocks) > stream_bytes
                        for blocks in self._blocks]
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=n, thread_name_prefix="raftps-ps")
        self.retried = 0
        # Calls refused for their replica epoch (SLOT_EPOCH), each retried.
        self.refused = 0
        self._watcher = None
        if watch:
            self._watcher = client.watch(_slot_prefix(job), prefix=True)
            self._resolve()
            threading.Thread(target=self._follow, name="raftps-ps-slots", daemon=True).start()

    # -- slots ------------------------------------------------------------

    def _follow(self) -> None:
        while True:
            try:
                for _ in self._watcher:
                    try:
                        self._resolve()
                    except errors.RaftpsError:
                        pass
                return  # cancelled
            except errors.RaftpsError:
                pass
            # A watch it cannot resume (compacted): list again, watch anew.
            try:
                self._resolve()
                self._watcher = self.client.watch(_slot_prefix(self.job), prefix=True)
            except errors.RaftpsError:
                time.sleep(0.2)
            except ValueError:  # the client was closed
                return

    def _resolve(self) -> dict[int, tuple[str, int]]:
        # Linearizable: a node that just restarted may still be catching up.
        # Claims first, then records: a record written between the reads is
        # newer than the claim it is compared with, which costs at most a
        # refusal and a retry (never a wrong acknowledgement).
        claims = _by_slot(self.client.range(_slot_prefix(self.job), prefix=True))
        records = _by_slot(self.client.range(_replica_prefix(self.job), prefix=True))
        m = _targets(claims, records)
        with self._mu:
            self._addrs = m
        return m

    def slots(self) -> dict[int, str]:
        """The slot -> pserver address map as last resolved."""
        with self._mu:
            return {s: a for s, (a, _) in self._addrs.items()}

    def targets(self) -> dict[int, tuple[str, int]]:
        """The slot -> (pserver address, replica epoch) map as last
        resolved; the epoch (the mod_revision of the slot's replica record,
        0: unreplicated or not known) is what pulls and pushes carry."""
        with self._mu:
            return dict(self._addrs)

    def _conn(self, slot: int) -> tuple[_SlotConn, int]:
        """The connection to slot's pserver and the replica epoch resolved
        with its address."""
        with self._mu:
            t = self._addrs.get(slot)
        if t is None:
            t = self._resolve().get(slot)
            if t is None:
                raise errors.Unavailable(f"job {self.job!r} slot {slot} has no pserver yet")
        addr, epoch = t
        with self._mu:
            c = self._conns.get(addr)
            if c is None:
                c = self._conns[addr] = _SlotConn(addr, self.client)
            return c, epoch

    def _invalidate(self, slot: int) -> None:
        with self._mu:
            self._addrs.pop(slot, None)

    def _do(self, slot: int, fn, retries: int | None = None):
        """Calls fn(conn, epoch) on slot's pserver with the replica epoch
        resolved with its address, re-resolving and retrying while it
        answers Unavailable or refuses the epoch (FailedPrecondition,
        reason SLOT_EPOCH: it serves another epoch or was deposed). fn
        builds its request's epoch from the argument on every attempt; a
        push keeps its push id, so the retry is applied at most once."""
        retries = self.retries if retries is None else retries
        deadline = time.monotonic() + self.retry_for if retries is None else None
        backoff = 0.02
        attempt = 0
        while True:
            try:
                return fn(*self._conn(slot))
            except grpc.RpcError as e:
                err = errors.from_grpc(e)
                if err.reason == _SLOT_EPOCH:
                    with self._mu:
                        self.refused += 1
                elif isinstance(err, errors.FailedPrecondition):
                    raise errors.StalePush(err.message, err.code) from e
                elif isinstance(err, errors.Unavailable) and err.message.startswith("pserver: slot lost its lease"):
                    err = errors.Fenced(err.message, err.code)
                elif not isinstance(err, (errors.Unavailable, errors.DeadlineExceeded)):
                    raise err
            except errors.Unavailable as e:
                err = e
            if (time.monotonic() >= deadline) if deadline is not None else attempt >= retries:
                raise type(err)(f"slot {slot}: {err.message} (after {attempt} retries)", err.code, err.reason)
            attempt += 1
            self.retried += 1
            self._invalidate(slot)
            time.sleep(backoff)
            backoff = min(2 * backoff, self.max_backoff)

    def _parallel(self, fn) -> list:
        futs = [self._pool.submit(fn, s) for s in range(self.layout.num_pservers)]
        out, first = [], None
        for f in futs:
            try:
                out.append(f.result())
            except BaseException as e:  # noqa: BLE001 - re-raised below
                out.append(None)
                first = first or e
        if first is not None:
            raise first
        return out

    # -- dense ------------------------------------------------------------

    def new_params(self) -> dict[str, np.ndarray]:
        """One zeroed float32 array of its shape per dense parameter."""
        return {p.name: np.zeros(p.shape, dtype=np.float32) for p in self.layout.params if not p.embedding}

    def pull(self, dst: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Pulls every dense parameter into ``dst`` (C-contiguous float32
        arrays of the parameter's size, e.g. numpy views of torch tensors;
        missing ones are allocated) and records each slot's version for the
        next push. Returns dst."""
        dst = dict(dst) if dst is not None else {}
        flat = {}
        for p in self.layout.params:
            if p.embedding:
                continue
            a = dst.get(p.name)
            if a is None:
                a = dst[p.name] = np.zeros(p.shape, dtype=np.float32)
            if a.dtype != np.float32 or a.size != p.size or not a.flags.c_contiguous:
                raise errors.InvalidArgument(
                    f"pull: destination of {p.name!r} must be C-contiguous float32 with {p.size} elements")
            flat[p.name] = a.reshape(-1)

        def place(slot, resp) -> int:
            # Copies each received block straight into its destination.
            for t in resp.tensors:
                p = self.layout.by_name.get(t.name)
                if p is None or p.embedding or not 0 <= t.block < p.blocks:
                    raise errors.Internal(f"pull: unexpected tensor {t.name!r} block {t.block} from slot {slot}")
                lo, hi = self.layout.block_range(p, t.block)
                if t.n != (hi - lo) * 4:
                    raise errors.Internal(f"pull: tensor {t.name!r} block {t.block} has {t.n} bytes, want {(hi - lo) * 4}")
                flat[p.name][lo:hi] = t.floats()
            return len(resp.tensors)

        def one(slot):
            def call(c, epoch):
                req = pserver_pb2.PullRequest(job=self.job, slot=slot, epoch=epoch)
                if not self._stream[slot]:
                    resp = c.pull(req, timeout=self.timeout)
                    return resp, place(slot, resp)
                # Every chunk carries the slot's version and incarnation.
                resp, placed = None, 0
                for resp in c.pull_stream(req, timeout=self.timeout):
                    placed += place(slot, resp)
                return resp, placed

            resp, placed = self._do(slot, call)
            if resp is None or placed != len(self._blocks[slot]):
                raise errors.Internal(f"pull: slot {slot} sent {placed} blocks, want {len(self._blocks[slot])}")
            self.versions[slot] = resp.version
            if resp.incarnation:
                self.incarnations[slot] = resp.incarnation
        self._parallel(one)
        return dst

    def push(self, dense: Mapping[str, np.ndarray], sparse: Mapping[str, tuple[Sequence[int], np.ndarray]] | None = None,
             examples: int = 1) -> list[int]:
        """Pushes one mini-batch's gradients to every slot in parallel, with
        the versions of the last pull; returns the slots' new versions. In
        sync mode it returns after the step completed on every slot.

        Args:
            dense: name -> gradient (float32, the parameter's size); a
                missing parameter sends no gradient.
            sparse: embedding name -> (rows, values of len(rows) x dim);
                repeated rows are summed.
            examples: examples in the batch (weights the sync average).

        Raises StalePush (pull and recompute), InvalidArgument, Unavailable.
        """
        flat = {}
        for name, g in dense.items():
            p = self.layout.by_name.get(name)
            if p is None or p.embedding:
                raise errors.InvalidArgument(f"push: {name!r} is not a dense param")
            g = np.ascontiguousarray(g, dtype=np.float32).reshape(-1)
            if g.size != p.size:
                raise errors.InvalidArgument(f"push: param {name!r} has {g.size} values, want {p.size}")
            flat[name] = g
        per_slot_sparse: list[list] = [[] for _ in range(self.layout.num_pservers)]
        for name, (rows, values) in (sparse or {}).items():
            p = self.layout.by_name.get(name)
            if p is None or not p.embedding:
                raise errors.InvalidArgument(f"push: {name!r} is not an embedding")
            values = np.ascontiguousarray(values, dtype=np.float32).reshape(-1, p.dim)
            if len(values) != len(rows):
                raise errors.InvalidArgument(f"push: param {name!r}: {values.size} values for {len(rows)} rows of dim {p.dim}")
            acc: dict[int, dict[int, np.ndarray]] = {}
            for j, r in enumerate(rows):
                r = int(r)
                if not 0 <= r < p.buckets:
                    raise errors.InvalidArgument(f"push: param {name!r} row {r} out of range")
                s = self.layout.slot_of_row(p, r)
                d = acc.setdefault(s, {})
                d[r] = d[r] + values[j] if r in d else values[j].copy()
            for s, d in acc.items():
                rs = list(d.keys())
                per_slot_sparse[s].append((name, 0, rs, np.ascontiguousarray(np.stack([d[r] for r in rs]))))
        examples = max(int(examples), 1)
        push_id = self._next_push_id()
        # Sync mode: one step on every slot, the lowest version (as the Go
        # client's syncStep): a slot past it refuses the push as stale and
        # the slot still at it counts it, so slots that a step released with
        # fewer trainers put apart (membership reaches each slot on its own
        # watch) realign instead of staying a step apart.
        step = min(self.versions) if self.spec.mode == job_pb2.UPDATE_MODE_SYNC else None

        def one(slot):
            ts = [(p.name, b, None, flat[p.name][lo:hi]) for (p, b, lo, hi) in self._blocks[slot] if p.name in flat]
            ts += per_slot_sparse[slot]
            v = self.versions[slot] if step is None else step
            req = _Push(self.job, slot, self.trainer, v, examples, ts, self.incarnations[slot], push_id)
            if self._stream[slot] and len(ts) > 1:
                # The first message names the push; later ones carry only
                # gradients (PServer.PushStream applies them as one push).
                chunks = _chunk_tensors(ts, STREAM_CHUNK_BYTES)
                msgs = [req.with_tensors(chunks[0])] + [_Push("", 0, "", 0, 0, ch) for ch in chunks[1:]]

                def call(c, epoch):
                    msgs[0].epoch = epoch  # the push id stays: a retry applies at most once
                    return c.push_stream(iter(msgs), timeout=self.timeout)
            else:
                def call(c, epoch):
                    req.epoch = epoch  # the push id stays: a retry applies at most once
                    return c.push(req, timeout=self.timeout)
            resp = self._do(slot, call)
            self.versions[slot] = resp.version
            if resp.incarnation:
                self.incarnations[slot] = resp.incarnation
            return resp.version

        return self._parallel(one)

    def _next_push_id(self) -> int:
        """The next push id: a uint64, never 0 (0 means none)."""
        with self._mu:
            self._push_id = (self._push_id + 1) & 0xFFFFFFFFFFFFFFFF
            if self._push_id == 0:
                self._push_id = 1
            return self._push_id

    # -- embeddings -------------------------------------------------------

    def pull_rows(self, name: str, rows: Sequence[int]) -> np.ndarray:
        """Rows of embedding ``name`` as a (len(rows), dim) float32 array; a
        row never pushed comes back as its initial value; repeated rows are
        fetched once."""
        p = self.layout.by_name.get(name)
        if p is None or not p.embedding:
            raise errors.InvalidArgument(f"pull rows: {name!r} is not an embedding")
        per: list[list[int]] = [[] for _ in range(self.layout.num_pservers)]
        at: dict[int, tuple[int, int]] = {}
        for r in rows:
            r = int(r)
            if not 0 <= r < p.buckets:
                raise errors.InvalidArgument(f"pull rows: param {name!r} row {r} out of range [0, {p.buckets})")
            if r not in at:
                s = self.layout.slot_of_row(p, r)
                at[r] = (s, len(per[s]))
                per[s].append(r)
        got: list = [None] * self.layout.num_pservers

        def one(slot):
            if not per[slot]:
                return
            t = pserver_pb2.Tensor(name=name, rows=per[slot])
            resp = self._do(slot, lambda c, epoch: c.pull(
                pserver_pb2.PullRequest(job=self.job, slot=slot, tensors=[t], epoch=epoch), timeout=self.timeout))
            if len(resp.tensors) != 1 or resp.tensors[0].n != 4 * p.dim * len(per[slot]):
                raise errors.Internal(f"pull rows: slot {slot} sent a bad response for {name!r}")
            got[slot] = resp.tensors[0].floats().reshape(-1, p.dim)
            self.versions[slot] = resp.version

        self._parallel(one)
        out = np.empty((len(rows), p.dim), dtype=np.float32)
        for j, r in enumerate(rows):
            s, i = at[int(r)]
            out[j] = got[s][i]
        return out

    # -- sync membership --------------------------------------------------

    def leave_step(self, retries: int | None = None) -> None:
        """Tells every slot this trainer leaves sync steps until it pushes
        again (out of data, between tasks, or leaving); ``retries``
        overrides the client's Unavailable retries."""
        def one(slot):
            req = pserver_pb2.LeaveStepRequest(job=self.job, slot=slot, trainer=self.trainer)
            self._do(slot, lambda c, _epoch: c.leave(req, timeout=self.timeout), retries)
        self._parallel(one)

    def close(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            self._watcher = None
        self._pool.shutdown(wait=False)
        with self._mu:
            conns = list(self._conns.values())
            self._conns.clear()
        for c in conns:
            c.close()

    def __enter__(self) -> "ParamClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
