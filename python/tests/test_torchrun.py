"""torchrun's rendezvous on raftps (issue 35): the backend's
compare-and-swap (fencing token = the state key's mod revision), the
handler from torch's registry, and a real 2-agent
``python3 -m raftps.torchrun --nnodes 1:2 --rdzv-backend raftps`` job on
loopback against the 3-node TLS cluster; then an agent SIGKILLed mid-job
with the raftps leader, against c10d's backend as the baseline."""

import os
import re
import signal
import subprocess
import sys
import time
import uuid

from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler

import pytest

from raftps import errors, localcluster
from raftps.client import Client
from raftps.torch import rendezvous

from conftest import cluster_tls_dir

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


def test_backend_of_another_jobs_certificate_is_refused(cluster, bin_path):
    # A trainer certificate reaches only its jobs' rendezvous.
    tls = localcluster.client_cert(bin_path, cluster_tls_dir(cluster), "rdzv-other", "trainer", jobs=["other-*"])
    with Client([n.grpc for n in cluster], tls=tls) as tc:
        with pytest.raises(errors.PermissionDenied, match="torch/store"):
            rendezvous.RaftpsRendezvousBackend(tc, run_id()).set_state(b"a")


def test_torchrun_two_agents(client, cluster, bin_path):
    # The agents run on a trainer certificate of the job (the run id), not
    # the admin's: what a user hands to a training host.
    rid = run_id()
    eps = ",".join(n.grpc for n in cluster)
    tls = localcluster.client_cert(bin_path, cluster_tls_dir(cluster), "rdzv-agent", "trainer", jobs=["rdzv-*"])
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1",
               RAFTPS_CACERT=tls.cacert, RAFTPS_CERT=tls.cert, RAFTPS_KEY=tls.key,
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
    assert client.get(f"/torch/store/{rid}/rendezvous/state") is not None


def start_agents(rdzv: list, extra_conf: list, progress: str, steps: int = 40):
    """Two torchrun agents (--nnodes 1:2, one worker each, up to 2
    restarts), each in a session of its own so that a SIGKILL of its group
    takes its worker with it, as a lost host would."""
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1",
               PYTHONPATH=os.path.dirname(HERE) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    agents = []
    for conf in extra_conf:
        cmd = [sys.executable, "-m", "raftps.torchrun", "--nnodes", "1:2", "--nproc-per-node", "1", *rdzv,
               "--rdzv-conf", "last_call_timeout=2,join_timeout=120,read_timeout=10" + conf,
               "--max-restarts", "2", "--monitor-interval", "1",
               os.path.join(HERE, "torchrun_elastic_worker.py"), str(steps), progress]
        agents.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                       start_new_session=True))
        time.sleep(1)  # the first agent hosts c10d's TCPStore
    return agents


def wait_progress(progress: str, name: str, agents, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while not os.path.exists(os.path.join(progress, name)):
        assert time.monotonic() < deadline, f"no {name} in {sorted(os.listdir(progress))}"
        assert all(a.poll() is None for a in agents), [a.communicate() for a in agents]
        time.sleep(0.2)


def stop(agents):
    for a in agents:
        if a.poll() is None:
            os.killpg(a.pid, signal.SIGKILL)
            a.wait(10)


def test_agent_sigkill_raftps_survives_c10d_fails(client, cluster, tmp_path):
    """SIGKILL the agent that would host c10d's TCPStore (the first one)
    mid-training. On raftps (whose leader, the node the agents talk to, is
    SIGKILLed at the same moment) the other agent restarts its worker,
    re-forms the group alone and finishes. On c10d, the baseline, the
    other agent loses the rendezvous store with the host and fails."""
    # raftps: the leader first in every agent's endpoints.
    leader = client.status().leader
    eps = ",".join(n.grpc for n in sorted(cluster, key=lambda n: n.id != leader))
    prog = tmp_path / "raftps"
    prog.mkdir()
    agents = start_agents(["--rdzv-backend", "raftps", "--rdzv-endpoint", eps, "--rdzv-id", run_id()],
                          ["", ""], str(prog))
    try:
        wait_progress(str(prog), "w2-r0-s3", agents)
        os.killpg(agents[0].pid, signal.SIGKILL)
        next(n for n in cluster if n.id == leader).kill()
        out, err = agents[1].communicate(timeout=240)
        assert agents[1].returncode == 0, err[-4000:]
        assert re.search(r"done world=1 restart=[12]", out), out
    finally:
        stop(agents)

    # c10d: the same kill of the store's host.
    port = localcluster.free_ports(1)[0]
    prog = tmp_path / "c10d"
    prog.mkdir()
    agents = start_agents(["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", run_id()],
                          [",is_host=true", ",is_host=false"], str(prog))
    try:
        wait_progress(str(prog), "w2-r0-s3", agents)
        os.killpg(agents[0].pid, signal.SIGKILL)
        out, err = agents[1].communicate(timeout=240)
        assert agents[1].returncode != 0 and "done" not in out, (out, err[-2000:])
        assert "RendezvousConnectionError" in err, err[-2000:]   # it lost the store, not something else
    finally:
        stop(agents)
