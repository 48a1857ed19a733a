"""Fixtures: a real 3-node raftps cluster (`raftps node` processes on
loopback, mutual TLS with a CA of its own) shared by the session, and
helpers. The admin's certificate is also put in RAFTPS_CACERT, RAFTPS_CERT
and RAFTPS_KEY for the session, so clients the tests make without TLS
arguments, trainer subprocesses and the raftps CLI use it."""

import os
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import raftps  # noqa: E402
import raftps.jobs  # noqa: E402
from raftps import localcluster, tls  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
DATASET = os.path.join(ROOT, "datasets", "fashion-mnist")


def raftps_bin() -> str:
    path = os.environ.get("RAFTPS_BIN") or os.path.join(ROOT, "bin", "raftps")
    if not os.environ.get("RAFTPS_BIN"):
        subprocess.run(["go", "build", "-o", path, "./cmd/raftps"], cwd=ROOT, check=True)
    return path


@pytest.fixture(scope="session")
def bin_path():
    return raftps_bin()


@pytest.fixture(scope="session")
def workdir():
    with tempfile.TemporaryDirectory(prefix="raftps-pytest-") as d:
        yield d


@pytest.fixture(scope="session")
def cluster(bin_path, workdir):
    """Three nodes with roles server,pserver (no Go trainers), mutual TLS."""
    nodes = localcluster.start(bin_path, os.path.join(workdir, "c3"), 3, roles="server,pserver")
    admin = nodes[0].client_tls
    saved = {k: os.environ.get(k) for k in (tls.ENV_CACERT, tls.ENV_CERT, tls.ENV_KEY)}
    os.environ.update({tls.ENV_CACERT: admin.cacert, tls.ENV_CERT: admin.cert, tls.ENV_KEY: admin.key})
    yield nodes
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    localcluster.stop(nodes)


def cluster_tls_dir(cluster) -> str:
    """The secure fixture cluster's CA directory (for more certificates)."""
    return localcluster.tls_dir(os.path.dirname(cluster[0].data_dir))


@pytest.fixture()
def client(cluster):
    # Make sure every node is up (a test may have killed one).
    for nd in cluster:
        if not nd.running():
            nd.start()
    localcluster.wait_ready(cluster, 3)
    with raftps.Client([n.grpc for n in cluster], timeout=10.0, tls=cluster[0].client_tls) as c:
        yield c


@pytest.fixture(params=["core", "grpcio"])
def ps_transport(request, monkeypatch):
    """Runs the test over each pserver transport of raftps.ps (raftps._psconn:
    the C core's, the default here, and grpcio's, the fallback)."""
    import raftps.ps
    from raftps import _psconn
    monkeypatch.setattr(raftps.ps, "_SlotConn", {"core": _psconn.CoreConn, "grpcio": _psconn.GrpcioConn}[request.param])
    return request.param


def external_spec(name, params, *, records=256, rpt=64, batch=32, passes=1, mode="UPDATE_MODE_SYNC",
                  lr=0.1, optimizer="sgd", pservers=2, block=None, **extra):
    """An external-model job spec dict on the shipped dataset path."""
    s = {"name": name, "model": {"name": "external"}, "params": params,
         "dataset": {"path": DATASET, "records": records}, "records_per_task": rpt, "batch_size": batch,
         "passes": passes, "optimizer": {"name": optimizer, "learning_rate": lr}, "num_pservers": pservers,
         "mode": mode, "task_timeout_floor_ms": 60000}
    if block:
        s["dense_block_size"] = block
    s.update(extra)
    return s


def wait_slots(client, job, n, timeout=30):
    """Waits until every slot of job is claimed by a pserver."""
    import time
    deadline = time.monotonic() + timeout
    while True:
        st = raftps.jobs.status(client, job)
        if len([p for p in st.pservers if p.addr]) >= n:
            return st
        assert time.monotonic() < deadline, f"job {job}: {len(st.pservers)} of {n} slots served"
        time.sleep(0.2)
