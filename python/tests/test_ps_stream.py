"""raftps.ps's streaming data path (PullStream / PushStream with raw
codecs, the default for slots of more than STREAM_CHUNK_BYTES) against the
unary path and against protobuf's own parser: bit-identical parameters, and
bad input still refused with a clear error and nothing applied."""

import threading
import time
import uuid

import numpy as np
import pytest

import raftps
import raftps.jobs
import raftps.ps
from raftps import errors
from raftps import tls as _tls
from raftps.client import CHANNEL_OPTIONS
from raftps.ps import ParamClient
from raftps.v1 import pserver_pb2, pserver_pb2_grpc

from conftest import external_spec, wait_slots

BIG = 3_000_000  # 12 MB: each of the 2 slots holds ~6 MB, so the pserver sends 2+ PullStream messages


def _no_unary(*_a, **_kw):
    raise AssertionError("the streaming client made a unary Pull/Push")


def _streaming_only(ps):
    """Makes ps's unary Pull and Push fail, so a test proves it streamed."""
    get = ps._conn

    def conn(slot):
        c, epoch = get(slot)
        c.pull = c.push = _no_unary
        return c, epoch
    ps._conn = conn


def _protobuf_pull(ps, slot):
    """One slot's dense blocks read by a plain generated stub (protobuf's
    parser): the reference the raw decoders must match."""
    ch = _tls.channel(ps._conn(slot)[0].addr, ps.client.credentials, CHANNEL_OPTIONS)
    try:
        resp = pserver_pb2_grpc.PServerStub(ch).Pull(pserver_pb2.PullRequest(job=ps.job, slot=slot), timeout=60)
    finally:
        _tls.close_channels([ch])
    return [(t.name, t.block, bytes(t.data)) for t in resp.tensors]


