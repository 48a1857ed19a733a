"""The parameter-server data path's gRPC transport: gRPC's C core
(libgrpc.so.29, Debian's libgrpc29: gRPC 1.51, the release python3-grpcio
is built from) called through ctypes, so that a message moves between
numpy buffers and gRPC slices with one user-space copy each way.

grpcio's Python layer takes only ``bytes`` to send (and copies them into
a slice) and hands over only ``bytes`` received: it copies each received
slice into a new ``bytes``, appends that to a bytearray, and copies the
bytearray into the ``bytes`` it returns (python/PERFORMANCE.md). Here a
request is gathered from its parts straight into one slice the call
sends (``grpc_slice_malloc``, ``grpc_raw_byte_buffer_create``), and a
received message is joined once by the C core
(``grpc_byte_buffer_reader_readall``) and read in place through a
memoryview that keeps the slice alive: the pull places its blocks from
there into the trainer's arrays, as the Go client does from its receive
buffer.

    ch = Channel("127.0.0.1:7001", tls)        # tls: raftps.TLS or None
    resp = ch.unary(b"/raftps.v1.PServer/Pull", [req_bytes], timeout=60)
    for msg in ch.unary_stream(b"/raftps.v1.PServer/PullStream", [req_bytes], 60):
        ...   # msg: a memoryview, valid while referenced
    resp = ch.stream_unary(b"/raftps.v1.PServer/PushStream", iter([[hdr, data], ...]), 60)
    ch.close()

A call that ends with a non-OK status raises :class:`CallError`, a
``grpc.RpcError`` with grpcio's ``code()``, ``details()`` and
``trailing_metadata()`` (``raftps.errors.from_grpc`` reads it as it reads
grpcio's). Each call runs on the calling thread: it plucks its own
completion queue with the GIL released (ctypes), so calls of several
threads run in parallel. As ``raftps.tls.channel`` does for grpcio, each
channel keeps a thread watching its connectivity (0.2 s watches), so a
connection attempt (a TLS handshake the pserver bounds to 5 s) makes
progress between calls.

The structures below are gRPC 1.51's (include/grpc/impl/codegen/
grpc_types.h, slice.h, gpr_types.h; ABI 29). :func:`available` is False
where libgrpc.so.29 cannot be loaded; raftps.ps then uses grpcio.
"""

from __future__ import annotations

import atexit
import ctypes as C
import os
import threading
import weakref

import grpc
import numpy as np

from raftps import _malloc

# --- gRPC 1.51's C structures (ABI 29) ---------------------------------


class _SliceRefcounted(C.Structure):
    _fields_ = [("length", C.c_size_t), ("bytes", C.c_void_p)]


class _SliceInlined(C.Structure):
    _fields_ = [("length", C.c_uint8), ("bytes", C.c_uint8 * 23)]


class _SliceData(C.Union):
    _fields_ = [("refcounted", _SliceRefcounted), ("inlined", _SliceInlined)]


class _Slice(C.Structure):
    # grpc_slice: refcount NULL means inlined (at most 23 bytes:
    # GRPC_SLICE_INLINED_SIZE, with GRPC_SLICE_INLINE_EXTRA_SIZE).
    _fields_ = [("refcount", C.c_void_p), ("data", _SliceData)]

    def span(self) -> tuple[int, int]:
        """(address, length) of the slice's bytes."""
        if self.refcount:
            return self.data.refcounted.bytes or 0, self.data.refcounted.length
        return C.addressof(self) + _Slice.data.offset + 1, self.data.inlined.length


class _Timespec(C.Structure):
    _fields_ = [("tv_sec", C.c_int64), ("tv_nsec", C.c_int32), ("clock_type", C.c_int)]


class _Metadata(C.Structure):
    _fields_ = [("key", _Slice), ("value", _Slice), ("internal", C.c_void_p * 4)]


class _MetadataArray(C.Structure):
    _fields_ = [("count", C.c_size_t), ("capacity", C.c_size_t), ("metadata", C.POINTER(_Metadata))]


class _OpSendInitialMetadata(C.Structure):
    _fields_ = [("count", C.c_size_t), ("metadata", C.c_void_p), ("is_set", C.c_uint8), ("level", C.c_int)]


