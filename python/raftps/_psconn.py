"""A trainer's connection to one pserver (raftps.ps): the wire format of
PullResponse and PushRequest, coded without protobuf Python so that
tensor data is never copied into or out of a protobuf message, and the
two transports that carry it.

- :class:`CoreConn` (the default where libgrpc.so.29 loads): gRPC's C core
  through ctypes (raftps._grpccore). A push is gathered from its parts
  (headers, and zero-copy views of the gradients) straight into the slice
  the call sends: one user-space copy, as the Go client's. A pulled
  message is joined once by the C core and decoded in place: the pull's
  placement into the trainer's arrays is the second copy, as the Go
  client's.
- :class:`GrpcioConn`: grpcio, with the same coding as raw
  request_serializer / response_deserializer; grpcio copies a sent message
  once more and a received one three times more (python/PERFORMANCE.md).

Set RAFTPS_PS_TRANSPORT=grpcio to use grpcio where the C core loads
(``core`` where it does not fails with the reason). Both carry the same
bytes; the pserver's answers and errors read the same through either
(grpc.RpcError with code(), details(), trailing_metadata()).

Each connection's methods: ``pull(PullRequest, timeout) -> _RawPull``,
``pull_stream(PullRequest, timeout)`` (an iterator of _RawPull),
``push(_Push, timeout) -> PushResponse``, ``push_stream(iterable of
_Push, timeout) -> PushResponse``, ``leave(LeaveStepRequest, timeout)``,
``close()``.
"""

from __future__ import annotations

import os
import sys

import grpc
import grpc.experimental
import numpy as np

from raftps import _grpccore, _protowire, errors
from raftps import tls as _tls
from raftps.client import CHANNEL_OPTIONS
from raftps.v1 import pserver_pb2

