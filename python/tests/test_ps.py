"""raftps.ps against a real cluster: bit-exact push/pull, layout parity
with Go, embeddings, stale pushes, and two sync trainers equal to one
process of SGD."""

import threading
import time
import uuid

import grpc
import numpy as np
import pytest

import raftps
import raftps.jobs
from raftps import errors
from raftps.ps import Layout, ParamClient, fnv1a32, fnv1a64
from raftps.tasks import TrainerSession, permutation

from conftest import external_spec, wait_slots


def name(p):
    return f"{p}-{uuid.uuid4().hex[:6]}"


def test_hashes_and_permutation_match_go():
    # FNV-1a test vectors and values computed by Go's hash/fnv.
    assert fnv1a32(b"") == 0x811C9DC5 and fnv1a32(b"a") == 0xE40C292C
    assert fnv1a64(b"") == 0xCBF29CE484222325 and fnv1a64(b"a") == 0xAF63DC4C8601EC8C
    p = permutation(1000, 7, 2)
    assert sorted(p.tolist()) == list(range(1000)) and p.tolist() != list(range(1000))
    assert (permutation(1000, 7, 2) == p).all() and not (permutation(1000, 7, 3) == p).all()


def test_push_pull_bit_exact(ps_transport, client):
    job = name("bitexact")
    params = [{"name": "w", "shape": [3, 700], "init": "INIT_ZEROS"},     # 3 blocks of 1000 (last short)
              {"name": "b", "shape": [7], "init": "INIT_ZEROS"},
              {"name": "emb", "shape": [50, 4], "embedding": True, "init": "INIT_ZEROS"}]
    raftps.jobs.submit(client, external_spec(job, params, mode="UPDATE_MODE_ASYNC", lr=1.0, block=1000))
    wait_slots(client, job, 2)
    with ParamClient(client, job, "t0") as ps:
        # w spans blocks on both slots: the layout must match the pservers' or they refuse the push.
        cur = ps.pull()
        assert all((a == 0).all() for a in cur.values())
        rng = np.random.default_rng(1)
        g = {"w": (rng.standard_normal((3, 700)) * 10.0 ** rng.integers(-30, 11, (3, 700))).astype(np.float32),
             "b": np.array([0, -0.0, 1e-38, 9.9e11, -1.5, 2 ** -20, 7], np.float32)}
        rows = [3, 49, 3, 0]
        gr = rng.standard_normal((4, 4)).astype(np.float32)
        ps.push(g, sparse={"emb": (rows, gr)}, examples=5)
        got = ps.pull()
        # SGD with lr 1 from zeros: exactly 0 - g in float32, bit for bit.
        for k in g:
            want = np.float32(0) - g[k]
            assert got[k].shape == g[k].shape
            assert (got[k].view(np.uint32) == want.view(np.uint32)).all(), k
        want = {3: -(gr[0] + gr[2]), 49: -gr[1], 0: -gr[3]}
        er = ps.pull_rows("emb", [0, 3, 49, 3, 10])
        assert er.shape == (5, 4)
        assert (er[0] == want[0]).all() and (er[1] == want[3]).all() and (er[2] == want[49]).all()
        assert (er[3] == want[3]).all() and (er[4] == 0).all()
        # Pulling into caller-owned buffers (e.g. torch tensors' memory) fills them in place.
        dst = {"w": np.full((3, 700), 5, np.float32), "b": np.zeros(7, np.float32)}
        out = ps.pull(dst)
        assert out["w"] is dst["w"] and (dst["w"] == got["w"]).all()
        with pytest.raises(errors.InvalidArgument):
            ps.push({"w": np.zeros(5, np.float32)})
        with pytest.raises(errors.InvalidArgument):
            ps.push({"nope": np.zeros(5, np.float32)})
        with pytest.raises(errors.InvalidArgument) as ei:
            ps.push({"b": np.array([np.nan] * 7, np.float32)})
        assert "NaN" in ei.value.message
    raftps.jobs.cancel(client, job)


def test_layout_matches_go_default_block():
    from raftps.v1 import job_pb2
    spec = job_pb2.JobSpec(num_pservers=3, params=[job_pb2.ParamSpec(name="fc1.weight", shape=[784, 128])])
    l = Layout(spec)
    p = l.params[0]
    assert p.blocks == 2 and l.block_range(p, 1) == (65536, 784 * 128)
    assert l.vshard_of_block(p, 0) == fnv1a32(b"fc1.weight") % 64


