"""raftps.Client against a real 3-node cluster: KV, Txn, leases, watches
(across a leader SIGKILL), status and error mapping."""

import os
import threading
import time
import uuid

import pytest

import raftps
import raftps.jobs
from raftps import errors
from raftps.v1 import kv_pb2

from conftest import DATASET


def uniq(p: str) -> str:
    return f"/t/{p}/{uuid.uuid4().hex[:8]}"


def test_put_get_range_delete(client):
    k = uniq("kv")
    r1 = client.put(k + "/a", b"1")
    r2 = client.put(k + "/b", "2")
    assert r2 > r1
    kv = client.get(k + "/a")
    assert kv.value == b"1" and kv.mod_revision == r1 and kv.create_revision == r1 and kv.version == 1
    client.put(k + "/a", b"1b")
    kv = client.get(k + "/a", serializable=False)
    assert kv.value == b"1b" and kv.version == 2 and kv.create_revision == r1
    assert [x.key for x in client.range(k + "/", prefix=True)] == [(k + "/a").encode(), (k + "/b").encode()]
    assert len(client.range(k + "/", prefix=True, limit=1)) == 1
    assert client.get(k + "/missing") is None
    assert client.delete(k + "/", prefix=True) == 2
    assert client.range(k + "/", prefix=True) == []


def test_txn_compare_and_swap(client):
    k = uniq("txn")
    assert client.cas(k, None, b"v1")           # create if absent
    assert not client.cas(k, None, b"other")    # exists now
    assert client.cas(k, b"v1", b"v2")
    assert not client.cas(k, b"v1", b"v3")
    assert client.get(k).value == b"v2"
    mod = client.get(k).mod_revision
    r = client.txn([client.cmp_mod_revision(k, "==", mod)], [client.op_put(k, b"v4"), client.op_get(k)],
                   [client.op_get(k)])
    assert r.succeeded and r.responses[1].response_range.kvs[0].value == b"v4"
    r = client.txn([client.cmp_mod_revision(k, "==", mod)], [client.op_put(k, b"no")], [client.op_get(k)])
    assert not r.succeeded and r.responses[0].response_range.kvs[0].value == b"v4"


