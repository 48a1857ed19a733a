"""raftps._grpccore, the C-core transport of the pserver data path, against
real pservers of the mutual-TLS fixture cluster: what it sends and
returns is what grpcio sends and returns, its errors read as grpcio's
(codes, messages, ErrorInfo reasons), and a call cut short (an abandoned
stream, a server error mid-push, a deadline, a dead address, a closed
channel) ends with an error and leaves the channel usable."""

import gc
import os
import signal
import time
import uuid

import grpc
import numpy as np
import pytest

import raftps.jobs
import raftps.ps as _ps
from raftps import _grpccore, _psconn, errors
from raftps import tls as _tls
from raftps.client import CHANNEL_OPTIONS
from raftps.ps import ParamClient
from raftps.v1 import pserver_pb2, pserver_pb2_grpc

from conftest import external_spec, wait_slots

PULL, PULL_STREAM = b"/raftps.v1.PServer/Pull", b"/raftps.v1.PServer/PullStream"
PUSH_STREAM = b"/raftps.v1.PServer/PushStream"


def test_core_loads_here():
    # install-python.sh installs Debian's libgrpc29: the suite must test the
    # default transport, not fall back to grpcio unnoticed.
    assert _grpccore.available(), _grpccore.unavailable_reason()
    assert _psconn.conn_class() is _psconn.CoreConn


def test_transport_choice(monkeypatch):
    monkeypatch.setenv(_psconn.ENV_TRANSPORT, "grpcio")
    assert _psconn.conn_class() is _psconn.GrpcioConn
    monkeypatch.setenv(_psconn.ENV_TRANSPORT, "core")
    assert _psconn.conn_class() is _psconn.CoreConn
    monkeypatch.setenv(_psconn.ENV_TRANSPORT, "quic")
    with pytest.raises(errors.InvalidArgument, match="RAFTPS_PS_TRANSPORT"):
        _psconn.conn_class()
    # Where libgrpc.so.29 does not load: grpcio by default, and a clear
    # error for an explicit "core".
    monkeypatch.setattr(_grpccore, "_lib", None)
    monkeypatch.setattr(_grpccore, "_load_error", "cannot load libgrpc.so.29 (test)")
    monkeypatch.delenv(_psconn.ENV_TRANSPORT)
    assert _psconn.conn_class() is _psconn.GrpcioConn
    monkeypatch.setenv(_psconn.ENV_TRANSPORT, "core")
    with pytest.raises(errors.InvalidArgument, match="cannot load libgrpc.so.29"):
        _psconn.conn_class()
    with pytest.raises(ValueError, match="cannot load libgrpc.so.29"):
        _grpccore.Channel("127.0.0.1:1")


@pytest.fixture(scope="module")
def big_job(cluster):
    """A 1-slot job of 3M float32 (12 MB: three PullStream messages), its
    pserver's address, and a core channel to it (mutual TLS, admin)."""
    job = f"core-{uuid.uuid4().hex[:6]}"
    params = [{"name": "w", "shape": [3_000_000], "init": "INIT_ZEROS"}]
    with raftps.Client([n.grpc for n in cluster], timeout=10.0, tls=cluster[0].client_tls) as client:
        raftps.jobs.submit(client, external_spec(job, params, mode="UPDATE_MODE_ASYNC", lr=1.0, pservers=1))
        wait_slots(client, job, 1)
        with ParamClient(client, job, "t0") as ps:
            ps.push({"w": np.arange(3_000_000, dtype=np.float32)})
            addr = ps.slots()[0]
        ch = _grpccore.Channel(addr, client.tls, CHANNEL_OPTIONS)
        yield job, addr, ch
        ch.close()
        raftps.jobs.cancel(client, job)


def _grpcio_pull(client, addr, req, stream):
    ch = _tls.channel(addr, client.credentials, CHANNEL_OPTIONS)
    try:
        if stream:
            call = ch.unary_stream(PULL_STREAM.decode(), request_serializer=None, response_deserializer=None)
            return [bytes(m) for m in call(req, timeout=60)]
        return [ch.unary_unary(PULL.decode())(req, timeout=60)]
    finally:
        _tls.close_channels([ch])


def test_same_bytes_as_grpcio(client, big_job):
    job, addr, ch = big_job
    req = pserver_pb2.PullRequest(job=job, slot=0).SerializeToString()
    for stream in (False, True):
        want = _grpcio_pull(client, addr, req, stream)
        got = [bytes(ch.unary(PULL, [req], 60))] if not stream else [bytes(m) for m in ch.unary_stream(PULL_STREAM, [req], 60)]
        assert len(got) == len(want) == (3 if stream else 1)
        assert got == want
    # The request may come in parts (a push's headers and its gradients' views).
    parts = [req[:3], memoryview(req[3:]), b""]
    assert bytes(ch.unary(PULL, parts, 60)) == _grpcio_pull(client, addr, req, False)[0]