class _OpRecvStatus(C.Structure):
    _fields_ = [("trailing_metadata", C.POINTER(_MetadataArray)), ("status", C.POINTER(C.c_int)),
                ("status_details", C.POINTER(_Slice)), ("error_string", C.POINTER(C.c_void_p))]


class _OpData(C.Union):
    _fields_ = [("reserved", C.c_void_p * 8), ("send_initial_metadata", _OpSendInitialMetadata),
                ("send_message", C.c_void_p), ("recv_initial_metadata", C.POINTER(_MetadataArray)),
                ("recv_message", C.POINTER(C.c_void_p)), ("recv_status_on_client", _OpRecvStatus)]


class _Op(C.Structure):
    _fields_ = [("op", C.c_int), ("flags", C.c_uint32), ("reserved", C.c_void_p), ("data", _OpData)]


class _Event(C.Structure):
    _fields_ = [("type", C.c_int), ("success", C.c_int), ("tag", C.c_void_p)]


class _ByteBufferReader(C.Structure):
    _fields_ = [("buffer_in", C.c_void_p), ("buffer_out", C.c_void_p), ("index", C.c_uint)]


class _ArgValue(C.Union):
    _fields_ = [("string", C.c_char_p), ("integer", C.c_int), ("pointer", C.c_void_p * 2)]


class _Arg(C.Structure):
    _fields_ = [("type", C.c_int), ("key", C.c_char_p), ("value", _ArgValue)]


class _ChannelArgs(C.Structure):
    _fields_ = [("num_args", C.c_size_t), ("args", C.POINTER(_Arg))]


class _KeyCertPair(C.Structure):
    _fields_ = [("private_key", C.c_char_p), ("cert_chain", C.c_char_p)]


# The sizes grpc_types.h gives these on LP64: a layout that does not match
# fails here, at import, not inside a call.
assert (C.sizeof(_Slice), C.sizeof(_Op), C.sizeof(_Metadata), C.sizeof(_Arg), C.sizeof(_Event)) == (32, 80, 96, 32, 16)

_SEND_INITIAL_METADATA, _SEND_MESSAGE, _SEND_CLOSE_FROM_CLIENT = 0, 1, 2
_RECV_INITIAL_METADATA, _RECV_MESSAGE, _RECV_STATUS_ON_CLIENT = 4, 5, 6
_CLOCK_MONOTONIC = 0
_QUEUE_SHUTDOWN, _QUEUE_TIMEOUT, _OP_COMPLETE = 0, 1, 2
_ARG_STRING, _ARG_INTEGER = 0, 1
_PROPAGATE_DEFAULTS = 0xFFFF
_CONNECTIVITY_SHUTDOWN = 4

_lib = None
_load_error = ""


def _bind(name, res, *args):
    f = getattr(_lib, name)
    f.restype, f.argtypes = res, list(args)
    return f


