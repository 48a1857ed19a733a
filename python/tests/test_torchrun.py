"""torchrun's rendezvous on raftps (issue 35): the backend's
compare-and-swap (fencing token = the state key's mod revision), the
handler from torch's registry, and a real 2-agent
``python3 -m raftps.torchrun --nnodes 1:2 --rdzv-backend raftps`` job on
loopback against the 3-node TLS cluster."""

import os
import re
import subprocess
import sys
import uuid

from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler

from raftps.torch import rendezvous

HERE = os.path.dirname(os.path.abspath(__file__))


def run_id():
    return "rdzv-" + uuid.uuid4().hex[:6]


def test_backend_compare_and_swap(client):
    b = rendezvous.RaftpsRendezvousBackend(client, run_id())
    assert b.name == "raftps" and b.get_state() is None
    state, tok, ok = b.set_state(b"a")
    assert (state, ok) == (b"a", True) and b.get_state() == (b"a", tok)
    assert b.set_state(b"b") == (b"a", tok, False)            # a state exists: token None loses
    state, tok2, ok = b.set_state(b"b", tok)
    assert (state, ok) == (b"b", True) and tok2 > tok
    assert b.set_state(b"c", tok) == (b"b", tok2, False)      # a stale token loses
    assert b.set_state(b"c", "not-a-revision") == (b"b", tok2, False)
    assert b.get_state() == (b"b", tok2)


def test_handler_from_torch_registry(cluster):
    rendezvous.register()
    rendezvous.register()  # twice is fine
    rid = run_id()
    params = RendezvousParameters("raftps", ",".join(n.grpc for n in cluster), rid, 1, 2, read_timeout="20")
    h = get_rendezvous_handler(params)
    try:
        assert h.get_backend() == "raftps" and h.get_run_id() == rid
    finally:
        h.shutdown()


def test_torchrun_two_agents(client, cluster):
    rid = run_id()
    eps = ",".join(n.grpc for n in cluster)
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1",
               PYTHONPATH=os.path.dirname(HERE) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "raftps.torchrun", "--nnodes", "1:2", "--nproc-per-node", "1",
           "--rdzv-backend", "raftps", "--rdzv-endpoint", eps, "--rdzv-id", rid,
           "--rdzv-conf", "last_call_timeout=5,join_timeout=120,read_timeout=20",
           "--max-restarts", "0", "--monitor-interval", "1", os.path.join(HERE, "torchrun_worker.py")]
    agents = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
              for _ in range(2)]
    outs = []
    try:
        for a in agents:
            out, err = a.communicate(timeout=240)
            assert a.returncode == 0, err[-4000:]
            outs.append(out)
    finally:
        for a in agents:
            if a.poll() is None:
                a.kill()
                a.wait(10)
    lines = [m.groups() for o in outs for m in re.finditer(r"worker rank=(\d) world=(\d) sum=(\d+) restart=(\d)", o)]
    assert sorted(lines) == [("0", "2", "3", "0"), ("1", "2", "3", "0")], outs
    # The rendezvous went through raftps: its state key holds the round.
    assert client.get(f"/torch/rendezvous/{rid}/state") is not None