def test_view_keeps_message_alive(big_job):
    job, _, ch = big_job
    req = pserver_pb2.PullRequest(job=job, slot=0).SerializeToString()
    view = ch.unary(PULL, [req], 60)
    first = bytes(view)
    floats = _ps._decode_pull(view).tensors[0].floats()
    del view
    gc.collect()
    # Only the float view refers to the message now: its slice is still there.
    for _ in range(3):
        ch.unary(PULL, [req], 60)  # allocations that would reuse freed memory
    assert _ps._decode_pull(first).tensors[0].floats().tobytes() == floats.tobytes()
    assert floats[:4].tolist() == [-0.0, -1.0, -2.0, -3.0]


def test_abandoned_stream_leaves_channel_usable(big_job):
    job, _, ch = big_job
    req = pserver_pb2.PullRequest(job=job, slot=0).SerializeToString()
    for _ in range(5):
        it = ch.unary_stream(PULL_STREAM, [req], 60)
        assert len(next(it)) > 1 << 20
        it.close()  # cancels the call and drains its queue
    assert len(list(ch.unary_stream(PULL_STREAM, [req], 60))) == 3


def test_errors_read_as_grpcio(client, big_job):
    job, addr, ch = big_job
    # A slot this pserver does not serve: the pserver's code and message.
    req = pserver_pb2.PullRequest(job=job, slot=5).SerializeToString()
    with pytest.raises(grpc.RpcError) as core_err:
        ch.unary(PULL, [req], 60)
    gch = _tls.channel(addr, client.credentials, CHANNEL_OPTIONS)
    try:
        with pytest.raises(grpc.RpcError) as grpcio_err:
            gch.unary_unary(PULL.decode())(req, timeout=60)
    finally:
        _tls.close_channels([gch])
    assert core_err.value.code() == grpcio_err.value.code() != grpc.StatusCode.OK
    assert core_err.value.details() == grpcio_err.value.details() != ""
    e = errors.from_grpc(core_err.value)
    assert type(e) is type(errors.from_grpc(grpcio_err.value))
    assert e.reason == errors.from_grpc(grpcio_err.value).reason


def test_server_error_mid_push_stream(big_job):
    job, _, ch = big_job
    head = _ps._Push(job, 0, "t-bad", 0, 1, [("w", 0, None, np.zeros(65536, np.float32))], push_id=7)
    bad = _ps._Push("", 0, "", 0, 0, [("nope", 0, None, np.zeros(65536, np.float32))])
    msgs = [_psconn._push_parts(head)] + [_psconn._push_parts(bad)] * 20
    t0 = time.monotonic()
    with pytest.raises(_grpccore.CallError) as ei:
        ch.stream_unary(PUSH_STREAM, iter(msgs), 60)
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT, ei.value
    assert "nope" in ei.value.details()
    assert time.monotonic() - t0 < 30
    # The channel still serves.
    req = pserver_pb2.PullRequest(job=job, slot=0).SerializeToString()
    assert len(bytes(ch.unary(PULL, [req], 60))) > 0


def test_deadline_and_dead_address(client, big_job):
    job, _, ch = big_job
    req = pserver_pb2.PullRequest(job=job, slot=0).SerializeToString()
    with pytest.raises(_grpccore.CallError) as ei:
        list(ch.unary_stream(PULL_STREAM, [req], 1e-6))
    assert ei.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    dead = _grpccore.Channel("127.0.0.1:1", client.tls, CHANNEL_OPTIONS)
    try:
        t0 = time.monotonic()
        with pytest.raises(_grpccore.CallError) as ei:
            dead.unary(PULL, [req], 30)
        assert ei.value.code() == grpc.StatusCode.UNAVAILABLE
        assert time.monotonic() - t0 < 20  # fails fast, not at the deadline
    finally:
        dead.close()
    closed = _grpccore.Channel("127.0.0.1:1", None, [])
    closed.close()
    with pytest.raises(ValueError, match="closed"):
        closed.unary(PULL, [req], 1)


def test_wrong_ca_is_unavailable(client, big_job, tmp_path):
    # A client that trusts another CA refuses the pserver's certificate.
    job, addr, _ = big_job
    ca = tmp_path / "ca.pem"
    ca.write_bytes(open(client.tls.cert, "rb").read())  # the client's own certificate: no CA of the node's
    ch = _grpccore.Channel(addr, _tls.TLS(str(ca), client.tls.cert, client.tls.key), CHANNEL_OPTIONS)
    try:
        with pytest.raises(_grpccore.CallError) as ei:
            ch.unary(PULL, [pserver_pb2.PullRequest(job=job, slot=0).SerializeToString()], 20)
        assert ei.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        ch.close()


def test_forked_child_does_not_call_into_the_core(big_job):
    # A forked child (a DataLoader worker) inherits the channel but not the
    # C core's threads: its calls are refused with a clear error and its
    # exit-time close makes no C call (which could wait on a lock a parent
    # thread held at the fork).
    job, _, ch = big_job
    req = pserver_pb2.PullRequest(job=job, slot=0).SerializeToString()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            try:
                ch.unary(PULL, [req], 5)
            except ValueError as e:
                code = 0 if "forked" in str(e) else 2
            _grpccore._close_all()
        finally:
            os._exit(code)
    deadline = time.monotonic() + 30
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung in the C core")
        time.sleep(0.05)
    assert os.waitstatus_to_exitcode(status) == 0
    assert len(bytes(ch.unary(PULL, [req], 60))) > 0  # the parent's channel still serves