def softmax_grad(W, b, x, y):
    """Mean cross-entropy gradient of softmax regression (float64 math)."""
    z = x @ W.astype(np.float64) + b
    z -= z.max(1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(1, keepdims=True)
    p[np.arange(len(y)), y] -= 1
    p /= len(y)
    return (x.T @ p).astype(np.float32), p.sum(0).astype(np.float32)


def test_two_sync_trainers_equal_single_process_sgd(client):
    """Two trainers push gradients of their halves of each batch in sync
    mode; the pservers' example-weighted average makes every step one SGD
    step on the whole batch. After 15 steps the parameters equal a local
    float32 SGD within 1e-5."""
    job = name("sync2")
    d, k, steps, half = 20, 3, 15, 8
    params = [{"name": "W", "shape": [d, k], "init": "INIT_UNIFORM", "scale": 0.1},
              {"name": "bias", "shape": [k], "init": "INIT_ZEROS"}]
    raftps.jobs.submit(client, external_spec(job, params, lr=0.5, block=16))
    wait_slots(client, job, 2)
    rng = np.random.default_rng(3)
    X = rng.standard_normal((steps, 2 * half, d)).astype(np.float32)
    Y = rng.integers(0, k, (steps, 2 * half))
    sessions = [TrainerSession(client, job, f"t{i}", ttl=3) for i in range(2)]
    sessions[0].wait_members(2, 10)
    clients = [ParamClient(client, job, f"t{i}") for i in range(2)]
    init = clients[0].pull()
    # The pservers learn the trainer set from the registrations (their
    # agents reconcile every 300 ms): let them see both before the first
    # push, or the first step could close with one trainer (the versions
    # check below would then fail, not pass by luck).
    time.sleep(1.5)
    versions = [[], []]
    errs = []

    def run(i):
        try:
            ps = clients[i]
            for s in range(steps):
                cur = ps.pull()
                x, y = X[s, i * half:(i + 1) * half], Y[s, i * half:(i + 1) * half]
                gW, gb = softmax_grad(cur["W"], cur["bias"], x, y)
                versions[i].append(ps.push({"W": gW, "bias": gb}, examples=half))
        except Exception as e:  # noqa: BLE001
            errs.append(e)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errs, errs
    # Every step had both trainers: each push completed one step per slot.
    assert versions[0] == versions[1] == [[s + 1, s + 1] for s in range(steps)]
    final = clients[0].pull()
    W, b = init["W"].copy(), init["bias"].copy()
    lr = np.float32(0.5)
    for s in range(steps):
        gW, gb = softmax_grad(W, b, X[s], Y[s])
        W -= lr * gW
        b -= lr * gb
    assert np.abs(final["W"] - W).max() < 1e-5
    assert np.abs(final["bias"] - b).max() < 1e-5
    assert np.abs(final["W"] - init["W"]).max() > 1e-2  # it trained
    for c in clients:
        c.close()
    for s in sessions:
        s.close()
    raftps.jobs.cancel(client, job)


def test_stale_push_after_step_moved(client):
    """Async with staleness 1: a push on a version two behind is refused
    with StalePush (FailedPrecondition) and nothing is applied."""
    job = name("stale")
    params = [{"name": "w", "shape": [4], "init": "INIT_ZEROS"}]
    raftps.jobs.submit(client, external_spec(job, params, mode="UPDATE_MODE_ASYNC", lr=1.0, pservers=1, staleness=1))
    wait_slots(client, job, 1)
    a, b = ParamClient(client, job, "a"), ParamClient(client, job, "b")
    a.pull()
    b.pull()
    one = np.ones(4, np.float32)
    b.push({"w": one})
    b.push({"w": one})
    with pytest.raises(errors.StalePush):
        a.push({"w": one})
    assert isinstance(errors.StalePush("x"), errors.FailedPrecondition)
    assert (b.pull()["w"] == -2).all()
    a.close()
    b.close()
    raftps.jobs.cancel(client, job)


def test_sync_push_of_another_incarnation_is_stale(client):
    """A pull records each slot's incarnation and pushes carry it: a sync
    push computed on another incarnation of the slot (restored under a new
    claim since the pull) is refused with StalePush and nothing is applied;
    after a pull the push applies."""
    job = name("incarnation")
    params = [{"name": "w", "shape": [4], "init": "INIT_ZEROS"}]
    raftps.jobs.submit(client, external_spec(job, params, lr=1.0, pservers=1))
    wait_slots(client, job, 1)
    session = TrainerSession(client, job, "t", ttl=3)
    session.wait_members(1, 10)
    ps = ParamClient(client, job, "t")
    time.sleep(1.5)  # the pserver's agent feeds it the trainer set every 300 ms
    ps.pull()
    inc = ps.incarnations[0]
    assert inc > 0
    one = np.ones(4, np.float32)
    ps.incarnations[0] = inc + 1  # as if pulled from another life of the slot
    with pytest.raises(errors.StalePush):
        ps.push({"w": one})
    assert (ps.pull()["w"] == 0).all() and ps.incarnations[0] == inc
    ps.push({"w": one})
    assert (ps.pull()["w"] == -1).all()
    ps.close()
    session.close()
    raftps.jobs.cancel(client, job)


def test_external_spec_validation_names_the_param(client):
    """An external job's bad parameter is InvalidArgument naming it; an
    external job without parameters is refused; nothing is created."""
    job = name("extbad")
    params = [{"name": "conv1.weight", "shape": [8, 1, 3, 3]}, {"name": "conv1.bias", "shape": [0]}]
    with pytest.raises(errors.InvalidArgument) as ei:
        raftps.jobs.submit(client, external_spec(job, params))
    assert "params[1].shape" in ei.value.message and '"conv1.bias"' in ei.value.message
    with pytest.raises(errors.InvalidArgument) as ei:
        raftps.jobs.submit(client, external_spec(job, []))
    assert "params" in ei.value.message and "external" in ei.value.message
    with pytest.raises(errors.NotFound):
        raftps.jobs.status(client, job)


class _LostAnswer(grpc.RpcError):
    def code(self):
        return grpc.StatusCode.UNAVAILABLE

    def details(self):
        return "test: the pserver applied the push and its answer was lost"


def test_async_push_retried_after_lost_answer_applies_once(client):
    """Issue 33 defect 4: every push carries a push id, the same on each
    retry, so an async push whose answer was lost after the slot applied it
    (an ambiguous Unavailable) is retried and not applied again; the next
    push has another id and applies."""
    job = name("pushid")
    params = [{"name": "w", "shape": [4], "init": "INIT_ZEROS"}]
    raftps.jobs.submit(client, external_spec(job, params, mode="UPDATE_MODE_ASYNC", lr=1.0, pservers=1))
    wait_slots(client, job, 1)
    ps = ParamClient(client, job, "t")
    ps.pull()
    conn, _ = ps._conn(0)  # cached per address: the retry re-resolves to it
    real, ids = conn.push, []

    def lose_first_answer(req, timeout=None):
        ids.append(getattr(req, "push_id", 0))  # 0: none sent
        out = real(req, timeout=timeout)  # applied (or raises the real error)
        if len(ids) == 1:
            raise _LostAnswer()
        return out

    conn.push = lose_first_answer
    one = np.ones(4, np.float32)
    assert ps.push({"w": one}) == [1]
    # Retried (more than once if the slot also answered Unavailable), with one id.
    first = list(ids)
    assert len(first) >= 2 and len(set(first)) == 1 and first[0] != 0, first
    assert (ps.pull()["w"] == -1).all()  # applied once, not twice
    assert ps.push({"w": one}) == [2]
    assert first[0] not in ids[len(first):], ids
    assert (ps.pull()["w"] == -2).all()
    ps.close()
    raftps.jobs.cancel(client, job)


def test_sync_push_names_one_step_on_every_slot(client):
    """A sync push names one step, the lowest version, on every slot (as
    the Go client): slots one step apart (a step released on one slot
    before the other learned of a trainer; here slot 0 alone is pushed)
    realign: the slot ahead refuses the push as stale, the one behind
    counts it. Per-slot versions kept them apart for good, one model of
    two steps."""
    from raftps import ps as _ps
    job = name("lockstep")
    params = [{"name": "w", "shape": [64], "init": "INIT_ZEROS"}]
    raftps.jobs.submit(client, external_spec(job, params, lr=1.0, block=16))
    wait_slots(client, job, 2)
    session = TrainerSession(client, job, "a", ttl=3)
    a = ParamClient(client, job, "a")
    try:
        a.pull()
        v = list(a.versions)
        assert v[0] == v[1], v
        a._do(0, lambda c, _epoch: c.push(_ps._Push(job, 0, "a", v[0], 1, [], a.incarnations[0], 1), timeout=a.timeout))
        a.pull()
        assert a.versions == [v[0] + 1, v[1]], a.versions
        ones = np.ones(64, np.float32)
        with pytest.raises(errors.StalePush):
            a.push({"w": ones})
        a.pull()
        assert a.versions == [v[0] + 1, v[1] + 1], a.versions
        a.push({"w": ones})
        assert a.versions == [v[0] + 2, v[1] + 2], a.versions
    finally:
        a.close()
        session.close()
        raftps.jobs.cancel(client, job)
