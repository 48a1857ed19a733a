"""Fixtures: a real 3-node raftps cluster (`raftps node` processes on
loopback) shared by the session, and helpers."""

import os
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import raftps  # noqa: E402
import raftps.jobs  # noqa: E402
from raftps import localcluster  # noqa: E402

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
    """Three nodes with roles server,pserver (no Go trainers)."""
    nodes = localcluster.start(bin_path, os.path.join(workdir, "c3"), 3, roles="server,pserver")
    yield nodes
    localcluster.stop(nodes)


@pytest.fixture()
def client(cluster):
    # Make sure every node is up (a test may have killed one).
    for nd in cluster:
        if not nd.running():
            nd.start()
    localcluster.wait_ready(cluster, 3)
    with raftps.Client([n.grpc for n in cluster], timeout=10.0) as c:
        yield c


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