def _bits(a):
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def test_stream_path_bit_identical_to_unary_and_protobuf(ps_transport, client, monkeypatch):
    # Pushes go in messages of 1 MiB (many per slot), pulls in the pserver's 4 MiB ones.
    monkeypatch.setattr(raftps.ps, "STREAM_CHUNK_BYTES", 1 << 20)
    job = f"stream-{uuid.uuid4().hex[:6]}"
    params = [{"name": "big", "shape": [BIG], "init": "INIT_ZEROS"},
              {"name": "w", "shape": [3, 700], "init": "INIT_ZEROS"},
              {"name": "b", "shape": [7], "init": "INIT_ZEROS"},
              {"name": "emb", "shape": [50, 4], "embedding": True, "init": "INIT_ZEROS"}]
    raftps.jobs.submit(client, external_spec(job, params, mode="UPDATE_MODE_ASYNC", lr=1.0))
    wait_slots(client, job, 2)
    rng = np.random.default_rng(7)

    def wild(shape):  # signs, subnormals, zeros and large magnitudes
        return (rng.standard_normal(shape) * 10.0 ** rng.integers(-40, 12, shape)).astype(np.float32)

    g = {"big": wild(BIG), "w": wild((3, 700)), "b": np.array([0, -0.0, 1e-38, 9.9e11, -1.5, 2 ** -20, 7], np.float32)}
    gr = rng.standard_normal((3, 4)).astype(np.float32)
    with ParamClient(client, job, "fast", stream_bytes=0) as fast, \
            ParamClient(client, job, "ref", stream_bytes=-1) as ref:
        assert fast._stream == [True, True] and ref._stream == [False, False]
        _streaming_only(fast)
        fast.pull()
        fast.push(g, sparse={"emb": ([3, 49, 3], gr)}, examples=3)   # streamed push
        ref.pull()
        ref.push(g, examples=3)                                       # unary push of the same gradients
        want = {k: (np.float32(0) - v) - v for k, v in g.items()}    # SGD, lr 1, from zeros, twice
        # Pulled into torch-like caller buffers (in place) by the stream, and by the unary path.
        dst = {k: np.full(v.shape, 3, np.float32) for k, v in g.items()}
        got_fast = fast.pull(dst)
        got_ref = ref.pull()
        for k in g:
            assert got_fast[k] is dst[k]
            assert (_bits(got_fast[k]) == _bits(want[k])).all(), k
            assert (_bits(got_ref[k]) == _bits(got_fast[k])).all(), k
        # Protobuf's parser sees the same bytes for every block.
        blocks = 0
        for slot in range(2):
            for name_, block, data in _protobuf_pull(ref, slot):
                lo = block * fast.layout.block_size
                assert data == got_fast[name_].reshape(-1)[lo:lo + len(data) // 4].tobytes(), (name_, block)
                blocks += 1
        assert blocks == sum(len(b) for b in fast._blocks)
        assert fast.versions == ref.versions
        er = ref.pull_rows("emb", [3, 49])  # row pulls are unary on both
        assert (_bits(er[0]) == _bits(-(gr[0] + gr[2]))).all() and (_bits(er[1]) == _bits(-gr[1])).all()

        # Bad input on the streaming path: a clear error, nothing applied.
        before = {k: v.copy() for k, v in fast.pull().items()}
        with pytest.raises(errors.InvalidArgument, match="has 5 values, want 3000000"):
            fast.push({"big": np.zeros(5, np.float32)})
        with pytest.raises(errors.InvalidArgument, match="'nope' is not a dense param"):
            fast.push({"nope": np.zeros(5, np.float32)})
        bad = np.zeros(BIG, np.float32)
        bad[-1] = np.nan  # in the last message of the stream
        with pytest.raises(errors.InvalidArgument, match="NaN"):
            fast.push({"big": bad, "w": np.ones((3, 700), np.float32)})
        after = fast.pull()
        for k in before:
            assert (_bits(after[k]) == _bits(before[k])).all(), k
    raftps.jobs.cancel(client, job)


def test_stream_path_keeps_mutual_tls_roles(client, cluster, bin_path):
    """The streaming calls are refused to a reader and to a trainer
    certificate naming another trainer (PermissionDenied, nothing applied),
    and served to the job's own trainer, over mutual TLS."""
    from raftps import localcluster
    from conftest import cluster_tls_dir

    job = f"stream-tls-{uuid.uuid4().hex[:6]}"
    params = [{"name": "w", "shape": [64, 100], "init": "INIT_ZEROS"}]
    raftps.jobs.submit(client, external_spec(job, params, mode="UPDATE_MODE_ASYNC", lr=1.0, block=1000))
    spec = wait_slots(client, job, 2).spec
    d = cluster_tls_dir(cluster)
    tag = uuid.uuid4().hex[:6]
    reader = localcluster.client_cert(bin_path, d, "reader-" + tag, "reader")
    mine = localcluster.client_cert(bin_path, d, "trainer-" + tag, "trainer", jobs=[job])
    eps = [n.grpc for n in cluster]
    g = {"w": np.arange(6400, dtype=np.float32).reshape(64, 100)}

    def streaming(c, trainer, **kw):
        ps = ParamClient(c, job, trainer, spec=spec, stream_bytes=0, **kw)
        assert ps._stream == [True, True]
        _streaming_only(ps)
        return ps

    with raftps.Client(eps, tls=reader) as rc, streaming(rc, "r", retries=2) as ps:
        with pytest.raises(errors.PermissionDenied):
            ps.push(g, examples=1)
        with pytest.raises(errors.PermissionDenied):
            ps.pull()
    with raftps.Client(eps, tls=mine) as tc, streaming(tc, "t-not-mine", retries=2) as ps:
        with pytest.raises(errors.PermissionDenied):
            ps.push(g, examples=1)
    with streaming(client, "admin") as ps:
        assert (ps.pull()["w"] == 0).all()
    with raftps.Client(eps, tls=mine) as tc, streaming(tc, "trainer-" + tag) as ps:
        ps.push(g, examples=1)
        assert (_bits(ps.pull()["w"]) == _bits(np.float32(0) - g["w"])).all()
    raftps.jobs.cancel(client, job)


def _job_of_two_streamed_slots(client, prefix):
    job = f"{prefix}-{uuid.uuid4().hex[:6]}"
    raftps.jobs.submit(client, external_spec(job, [{"name": "big", "shape": [BIG], "init": "INIT_ZEROS"}],
                                             mode="UPDATE_MODE_ASYNC", lr=1.0))
    wait_slots(client, job, 2)
    return job


def test_stream_pull_runs_on_the_placing_threads(client, monkeypatch):
    # A streamed pull is received on the ParamClient's own threads: grpcio
    # starts no channel spin thread (which handed every message over to
    # the placing thread) and no request thread for it.
    job = _job_of_two_streamed_slots(client, "streamthreads")
    try:
        with ParamClient(client, job, "t0", watch=False, stream_bytes=0) as ps:
            assert ps._stream == [True, True]
            _streaming_only(ps)
            ps.push({"big": np.ones(BIG, np.float32)})
            want = ps.pull()
            started = []
            start = threading.Thread.start

            def record(t):
                started.append(t.name)
                return start(t)
            monkeypatch.setattr(threading.Thread, "start", record)
            for _ in range(3):
                got = ps.pull()
                assert (got["big"] == want["big"]).all() and (got["big"] == -1).all()
            assert [n for n in started if not n.startswith("raftps-ps")] == [], started
    finally:
        raftps.jobs.cancel(client, job)


def test_stream_pull_error_surfaces_as_raftps_error(ps_transport, client):
    # The pserver's refusal ends the stream with a status; the pull raises
    # the matching raftps error (here Unavailable: the job's slots are no
    # longer hosted, and retries=0).
    job = _job_of_two_streamed_slots(client, "streamerr")
    with ParamClient(client, job, "t0", watch=False, stream_bytes=0, retries=0) as ps:
        _streaming_only(ps)
        ps.pull()
        raftps.jobs.cancel(client, job)
        deadline = time.monotonic() + 60
        while True:
            try:
                ps.pull()
            except errors.Unavailable as e:
                assert "slot " in e.message and "(after 0 retries)" in e.message, e.message
                break
            assert time.monotonic() < deadline, "pull still served 60 s after the job was cancelled"
            time.sleep(0.2)