def test_concurrent_cas_counter_is_exact(client):
    """Four threads increment one counter with CAS; no increment is lost."""
    k = uniq("ctr")
    client.put(k, b"0")
    per = 10

    def worker():
        done = 0
        while done < per:
            cur = client.get(k).value
            if client.cas(k, cur, str(int(cur) + 1).encode()):
                done += 1

    ts = [threading.Thread(target=worker) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert client.get(k).value == str(4 * per).encode()


def test_lease_keepalive_and_expiry(client):
    k = uniq("lease")
    with client.lease(ttl=2) as lease:
        client.put(k, b"x", lease=lease.id)
        time.sleep(4)  # twice the TTL: alive only thanks to keepalives
        assert client.get(k) is not None
        assert not lease.lost.is_set()
        ttl = client.lease_ttl(lease.id, keys=True)
        assert ttl.granted_ttl == 2 and k.encode() in list(ttl.keys)
    # revoked by the with block
    assert client.get(k) is None
    # a lease without keepalive expires and takes its key with it
    l2 = client.lease(ttl=1, keepalive=False)
    client.put(k, b"y", lease=l2.id)
    deadline = time.monotonic() + 10
    while client.get(k) is not None:
        assert time.monotonic() < deadline, "key of an expired lease still there"
        time.sleep(0.2)
    with pytest.raises(errors.NotFound):
        client.lease_keepalive_once(l2.id)


def test_error_mapping(client):
    with pytest.raises(errors.NotFound) as ei:
        client.lease_revoke(987654321)
    assert ei.value.code.name == "NOT_FOUND" and ei.value.message
    with pytest.raises(errors.InvalidArgument):
        client.put(b"", b"x")
    with pytest.raises(errors.NotFound):
        raftps.jobs.status(client, "no-such-job-" + uuid.uuid4().hex[:6])
    with pytest.raises(errors.InvalidArgument) as ei:
        raftps.jobs.submit(client, {"name": "bad", "model": {"name": "mlp"}, "dataset": {"path": DATASET, "records": 10},
                                    "records_per_task": 5, "batch_size": 0, "passes": 1,
                                    "optimizer": {"name": "sgd", "learning_rate": 0.1}, "num_pservers": 1})
    assert "batch_size" in ei.value.message
    with pytest.raises(errors.InvalidArgument):
        raftps.jobs.submit(client, {"name": "x", "no_such_field": 1})
    # Unavailable from an endpoint nobody listens on, within the timeout
    with raftps.Client(["127.0.0.1:1"], timeout=1.0) as dead:
        t0 = time.monotonic()
        with pytest.raises(errors.Unavailable):
            dead.get("/x")
        assert time.monotonic() - t0 < 5


def test_status_and_members(client, cluster):
    st = client.status()
    assert st.leader in {n.id for n in cluster} and len(st.voters) == 3 and st.term >= 1
    ms = client.members()
    assert {m.id for m in ms} >= {n.id for n in cluster}


def test_watch_survives_leader_sigkill(client, cluster):
    """A watch of a prefix while a writer writes 200 keys and the Raft leader
    (which may be the node serving the watch) is SIGKILLed in the middle: the
    watcher sees every revision once, in order."""
    k = uniq("watch")
    start = client.put(k + "/start", b"")
    # Watch through the leader so that killing it breaks the stream.
    leader = client.status().leader
    order = sorted(cluster, key=lambda n: n.id != leader)
    wc = raftps.Client([n.grpc for n in order], timeout=10.0)
    w = wc.watch(k + "/", prefix=True, start_revision=start + 1)
    written = []
    n = 200

    def writer():
        for i in range(n):
            # One request id for every attempt of a put, also across the
            # retries here: a put whose answer the kill lost is not
            # applied again (exactly-once).
            req = kv_pb2.PutRequest(key=f"{k}/{i:04d}".encode(), value=str(i).encode())
            with client.request_id() as seq:
                while True:
                    try:
                        written.append(client.call("kv", "Put", req, seq=seq).header.revision)
                        break
                    except errors.Unavailable:
                        time.sleep(0.05)

    t = threading.Thread(target=writer)
    t.start()
    got = []
    killed = None
    deadline = time.monotonic() + 90

    def caught_up():
        # Every acknowledged write is watched once the writer is done and the
        # watch reached the last acknowledged revision.
        return not t.is_alive() and len(written) == n and got and got[-1].revision >= written[-1]

    while not caught_up():
        assert time.monotonic() < deadline, f"watch got {len(got)} events for {len(written)} of {n} acknowledged writes"
        ev = w.get(timeout=1.0)
        if ev is None:
            continue
        got.append(ev)
        if len(got) == n // 3 and killed is None:
            killed = next(nd for nd in cluster if nd.id == leader)
            killed.kill()
    t.join(60)
    w.cancel()
    wc.close()
    revs = [e.revision for e in got]
    assert revs == sorted(set(revs)), "duplicate or out-of-order revisions"
    # Every put applied once (a retry after the kill carries the first
    # attempt's request id), so the watch saw exactly the acknowledged
    # revisions: each key once, in the order sent.
    assert revs == written, "the watch missed, duplicated or invented writes"
    keys = [e.kv.key.decode() for e in got]
    assert keys == [f"{k}/{i:04d}" for i in range(n)], "a put was applied twice or not at all"
    assert w.reconnects >= 1, "the watch never had to reconnect (the kill did not hit it)"
    assert client.status().leader != leader
    killed.start()


def test_client_reconnects_to_restarted_node_between_failed_calls(client, cluster):
    """A client whose only endpoint is a node that is down fails fast; once
    the node is back, calls a second apart get through. (gRPC Python drives
    a channel's connection only while something polls it: without the
    channel's connectivity subscription, each fail-fast call advanced the
    TLS handshake by one step, the node closed it after its 5 s handshake
    bound, and the client never connected again: "Socket closed".)"""
    leader = client.status().leader
    nd = next(n for n in cluster if n.id != leader)
    nd.kill()
    with raftps.Client([nd.grpc], timeout=2.0) as c:
        with pytest.raises(errors.Unavailable):
            c.status()
        nd.start()
        last = None
        for _ in range(30):
            time.sleep(1.0)
            try:
                c.status()
                break
            except errors.Unavailable as e:
                last = e
        else:
            pytest.fail(f"no answer from the restarted {nd.id} in 30 calls a second apart: {last}")


def test_watch_from_compacted_or_now(client):
    k = uniq("w2")
    with client.watch(k, prev_kv=True) as w:
        r1 = client.put(k, b"a")
        r2 = client.put(k, b"b")
        client.delete(k)
        evs = [w.get(timeout=10) for _ in range(3)]
    assert [e.type for e in evs] == ["PUT", "PUT", "DELETE"]
    assert evs[0].revision == r1 and evs[1].revision == r2
    assert evs[1].prev_kv.value == b"a"


def test_process_with_unclosed_client_exits(cluster):
    """A script that never closes its Client exits at its end: channels
    subscribed to their connectivity (raftps.tls.channel) are closed at
    exit; an open one kept the interpreter from exiting."""
    import subprocess
    import sys
    code = ("import sys, raftps\n"
            "c = raftps.Client(sys.argv[1:], timeout=5.0)\n"
            "print(c.status().leader)\n")
    r = subprocess.run([sys.executable, "-c", code, *[n.grpc for n in cluster]], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(raftps.__file__))))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip(), "no leader printed"


def test_closing_channels_races_no_connectivity_thread():
    """raftps.tls.close_channels stops a channel's connectivity polling
    thread before it closes the channel. grpc's close unsubscribes and
    closes at once, so a polling thread between two watches called the
    next one on a closed channel: "ValueError: Cannot monitor channel
    state: Channel closed!" in a thread (seen in the suite under load;
    here 1,600 closes timed near the thread's 0.2 s wakeups, with the GIL
    switched every microsecond, raised it 4 times with grpc's close)."""
    import sys
    import threading
    import time
    from raftps import tls as _tls
    errs = []
    hook, interval = threading.excepthook, sys.getswitchinterval()
    threading.excepthook = lambda a: errs.append(a.exc_value)
    sys.setswitchinterval(1e-6)

    def cycle(n):
        for i in range(n):
            ch = _tls.channel("127.0.0.1:1", None, [])
            time.sleep(0.2 + (i % 20) * 0.0005)
            _tls.close_channels([ch])

    try:
        ts = [threading.Thread(target=cycle, args=(40,)) for _ in range(40)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        time.sleep(0.5)
    finally:
        sys.setswitchinterval(interval)
        threading.excepthook = hook
    assert not errs, errs
