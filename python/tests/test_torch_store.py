"""raftps.torch.Store (issue 35): c10d Store semantics against the real
3-node TLS cluster, a 2-process Gloo group built on it, and the same group
going on after the raftps node its clients talk to (the Raft leader) is
SIGKILLed: what a TCPStore, which lives in one process, cannot do."""

import datetime
import os
import subprocess
import sys
import threading
import time
import uuid

import grpc
import pytest

import raftps
from raftps import errors
from raftps.torch import Store

HERE = os.path.dirname(os.path.abspath(__file__))


def job():
    return "store-" + uuid.uuid4().hex[:6]


def secs(s):
    return datetime.timedelta(seconds=s)


def test_set_get_check_delete_num_keys(client):
    s = Store(client, job())
    try:
        s.set("a", b"1")
        s.set("b", "two")
        assert s.get("a") == b"1" and s.get("b") == b"two"
        # Keys live under the job's prefix, on the store's lease.
        kv = client.get(s.prefix + b"a")
        assert kv.value == b"1" and kv.lease == s.lease.id
        assert s.check(["a", "b"]) and not s.check(["a", "c"])
        assert s.num_keys() == 2
        assert s.delete_key("a") and not s.delete_key("a")
        assert s.num_keys() == 1 and not s.check(["a"])
    finally:
        s.close()


def test_get_waits_for_the_key_and_times_out(client):
    s = Store(client, job(), timeout=secs(30))
    try:
        threading.Timer(0.5, s.set, ("late", b"v")).start()
        assert s.get("late") == b"v"
        s.set_timeout(secs(1))
        assert s.timeout == secs(1)
        t0 = time.monotonic()
        with pytest.raises(errors.DeadlineExceeded, match="never"):
            s.get("never")
        assert 0.9 < time.monotonic() - t0 < 10
    finally:
        s.close()


def test_add_is_atomic_across_clients(cluster, client):
    name = job()
    n_threads, n_adds = 4, 10
    got, errs = [], []
    clients = [raftps.Client([n.grpc for n in cluster[i % 3:] + cluster[:i % 3]]) for i in range(n_threads)]
    stores = [Store(c, name) for c in clients]

    def adder(st):
        try:
            for _ in range(n_adds):
                got.append(st.add("ctr", 1))
        except Exception as e:  # noqa: BLE001 (reported below)
            errs.append(e)

    ts = [threading.Thread(target=adder, args=(st,)) for st in stores]
    [t.start() for t in ts]
    [t.join(120) for t in ts]
    try:
        assert not errs, errs
        total = n_threads * n_adds
        # Every add saw a distinct count: none was lost or applied twice.
        assert sorted(got) == list(range(1, total + 1))
        assert stores[0].get("ctr") == str(total).encode()
        assert stores[0].add("ctr", -5) == total - 5
        stores[0].set("text", b"x")
        with pytest.raises(errors.InvalidArgument, match="not an integer"):
            stores[0].add("text", 1)
    finally:
        for st, c in zip(stores, clients):
            st.close()
            c.close()


def test_compare_set(client):
    s = Store(client, job())
    try:
        assert s.compare_set("k", b"", b"first") == b"first"          # missing, expected empty: set
        assert s.compare_set("k", b"wrong", b"second") == b"first"    # mismatch: current value
        assert s.compare_set("k", b"first", b"second") == b"second"   # match: set
        assert s.get("k") == b"second"
        assert s.compare_set("gone", b"exp", b"new") == b"exp"        # missing, expected set: expected
        assert not s.check(["gone"])
    finally:
        s.close()


class CountCalls(grpc.UnaryUnaryClientInterceptor):
    def __init__(self):
        self.n = 0

    def intercept_unary_unary(self, cont, details, request):
        self.n += 1
        return cont(details, request)


def test_wait_rides_a_watch_not_polling(cluster):
    counter = CountCalls()
    name = job()
    eps = [n.grpc for n in cluster]
    with raftps.Client(eps, interceptors=[counter]) as c, raftps.Client(eps) as other:
        s, w = Store(c, name, timeout=secs(30)), Store(other, name)
        try:
            threading.Timer(1.0, w.set, ("x", b"1")).start()
            threading.Timer(2.0, w.set, ("y", b"2")).start()
            before = counter.n
            t0 = time.monotonic()
            s.wait(["x", "y"])
            assert time.monotonic() - t0 >= 1.9
            # One read of the keys (a Txn) and the watch's revision; then
            # the watch stream only, whatever the wait's length.
            assert counter.n - before <= 2, f"{counter.n - before} unary calls during a 2 s wait"
            with pytest.raises(errors.DeadlineExceeded, match=r"\['z'\]"):
                s.wait(["x", "z"], secs(0.5))
        finally:
            s.close()
            w.close()


def test_keys_go_with_the_store_lease(client):
    name = job()
    closed, dead = Store(client, name), Store(client, name + "-dead", ttl=2)
    closed.set("a", b"1")
    dead.set("b", b"1")
    closed.close()                       # lease revoked: its keys go now
    assert client.range(closed.prefix, prefix=True) == []
    dead.lease.stop()                    # a dead process: keepalives stop
    deadline = time.monotonic() + 30
    while client.range(dead.prefix, prefix=True):
        assert time.monotonic() < deadline, "a dead store's keys outlived its lease"
        time.sleep(0.2)


def test_gloo_group_survives_sigkill_of_its_raftps_node(client, cluster):
    """Two ranks build a Gloo group on the Store and allreduce; the raftps
    node both ranks' clients talk to, the Raft leader, is SIGKILLed; the
    ranks then use the store (set/add/wait) and rendezvous a new Gloo group
    through it and allreduce again."""
    name = job()
    leader = client.status().leader
    order = sorted(cluster, key=lambda n: n.id != leader)   # the leader first: every client's node
    eps = ",".join(n.grpc for n in order)
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1",
               PYTHONPATH=os.path.dirname(HERE) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "store_worker.py"), eps, name, str(r), "2"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for r in range(2)]
    try:
        for p in procs:
            line = p.stdout.readline().split()
            assert line == ["phase1", "3"], (line, p.stderr.read() if p.poll() is not None else "")
        victim = next(nd for nd in cluster if nd.id == leader)
        victim.kill()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        counts = []
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err[-3000:]
            word, total, n = out.split()
            assert (word, total) == ("phase2", "30")
            counts.append(int(n))
        assert sorted(counts) == [1, 2]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