_LE = sys.byteorder == "little"
_F32 = np.dtype("<f4")

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
    __slots__ = ("name", "block", "rows", "data", "n")

    def __init__(self):
        self.name, self.block, self.rows, self.data, self.n = "", 0, [], b"", 0

    def floats(self) -> np.ndarray:
        """A zero-copy float32 view of the data in the received message."""
        return np.frombuffer(self.data, dtype=_F32, count=self.n // 4)


class _RawPull:
    __slots__ = ("version", "incarnation", "tensors")


def _decode_tensor(b: memoryview) -> _RawTensor:
    t = _RawTensor()
    for num, wt, v in _protowire.walk(b):
        if wt == 0:
            if num == 2:
                t.block = _signed(v)
            elif num == 3:
                t.rows.append(_signed(v))
        elif wt == 2:
            if num == 1:
                t.name = bytes(v).decode()
            elif num == 3:
                j = 0
                while j < len(v):
                    r, j = _varint(v, j)
                    t.rows.append(_signed(r))
            elif num == 4:
                t.data, t.n = v, len(v)
    return t


def _decode_pull(data) -> _RawPull:
    """The PullResponse in data (bytes-like), its tensors' data zero-copy
    views of it. Raises errors.Internal if it is malformed."""
    m = _RawPull()
    m.version = m.incarnation = 0
    m.tensors = []
    try:
        for num, wt, v in _protowire.walk(memoryview(data)):
            if wt == 0:
                if num == 1:
                    m.version = _signed(v)
                elif num == 3:
                    m.incarnation = _signed(v)
            elif wt == 2 and num == 2:
                m.tensors.append(_decode_tensor(v))
    except (ValueError, IndexError) as e:
        raise errors.Internal(f"pull: malformed response: {e}") from None
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


def _push_parts(req: "_Push") -> list:
    """The encoded PushRequest as parts to concatenate: small headers as
    bytes, each tensor's data as a zero-copy view of the gradient."""
    parts = []
    hdr = bytearray()
    # PushRequest's scalar fields in field order (fields 4 and 5 both carry
    # the version); a zero one is not sent, as protobuf does.
    for num, v in ((1, req.job.encode()), (2, req.slot), (3, req.trainer.encode()), (4, req.version),
                   (5, req.version), (7, req.examples), (8, req.push_id), (10, req.incarnation), (11, req.epoch)):
        if not v:
            continue
        if isinstance(v, bytes):
            hdr += _tag(num, 2) + _enc_varint(len(v)) + v
        else:
            hdr += _tag(num, 0) + _enc_varint(v)
    parts.append(bytes(hdr))
    for t in req.tensors:
        parts.extend(_enc_tensor(*t))
    return parts


def _encode_push(req: "_Push") -> bytes:
    """The encoded PushRequest (one copy of the gradients)."""
    return b"".join(_push_parts(req))


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


# The pserver channels' options beyond the Client's: a 64 MiB HTTP/2
# window, so a streamed pull's next messages arrive while the trainer
# places the last.
_PS_OPTIONS = [("grpc.http2.lookahead_bytes", 64 << 20)]

_PULL, _PULL_STREAM = "/raftps.v1.PServer/Pull", "/raftps.v1.PServer/PullStream"
_PUSH, _PUSH_STREAM = "/raftps.v1.PServer/Push", "/raftps.v1.PServer/PushStream"
_LEAVE = "/raftps.v1.PServer/LeaveStep"


class GrpcioConn:
    """A pserver connection over grpcio (see the module doc).

    Args:
        addr: the pserver's "host:port".
        client: the raftps.Client whose TLS credentials it uses (plaintext
            if it has none).
    """

    def __init__(self, addr: str, client):
        self.addr = addr
        # The client's TLS credentials (None: plaintext) for the pserver port.
        self.channel = _tls.channel(addr, client.credentials, CHANNEL_OPTIONS + _PS_OPTIONS + [
            # Unary-stream calls (pull_stream) run on the thread that
            # iterates them: no channel spin thread handing each message
            # over (grpcio's option; it changes no other call).
            (grpc.experimental.ChannelOptions.SingleThreadedUnaryStream, 1),
        ])
        self.pull = self.channel.unary_unary(_PULL, request_serializer=pserver_pb2.PullRequest.SerializeToString,
                                             response_deserializer=_decode_pull)
        self.push = self.channel.unary_unary(_PUSH, request_serializer=_encode_push,
                                             response_deserializer=pserver_pb2.PushResponse.FromString)
        # The same messages, chunked (PServer.PullStream / PushStream): the
        # pserver streams a big pull while the trainer places what arrived,
        # and a big push while the pserver parses what arrived. A pull is
        # one request, so PullStream is called as unary-stream (the same
        # frames on the wire: one request, then the client's half-close),
        # which grpcio runs on the caller's thread.
        self.pull_stream = self.channel.unary_stream(_PULL_STREAM,
                                                      request_serializer=pserver_pb2.PullRequest.SerializeToString,
                                                      response_deserializer=_decode_pull)
        self.push_stream = self.channel.stream_unary(_PUSH_STREAM, request_serializer=_encode_push,
                                                     response_deserializer=pserver_pb2.PushResponse.FromString)
        self.leave = self.channel.unary_unary(_LEAVE, request_serializer=pserver_pb2.LeaveStepRequest.SerializeToString,
                                              response_deserializer=pserver_pb2.LeaveStepResponse.FromString)

    def close(self) -> None:
        _tls.close_channels([self.channel])


class CoreConn:
    """A pserver connection over gRPC's C core (raftps._grpccore; see the
    module doc). Args as GrpcioConn's."""

    def __init__(self, addr: str, client):
        self.addr = addr
        self.channel = _grpccore.Channel(addr, client.tls, CHANNEL_OPTIONS + _PS_OPTIONS)

    def pull(self, req: pserver_pb2.PullRequest, timeout: float | None = None) -> _RawPull:
        return _decode_pull(self.channel.unary(_PULL.encode(), [req.SerializeToString()], timeout))

    def pull_stream(self, req: pserver_pb2.PullRequest, timeout: float | None = None):
        for msg in self.channel.unary_stream(_PULL_STREAM.encode(), [req.SerializeToString()], timeout):
            yield _decode_pull(msg)

    def push(self, req: _Push, timeout: float | None = None) -> pserver_pb2.PushResponse:
        return pserver_pb2.PushResponse.FromString(bytes(self.channel.unary(_PUSH.encode(), _push_parts(req), timeout)))

    def push_stream(self, msgs, timeout: float | None = None) -> pserver_pb2.PushResponse:
        resp = self.channel.stream_unary(_PUSH_STREAM.encode(), (_push_parts(m) for m in msgs), timeout)
        return pserver_pb2.PushResponse.FromString(bytes(resp))

    def leave(self, req: pserver_pb2.LeaveStepRequest, timeout: float | None = None) -> pserver_pb2.LeaveStepResponse:
        resp = self.channel.unary(_LEAVE.encode(), [req.SerializeToString()], timeout)
        return pserver_pb2.LeaveStepResponse.FromString(bytes(resp))

    def close(self) -> None:
        self.channel.close()


ENV_TRANSPORT = "RAFTPS_PS_TRANSPORT"


def conn_class():
    """The connection class RAFTPS_PS_TRANSPORT names ("core" or
    "grpcio"), by default CoreConn where libgrpc.so.29 loads and
    GrpcioConn elsewhere. Raises InvalidArgument for another value, or
    for "core" where the C core does not load (with the reason)."""
    want = os.environ.get(ENV_TRANSPORT, "")
    if want not in ("", "core", "grpcio"):
        raise errors.InvalidArgument(f"{ENV_TRANSPORT}={want!r}: want core or grpcio")
    if want == "grpcio" or (not want and not _grpccore.available()):
        return GrpcioConn
    if not _grpccore.available():
        raise errors.InvalidArgument(f"{ENV_TRANSPORT}=core: {_grpccore.unavailable_reason()}")
    return CoreConn
