"""raftps.ps carries the replica epoch it resolved (issue 34), as Go's
psclient with trainer/agent's resolver: every pull and push names the
mod_revision of the slot's replica record /jobs/<job>/replicas/<slot>; a
primary that serves another epoch refuses it (FailedPrecondition, reason
SLOT_EPOCH) and the client resolves again and retries with the same push
id."""

import json
import time
import uuid

import numpy as np
import pytest

import raftps.jobs
from raftps import ps as _ps
from raftps.v1 import pserver_pb2

from conftest import external_spec, wait_slots


def test_encode_push_epoch_field():
    # PushRequest.epoch is field 11 (varint): the hand-written encoder
    # writes it byte for byte as protobuf does, and a full request parses
    # back with every field.
    for epoch in (1, 300, 1 << 40):
        got = _ps._encode_push(_ps._Push("", 0, "", 0, 0, [], epoch=epoch))
        assert got == pserver_pb2.PushRequest(epoch=epoch).SerializeToString(), epoch
    g = np.arange(5, dtype=np.float32)
    req = _ps._Push("j", 1, "t", 7, 3, [("w", 2, None, g)], incarnation=9, push_id=11, epoch=123456)
    m = pserver_pb2.PushRequest.FromString(_ps._encode_push(req))
    assert (m.job, m.slot, m.trainer, m.version, m.step, m.examples, m.push_id, m.incarnation, m.epoch) == \
        ("j", 1, "t", 7, 7, 3, 11, 9, 123456)
    assert [(t.name, t.block) for t in m.grads] == [("w", 2)]
    # with_tensors keeps the epoch (the first PushStream message).
    assert req.with_tensors([]).epoch == 123456


def test_targets_follow_go_resolver_rules():
    # trainer/agent's TestResolverTargets, case for case.
    class KV:
        def __init__(self, key, value, mod_revision):
            self.key, self.value, self.mod_revision = key.encode(), json.dumps(value).encode(), mod_revision

    def claim(slot, addr):
        return KV(f"/jobs/j/ps/{slot}", {"node": addr, "addr": addr}, 3)

    def record(slot, addr, epoch, backups=()):
        return KV(f"/jobs/j/replicas/{slot}", {"primary": {"node": addr, "addr": addr},
                                               "backups": [{"node": b, "addr": b} for b in backups]}, epoch)

    claims = _ps._by_slot([claim(0, "a:1"), claim(1, "a:1"), claim(3, "c:1"), claim(5, "e:1")])
    records = _ps._by_slot([
        record(0, "a:1", 7, ["b:1"]),  # replicated, primary holds the claim
        record(2, "b:1", 9),  # promoted, not claimed yet
        record(3, "d:1", 11),  # the claim's holder is not the record's primary
        record(4, "", 12),  # a record with no primary names nothing
        record(5, "e:1", 13, ["e:1"]),  # invalid (a node twice): not read
    ])
    assert _ps._targets(claims, records) == {0: ("a:1", 7), 1: ("a:1", 0), 2: ("b:1", 9), 3: ("c:1", 0),
                                             5: ("e:1", 0)}


class _Sent:
    """What each pull and push put on the wire: (method, slot, epoch, push
    id). ``stale[slot] = e`` makes the next push to slot carry epoch e
    instead, as a client whose cached epoch went stale sends it."""

    def __init__(self):
        self.calls = []
        self.stale = {}

    def conn_class(self):
        sent = self

        class Conn(_ps._SlotConn):
            def __init__(self, addr, client):
                super().__init__(addr, client)
                pull, push = self.pull, self.push
                pull_stream, push_stream = self.pull_stream, self.push_stream

                def rec_pull(req, **kw):
                    sent.calls.append(("pull", req.slot, req.epoch, 0))
                    return pull(req, **kw)

                def rec_push(req, **kw):
                    if req.slot in sent.stale:
                        req = req.with_tensors(req.tensors)
                        req.epoch = sent.stale.pop(req.slot)
                    m = pserver_pb2.PushRequest.FromString(_ps._encode_push(req))  # the bytes sent
                    sent.calls.append(("push", m.slot, m.epoch, m.push_id))
                    return push(req, **kw)

                def rec_pull_stream(req, **kw):
                    sent.calls.append(("pull", req.slot, req.epoch, 0))
                    return pull_stream(req, **kw)

                def rec_push_stream(msgs, **kw):
                    msgs = list(msgs)  # the first names the push
                    m = pserver_pb2.PushRequest.FromString(_ps._encode_push(msgs[0]))
                    sent.calls.append(("push", m.slot, m.epoch, m.push_id))
                    return push_stream(iter(msgs), **kw)
                self.pull, self.push = rec_pull, rec_push
                self.pull_stream, self.push_stream = rec_pull_stream, rec_push_stream
        return Conn