def _load() -> None:
    global _lib, _load_error
    try:
        _lib = C.CDLL("libgrpc.so.29")
    except OSError as e:
        _load_error = f"cannot load libgrpc.so.29 (Debian's libgrpc29): {e}"
        return
    ver = _bind("grpc_version_string", C.c_char_p)().decode()
    if not ver.startswith("29."):
        _lib, _load_error = None, f"libgrpc.so.29 reports core version {ver}, not 29.x"
        return
    vp, sz = C.c_void_p, C.c_size_t
    g = globals()
    for name, res, *args in (
            ("grpc_init", None),
            ("grpc_insecure_credentials_create", vp),
            ("grpc_ssl_credentials_create", vp, C.c_char_p, C.POINTER(_KeyCertPair), vp, vp),
            ("grpc_channel_credentials_release", None, vp),
            ("grpc_channel_create", vp, C.c_char_p, vp, C.POINTER(_ChannelArgs)),
            ("grpc_channel_destroy", None, vp),
            ("grpc_channel_check_connectivity_state", C.c_int, vp, C.c_int),
            ("grpc_channel_watch_connectivity_state", None, vp, C.c_int, _Timespec, vp, vp),
            ("grpc_channel_create_call", vp, vp, vp, C.c_uint32, vp, _Slice, vp, _Timespec, vp),
            ("grpc_completion_queue_create_for_pluck", vp, vp),
            ("grpc_completion_queue_create_for_next", vp, vp),
            ("grpc_completion_queue_pluck", _Event, vp, vp, _Timespec, vp),
            ("grpc_completion_queue_next", _Event, vp, _Timespec, vp),
            ("grpc_completion_queue_shutdown", None, vp),
            ("grpc_completion_queue_destroy", None, vp),
            ("grpc_call_start_batch", C.c_int, vp, C.POINTER(_Op), sz, vp, vp),
            ("grpc_call_cancel", C.c_int, vp, vp),
            ("grpc_call_unref", None, vp),
            ("grpc_slice_from_copied_buffer", _Slice, C.c_char_p, sz),
            ("grpc_slice_malloc", _Slice, sz),
            ("grpc_slice_unref", None, _Slice),
            ("grpc_raw_byte_buffer_create", vp, C.POINTER(_Slice), sz),
            ("grpc_byte_buffer_destroy", None, vp),
            ("grpc_byte_buffer_reader_init", C.c_int, C.POINTER(_ByteBufferReader), vp),
            ("grpc_byte_buffer_reader_readall", _Slice, C.POINTER(_ByteBufferReader)),
            ("grpc_byte_buffer_reader_destroy", None, C.POINTER(_ByteBufferReader)),
            ("grpc_metadata_array_init", None, C.POINTER(_MetadataArray)),
            ("grpc_metadata_array_destroy", None, C.POINTER(_MetadataArray)),
            ("gpr_now", _Timespec, C.c_int),
            ("gpr_free", None, vp)):
        g["_" + name] = _bind(name, res, *args)
    # The slice layout read back on an inlined and a refcounted slice: a
    # library whose grpc_slice differs from the one above fails here.
    for n in (23, 64):
        want = bytes(range(n))
        s = _grpc_slice_from_copied_buffer(want, n)
        got = _slice_bytes(s)
        _grpc_slice_unref(s)
        if got != want:
            _lib, _load_error = None, "libgrpc.so.29's grpc_slice layout is not gRPC 1.51's"
            return


_init_lock = threading.Lock()
_initialized = False


def _init() -> None:
    """grpc_init, once, at the first channel (a process that never dials a
    pserver starts no C-core thread)."""
    global _initialized
    with _init_lock:
        if not _initialized:
            # The malloc settings of the data path (raftps._malloc) before
            # grpc_init starts the C core's threads: a thread that allocated
            # before them keeps an arena of its own, which gives message
            # buffers back to the kernel.
            _malloc.keep_message_buffers()
            _grpc_init()
            _initialized = True


def available() -> bool:
    """Whether libgrpc.so.29 (gRPC core 29.x) is loaded."""
    return _lib is not None


def unavailable_reason() -> str:
    """Why available() is False ("" if it is not)."""
    return _load_error


_INFINITE = _Timespec(0x7FFFFFFFFFFFFFFF, 0, _CLOCK_MONOTONIC)


