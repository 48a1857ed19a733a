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

Pserver channels use the Client's TLS credentials (mutual TLS with its
certificate; plaintext if the Client has none). A certificate whose role
may not push or pull (a reader's, or a trainer's for another job) raises
:class:`raftps.errors.PermissionDenied`, never retried.

Tensor data moves as packed little-endian float32 (api pserver.proto
Tensor.data), encoded and decoded by this module's own protobuf wire code
on the gRPC channel (raw request_serializer / response_deserializer), so
protobuf Python never builds or parses the big ``bytes`` fields. A slot
whose dense parameters are more than ``stream_bytes`` (default
STREAM_CHUNK_BYTES, 4 MiB, as the Go client) is pulled over PullStream and
pushed over PushStream in messages of at most STREAM_CHUNK_BYTES of data:
the pserver sends the next message while the trainer places the last. A
pull's stream is received on the thread that places it (grpcio's
SingleThreadedUnaryStream: no channel spin thread, no request thread).
Pulled blocks are copied once, from the received message (a zero-copy
view) straight into the destination arrays (which may be numpy views of
torch tensors); pushed gradients are copied once, into the request. The
rest of the per-byte cost is grpcio's: its Python layer copies a received
message slice by slice into a bytearray and then into bytes, and copies
a sent one into a gRPC slice. (gRPC's C core sends every call as
content-type application/grpc; the pserver forces its raftps-tensor codec
on every call, so these calls are served as the Go client's are.)

The client's CPU per byte against the Go client's, the profile of where
it goes, and what was tried: python/PERFORMANCE.md.
"""

from __future__ import annotations

import concurrent.futures
import json
import random
import struct
import sys
import threading
import time
from typing import Mapping, Sequence

import grpc
import grpc.experimental
import numpy as np

from raftps import _malloc, _protowire, errors
from raftps import tls as _tls
from raftps.client import CHANNEL_OPTIONS, Client
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

_LE = sys.byteorder == "little"
_F32 = np.dtype("<f4")


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


# --- the wire format of PullResponse / PushRequest, without extra copies ---

_varint = _protowire.uvarint


def _enc_varint(v: int) -> bytes:
    if v < 0:
        v += 1 << 64
    out = bytearray()
    while True:
        x = v & 0x7F
        v >>= 7
        if v:
            out.append(x | 0x80)
        else:
            out.append(x)
            return bytes(out)


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


class _RawTensor:
    __slots__ = ("name", "block", "rows", "buf", "off", "n")

    def __init__(self):
        self.name, self.block, self.rows, self.buf, self.off, self.n = "", 0, [], None, 0, 0

    def floats(self) -> np.ndarray:
        """A zero-copy float32 view of the data in the received message."""
        return np.frombuffer(self.buf, dtype=_F32, count=self.n // 4, offset=self.off)


class _RawPull:
    __slots__ = ("version", "incarnation", "tensors")


def _decode_tensor(b, i: int, end: int) -> _RawTensor:
    t = _RawTensor()
    t.buf = b
    while i < end:
        tag, i = _varint(b, i)
        num, wt = tag >> 3, tag & 7
        if wt == 0:
            v, i = _varint(b, i)
            if num == 2:
                t.block = _signed(v)
            elif num == 3:
                t.rows.append(_signed(v))
        elif wt == 2:
            n, i = _varint(b, i)
            if num == 1:
                t.name = bytes(b[i:i + n]).decode()
            elif num == 3:
                j = i
                while j < i + n:
                    v, j = _varint(b, j)
                    t.rows.append(_signed(v))
            elif num == 4:
                t.off, t.n = i, n
            i += n
        elif wt == 1:
            i += 8
        elif wt == 5:
            i += 4
        else:
            raise errors.Internal("pull: malformed tensor in the response")
    return t


def _decode_pull(data: bytes) -> _RawPull:
    m = _RawPull()
    m.version = m.incarnation = 0
    m.tensors = []
    b = memoryview(data)
    i, end = 0, len(data)
    while i < end:
        tag, i = _varint(b, i)
        num, wt = tag >> 3, tag & 7
        if wt == 0:
            v, i = _varint(b, i)
            if num == 1:
                m.version = _signed(v)
            elif num == 3:
                m.incarnation = _signed(v)
        elif wt == 2:
            n, i = _varint(b, i)
            if num == 2:
                m.tensors.append(_decode_tensor(data, i, i + n))
            i += n
        elif wt == 1:
            i += 8
        elif wt == 5:
            i += 4
        else:
            raise errors.Internal("pull: malformed response")
    return m


def _tag(num: int, wt: int) -> bytes:
    return _enc_varint((num << 3) | wt)


def _enc_tensor(name: str, block: int, rows, data) -> list:
    """Field parts of one Tensor; ``data`` is a C-contiguous float32 array."""
    head = bytearray()
    nb = name.encode()
    head += _tag(1, 2) + _enc_varint(len(nb)) + nb
    if block:
        head += _tag(2, 0) + _enc_varint(block)
    if rows is not None and len(rows):
        packed = b"".join(_enc_varint(int(r)) for r in rows)
        head += _tag(3, 2) + _enc_varint(len(packed)) + packed
    nbytes = data.size * 4
    if nbytes:
        head += _tag(4, 2) + _enc_varint(nbytes)
    body = [bytes(head)]
    if nbytes:
        body.append(memoryview(data if _LE else data.astype(_F32)).cast("B"))
    size = sum(len(x) for x in body)
    return [_tag(6, 2) + _enc_varint(size), *body]


def _encode_push(req: "_Push") -> bytes:
    parts = []
    jb, tb = req.job.encode(), req.trainer.encode()
    hdr = bytearray()
    if jb:
        hdr += _tag(1, 2) + _enc_varint(len(jb)) + jb
    if req.slot:
        hdr += _tag(2, 0) + _enc_varint(req.slot)
    if tb:
        hdr += _tag(3, 2) + _enc_varint(len(tb)) + tb
    if req.version:
        hdr += _tag(4, 0) + _enc_varint(req.version)
    if req.version:
        hdr += _tag(5, 0) + _enc_varint(req.version)
    if req.examples:
        hdr += _tag(7, 0) + _enc_varint(req.examples)
    if req.push_id:
        hdr += _tag(8, 0) + _enc_varint(req.push_id)
    if req.incarnation:
        hdr += _tag(10, 0) + _enc_varint(req.incarnation)
    if req.epoch:
        hdr += _tag(11, 0) + _enc_varint(req.epoch)
    parts.append(bytes(hdr))
    for t in req.tensors:
        parts.extend(_enc_tensor(*t))
    return b"".join(parts)


class _Push:
    __slots__ = ("job", "slot", "trainer", "version", "examples", "tensors", "incarnation", "push_id", "epoch")

    def __init__(self, job, slot, trainer, version, examples, tensors, incarnation=0, push_id=0, epoch=0):
        self.job, self.slot, self.trainer = job, slot, trainer
        self.version, self.examples, self.tensors = version, examples, tensors
        # The slot incarnation the gradients were computed on (the pull's):
        # a sync slot of another incarnation refuses the push as stale.
        self.incarnation = incarnation
        # The push's id (uint64, 0: none): the same on every retry.
        self.push_id = push_id
        # The slot's replica epoch resolved with its address (0: not
        # checked), set anew on every attempt (PushRequest.epoch).
        self.epoch = epoch

    def with_tensors(self, tensors) -> "_Push":
        """This push's header with other tensors."""
        return _Push(self.job, self.slot, self.trainer, self.version, self.examples, tensors, self.incarnation,
                     self.push_id, self.epoch)


def _chunk_tensors(ts: list, limit: int) -> list[list]:
    """Splits push tensors (name, block, rows, data) into runs of at most
    ``limit`` data bytes; a tensor larger than ``limit`` is a run of its own
    (pserver/wire's ChunkTensors)."""
    out, run, size = [], [], 0
    for t in ts:
        n = t[3].size * 4
        if run and size + n > limit:
            out.append(run)
            run, size = [], 0
        run.append(t)
        size += n
    out.append(run)
    return out


class _SlotConn:
    def __init__(self, addr: str, creds: grpc.ChannelCredentials | None):
        self.addr = addr
        # The client's TLS credentials (None: plaintext) for the pserver port.
        self.channel = _tls.channel(addr, creds, CHANNEL_OPTIONS + [
            ("grpc.http2.lookahead_bytes", 64 << 20),
            # Unary-stream calls (pull_stream) run on the thread that
            # iterates them: no channel spin thread handing each message
            # over (grpcio's option; it changes no other call).
            (grpc.experimental.ChannelOptions.SingleThreadedUnaryStream, 1),
        ])
        self.pull = self.channel.unary_unary("/raftps.v1.PServer/Pull",
                                             request_serializer=pserver_pb2.PullRequest.SerializeToString,
                                             response_deserializer=_decode_pull)
        self.push = self.channel.unary_unary("/raftps.v1.PServer/Push", request_serializer=_encode_push,
                                             response_deserializer=pserver_pb2.PushResponse.FromString)
        # The same messages, chunked (PServer.PullStream / PushStream): the
        # pserver streams a big pull while the trainer places what arrived,
        # and a big push while the pserver parses what arrived. A pull is
        # one request, so PullStream is called as unary-stream (the same
        # frames on the wire: one request, then the client's half-close),
        # which grpcio runs on the caller's thread.
        self.pull_stream = self.channel.unary_stream("/raftps.v1.PServer/PullStream",
                                                      request_serializer=pserver_pb2.PullRequest.SerializeToString,
                                                      response_deserializer=_decode_pull)
        self.push_stream = self.channel.stream_unary("/raftps.v1.PServer/PushStream", request_serializer=_encode_push,
                                                     response_deserializer=pserver_pb2.PushResponse.FromString)
        self.leave = self.channel.unary_unary("/raftps.v1.PServer/LeaveStep",
                                              request_serializer=pserver_pb2.LeaveStepRequest.SerializeToString,
                                              response_deserializer=pserver_pb2.LeaveStepResponse.FromString)


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
                c = self._conns[addr] = _SlotConn(addr, self.client.credentials)
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
        _tls.close_channels([c.channel for c in conns])

    def __enter__(self) -> "ParamClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