def _records(client, job, n, timeout=60):
    """slot -> mod_revision of each slot's replica record, once every slot
    has one with a backup whose primary holds the slot's claim."""
    deadline = time.monotonic() + timeout
    while True:
        claims = {int(kv.key.decode().rsplit("/", 1)[1]): json.loads(kv.value).get("addr")
                  for kv in client.range(f"/jobs/{job}/ps/", prefix=True)}
        out = {}
        for kv in client.range(f"/jobs/{job}/replicas/", prefix=True):
            slot, rec = int(kv.key.decode().rsplit("/", 1)[1]), json.loads(kv.value)
            if rec.get("backups") and rec["primary"]["addr"] == claims.get(slot):
                out[slot] = kv.mod_revision
        if len(out) == n:
            return out
        assert time.monotonic() < deadline, f"job {job}: replica records {out}, claims {claims}"
        time.sleep(0.2)


def _replicated_job(client, prefix):
    job = f"{prefix}-{uuid.uuid4().hex[:6]}"
    params = [{"name": "w", "shape": [64], "init": "INIT_ZEROS"}]
    raftps.jobs.submit(client, external_spec(job, params, mode="UPDATE_MODE_ASYNC", lr=1.0, block=16, replicas=2))
    wait_slots(client, job, 2)
    return job, _records(client, job, 2)


@pytest.mark.parametrize("stream_bytes", [_ps.STREAM_CHUNK_BYTES, 0])  # unary, then PullStream / PushStream
def test_epoch_sent_is_replica_record_mod_revision(ps_transport, client, monkeypatch, stream_bytes):
    job, recs = _replicated_job(client, "epoch")
    sent = _Sent()
    monkeypatch.setattr(_ps, "_SlotConn", sent.conn_class())
    try:
        with _ps.ParamClient(client, job, "t0", watch=False, stream_bytes=stream_bytes) as ps:
            if stream_bytes == 0:
                assert ps._stream == [True, True] and all(len(b) > 1 for b in ps._blocks)
            ps.pull()
            ps.push({"w": np.ones(64, np.float32)})
            assert all(e > 0 for e in recs.values()), recs
            for method in ("pull", "push"):
                got = {(s, e) for (m, s, e, _) in sent.calls if m == method}
                assert got == {(s, e) for s, e in recs.items()}, (method, sent.calls, recs)
            assert ps.targets() == {s: (a, recs[s]) for s, a in ps.slots().items()}, (ps.targets(), recs)
        assert _records(client, job, 2) == recs  # the records did not move meanwhile
    finally:
        raftps.jobs.cancel(client, job)


def test_stale_epoch_refused_and_retried_with_same_push_id(ps_transport, client, monkeypatch):
    job, recs = _replicated_job(client, "epochstale")
    sent = _Sent()
    monkeypatch.setattr(_ps, "_SlotConn", sent.conn_class())
    try:
        with _ps.ParamClient(client, job, "t0", watch=False) as ps:
            epoch = recs[0]
            assert epoch > 1
            for k in (1, 2):
                ps.pull()
                before = list(ps.versions)
                sent.calls.clear()
                if k == 1:
                    # A push carrying a stale epoch (an older record's).
                    sent.stale[0] = epoch - 1
                else:
                    # Slot 0's cached epoch goes stale (as if its record
                    # moved on after the client resolved it): same primary,
                    # an older epoch; the refusal makes the client resolve.
                    addr, e = ps.targets()[0]
                    assert e == epoch
                    with ps._mu:
                        ps._addrs[0] = (addr, epoch - 1)
                ps.push({"w": np.ones(64, np.float32)})
                pushes0 = [c for c in sent.calls if c[0] == "push" and c[1] == 0]
                assert [e for (_, _, e, _) in pushes0] == [epoch - 1, epoch], (k, sent.calls)
                assert pushes0[0][3] == pushes0[1][3] != 0, (k, pushes0)  # the same push id
                assert ps.refused == k
                # Applied exactly once on every slot: one version, -k (lr 1, from 0).
                assert ps.versions == [v + 1 for v in before], (k, before, ps.versions)
                got = ps.pull()
                assert ps.versions == [v + 1 for v in before], (k, before, ps.versions)
                assert (got["w"] == -k).all(), (k, got["w"])
    finally:
        raftps.jobs.cancel(client, job)