def _deadline(seconds: float) -> _Timespec:
    now = _gpr_now(_CLOCK_MONOTONIC)
    ns = now.tv_nsec + int(seconds * 1e9)
    return _Timespec(now.tv_sec + ns // 1_000_000_000, ns % 1_000_000_000, _CLOCK_MONOTONIC)


def _slice_bytes(s: _Slice) -> bytes:
    p, n = s.span()
    return C.string_at(p, n) if n else b""


_load()

_STATUS = {sc.value[0]: sc for sc in grpc.StatusCode}


class CallError(grpc.RpcError):
    """A call's non-OK status, read like grpcio's errors: ``code()`` (a
    grpc.StatusCode), ``details()`` (the server's message) and
    ``trailing_metadata()`` ((key, value) pairs; values of ``-bin`` keys
    are bytes)."""

    def __init__(self, code: grpc.StatusCode, details: str, trailing: tuple = (), debug: str = ""):
        super().__init__(f"{code.name}: {details}")
        self._code, self._details, self._trailing, self.debug_error_string = code, details, trailing, debug

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple:
        return self._trailing


class _Received:
    """A received message's bytes: one slice (the C core's join of the
    message), released when the last view of it goes."""

    __slots__ = ("_slice", "__weakref__")

    def __init__(self, bb: int):
        reader = _ByteBufferReader()
        if not _grpc_byte_buffer_reader_init(C.byref(reader), bb):
            raise CallError(grpc.StatusCode.INTERNAL, "cannot read a received message (compressed?)")
        self._slice = _grpc_byte_buffer_reader_readall(C.byref(reader))
        _grpc_byte_buffer_reader_destroy(C.byref(reader))

    def view(self) -> memoryview:
        p, n = self._slice.span()
        if not n:
            return memoryview(b"")
        arr = (C.c_ubyte * n).from_address(p)
        arr.owner = self  # the slice lives while any view of it does
        return memoryview(arr).cast("B")

    def __del__(self):
        if _lib is not None and self._slice is not None:
            _grpc_slice_unref(self._slice)
            self._slice = None


def _gather(parts) -> int:
    """A grpc_byte_buffer of the concatenated parts (bytes-like objects),
    copied once into one new slice."""
    views = [memoryview(p).cast("B") for p in parts]
    total = sum(v.nbytes for v in views)
    s = _grpc_slice_malloc(total)
    if total:
        p, _ = s.span()
        dst = np.ctypeslib.as_array((C.c_ubyte * total).from_address(p))
        off = 0
        for v in views:
            n = v.nbytes
            if n:
                dst[off:off + n] = np.frombuffer(v, dtype=np.uint8)
                off += n
    bb = _grpc_raw_byte_buffer_create(C.byref(s), 1)
    _grpc_slice_unref(s)
    return bb


class _Call:
    """One call on its own pluck completion queue; every batch started is
    plucked before the queue goes (close), also when the call fails."""

    def __init__(self, channel: int, method: bytes, timeout: float | None):
        self.cq = _grpc_completion_queue_create_for_pluck(None)
        m = _grpc_slice_from_copied_buffer(method, len(method))
        dl = _INFINITE if timeout is None else _deadline(timeout)
        self.call = _grpc_channel_create_call(channel, None, _PROPAGATE_DEFAULTS, self.cq, m, None, dl, None)
        _grpc_slice_unref(m)
        self.pending: set[int] = set()
        self._next_tag = 1
        # RECV_STATUS_ON_CLIENT's outputs.
        self.trailing, self.status = _MetadataArray(), C.c_int()
        self.details, self.error = _Slice(), C.c_void_p()
        self.initial = _MetadataArray()
        _grpc_metadata_array_init(C.byref(self.trailing))
        _grpc_metadata_array_init(C.byref(self.initial))
        self.status_tag = 0

    def start(self, ops) -> int:
        arr = (_Op * len(ops))(*ops)
        tag = self._next_tag
        self._next_tag += 1
        rc = _grpc_call_start_batch(self.call, arr, len(ops), tag, None)
        if rc != 0:
            raise CallError(grpc.StatusCode.INTERNAL, f"grpc_call_start_batch: error {rc}")
        self.pending.add(tag)
        return tag

    def wait(self, tag: int) -> bool:
        """Plucks tag; whether its batch succeeded."""
        ev = _grpc_completion_queue_pluck(self.cq, tag, _INFINITE, None)
        self.pending.discard(tag)
        return ev.type == _OP_COMPLETE and bool(ev.success)

    def start_status(self) -> None:
        """Starts receiving the response's headers and status, first (as
        grpcio does): the C core delivers a status, also one that ends the
        call early, only to a call that asked for the headers."""
        head = _Op(op=_RECV_INITIAL_METADATA)
        head.data.recv_initial_metadata = C.pointer(self.initial)
        op = _Op(op=_RECV_STATUS_ON_CLIENT)
        r = op.data.recv_status_on_client
        r.trailing_metadata = C.pointer(self.trailing)
        r.status = C.pointer(self.status)
        r.status_details = C.pointer(self.details)
        r.error_string = C.pointer(self.error)
        self.status_tag = self.start([head, op])

    def request_ops(self, message: int) -> list:
        """A whole request: headers, the one message, the half-close."""
        send = _Op(op=_SEND_MESSAGE)
        send.data.send_message = message
        return [_Op(op=_SEND_INITIAL_METADATA), send, _Op(op=_SEND_CLOSE_FROM_CLIENT)]

    def recv(self, out: C.c_void_p) -> int:
        op = _Op(op=_RECV_MESSAGE)
        op.data.recv_message = C.pointer(out)
        return self.start([op])

    def send(self, bb: int) -> int:
        op = _Op(op=_SEND_MESSAGE)
        op.data.send_message = bb
        return self.start([op])

    def finish(self) -> None:
        """Waits for the status; raises CallError unless it is OK."""
        self.wait(self.status_tag)
        code = self.status.value
        if code == 0:
            return
        md = []
        for i in range(self.trailing.count):
            e = self.trailing.metadata[i]
            k = _slice_bytes(e.key).decode("latin-1")
            v = _slice_bytes(e.value)
            md.append((k, v if k.endswith("-bin") else v.decode("latin-1")))
        debug = C.string_at(self.error.value).decode(errors="replace") if self.error.value else ""
        raise CallError(_STATUS.get(code, grpc.StatusCode.UNKNOWN),
                        _slice_bytes(self.details).decode(errors="replace"), tuple(md), debug)

    def response(self, out: C.c_void_p, method: bytes) -> memoryview:
        """The one response message a finished RECV_MESSAGE left in out,
        once the status is OK; raises CallError otherwise, or if an OK call
        sent no message."""
        got = _take(out)
        self.finish()
        if got is None:
            raise CallError(grpc.StatusCode.INTERNAL, f"{method.decode()}: OK status without a response")
        return got.view()

    def close(self) -> None:
        if self.pending:
            _grpc_call_cancel(self.call, None)
            for tag in list(self.pending):
                self.wait(tag)
        _grpc_slice_unref(self.details)
        if self.error.value:
            _gpr_free(self.error)
        _grpc_metadata_array_destroy(C.byref(self.trailing))
        _grpc_metadata_array_destroy(C.byref(self.initial))
        _grpc_call_unref(self.call)
        _grpc_completion_queue_shutdown(self.cq)
        while _grpc_completion_queue_pluck(self.cq, None, _INFINITE, None).type != _QUEUE_SHUTDOWN:
            pass
        _grpc_completion_queue_destroy(self.cq)


def _take(out: C.c_void_p) -> _Received | None:
    """The message a finished RECV_MESSAGE left in out (None: the stream
    ended), its byte buffer destroyed."""
    if not out.value:
        return None
    try:
        return _Received(out.value)
    finally:
        _grpc_byte_buffer_destroy(out.value)
        out.value = None


# Channels not yet closed: their watch threads stop at exit.
_open: "weakref.WeakSet[Channel]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for ch in list(_open):
        ch.close()


class Channel:
    """A channel to one pserver.

    Args:
        target: "host:port".
        tls: a raftps.TLS (mutual TLS: the node's certificate checked
            against the CA and the target's host, the client's shown), or
            None for plaintext.
        options: channel arguments as grpcio takes them ((name, int or str)).

    Raises ValueError if libgrpc.so.29 is not loaded (see available());
    raftps.errors.InvalidArgument names an unreadable TLS file.
    """

    def __init__(self, target: str, tls=None, options=()):
        if _lib is None:
            raise ValueError(f"raftps._grpccore: {_load_error}")
        _init()
        self.target = target
        keep = []
        args = (_Arg * len(options))()
        for a, (k, v) in zip(args, options):
            kb = k.encode()
            keep.append(kb)
            a.key = kb
            if isinstance(v, int):
                a.type, a.value.integer = _ARG_INTEGER, v
            else:
                vb = str(v).encode()
                keep.append(vb)
                a.type, a.value.string = _ARG_STRING, vb
        cargs = _ChannelArgs(len(options), args)
        if tls is None:
            creds = _grpc_insecure_credentials_create()
        else:
            ca, cert, key = tls.pem()
            pair = _KeyCertPair(key, cert)
            creds = _grpc_ssl_credentials_create(ca, C.byref(pair), None, None)
        try:
            self._ch = _grpc_channel_create(target.encode(), creds, C.byref(cargs))
        finally:
            _grpc_channel_credentials_release(creds)
        self._mu = threading.Lock()
        self._closed = False
        # The process that made the channel: a forked child (a DataLoader
        # worker) has the C core's memory but not its threads, and must not
        # call into it.
        self._pid = os.getpid()
        self._watch_cq = _grpc_completion_queue_create_for_next(None)
        self._watcher = threading.Thread(target=self._watch, name=f"raftps-core-{target}", daemon=True)
        self._watcher.start()
        _open.add(self)

    def _watch(self) -> None:
        # Asks to connect and watches the state in 0.2 s watches, so the
        # C core polls the channel's sockets also between calls.
        state = _grpc_channel_check_connectivity_state(self._ch, 1)
        while not self._closed:
            _grpc_channel_watch_connectivity_state(self._ch, state, _deadline(0.2), self._watch_cq, None)
            _grpc_completion_queue_next(self._watch_cq, _INFINITE, None)
            state = _grpc_channel_check_connectivity_state(self._ch, 1)

    def close(self) -> None:
        """Closes the channel (calls in flight fail with CANCELLED); waits up
        to 1 s for its watch thread."""
        with self._mu:
            if self._closed:
                return
            self._closed = True
        _open.discard(self)
        if os.getpid() != self._pid:
            return
        if threading.current_thread() is not self._watcher:
            self._watcher.join(1.0)
        if self._watcher.is_alive():
            return  # the thread still uses the queue and channel: leave them
        _grpc_completion_queue_shutdown(self._watch_cq)
        while _grpc_completion_queue_next(self._watch_cq, _INFINITE, None).type != _QUEUE_SHUTDOWN:
            pass
        _grpc_completion_queue_destroy(self._watch_cq)
        _grpc_channel_destroy(self._ch)

    def _check(self) -> None:
        if self._closed:
            raise ValueError(f"raftps._grpccore: channel to {self.target} is closed")
        if os.getpid() != self._pid:
            raise ValueError(f"raftps._grpccore: channel to {self.target} was made by process {self._pid}, "
                             "not this forked one: make a ParamClient in the child")

    def unary(self, method: bytes, request, timeout: float | None) -> memoryview:
        """Sends one request (a list of bytes-like parts, concatenated) and
        returns the response's bytes. Raises CallError."""
        self._check()
        c = _Call(self._ch, method, timeout)
        try:
            bb = _gather(request)
            out = C.c_void_p()
            try:
                c.start_status()
                head = c.start(c.request_ops(bb))
                tag = c.recv(out)
                c.wait(head)
                c.wait(tag)
            finally:
                _grpc_byte_buffer_destroy(bb)
            return c.response(out, method)
        finally:
            c.close()

    def unary_stream(self, method: bytes, request, timeout: float | None):
        """Sends one request and yields each response message's bytes as it
        arrives (the next is received while the caller holds this one).
        Raises CallError."""
        self._check()
        c = _Call(self._ch, method, timeout)
        out = C.c_void_p()
        try:
            bb = _gather(request)
            try:
                c.start_status()
                c.wait(c.start(c.request_ops(bb)))
            finally:
                _grpc_byte_buffer_destroy(bb)
            c.wait(c.recv(out))
            while True:
                got = _take(out)
                if got is None:
                    break
                tag = c.recv(out)
                yield got.view()
                del got
                c.wait(tag)
            c.finish()
        finally:
            c.close()
            if out.value:  # the message a receive got before the caller stopped
                _grpc_byte_buffer_destroy(out.value)

    def stream_unary(self, method: bytes, requests, timeout: float | None) -> memoryview:
        """Sends each request (a list of bytes-like parts) of the iterable,
        gathering the next while the last is sent, then half-closes and
        returns the response's bytes. Raises CallError (the server's status
        if it ended the call early)."""
        self._check()
        c = _Call(self._ch, method, timeout)
        # The message being sent (its batch's tag and byte buffer) while the
        # next is gathered: one SEND_MESSAGE in flight at a time.
        tag, bb = 0, None
        try:
            c.start_status()
            # The server answers (headers first) only after the half-close.
            ok = c.wait(c.start([_Op(op=_SEND_INITIAL_METADATA)]))
            for parts in requests:
                nxt = _gather(parts)
                if tag:
                    ok = c.wait(tag)
                    _grpc_byte_buffer_destroy(bb)
                    tag, bb = 0, None
                if not ok:
                    _grpc_byte_buffer_destroy(nxt)
                    break  # the call ended early: its status says why
                tag, bb = c.send(nxt), nxt
            if tag:
                ok = c.wait(tag)
                _grpc_byte_buffer_destroy(bb)
                tag, bb = 0, None
            out = C.c_void_p()
            if ok:
                recv = _Op(op=_RECV_MESSAGE)
                recv.data.recv_message = C.pointer(out)
                c.wait(c.start([_Op(op=_SEND_CLOSE_FROM_CLIENT), recv]))
            return c.response(out, method)
        finally:
            c.close()  # cancels and plucks a send still in flight
            if bb is not None:
                _grpc_byte_buffer_destroy(bb)
