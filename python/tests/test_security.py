"""Mutual TLS from Python: the fixture cluster runs it; a certificate's
role decides what a trainer may do (a reader's push is refused with
PermissionDenied and changes nothing); plaintext still works against nodes
started with --insecure; TLS arguments are checked."""

import os
import uuid

import numpy as np
import pytest

import raftps
import raftps.jobs
from raftps import errors, localcluster
from raftps.ps import ParamClient

from conftest import cluster_tls_dir, external_spec, wait_slots


def name(p):
    return f"{p}-{uuid.uuid4().hex[:6]}"


def test_cluster_runs_mutual_tls(client, cluster):
    assert client.tls is not None and client.status().tls
    # A plaintext client gets no answer from a TLS node: Unavailable, in time.
    with raftps.Client([cluster[0].grpc], timeout=2.0, insecure=True) as plain:
        with pytest.raises(errors.Unavailable):
            plain.get("/x")


def test_reader_push_refused_trainer_push_applied(client, cluster, bin_path):
    job, other = name("authz"), name("authz-other")
    params = [{"name": "w", "shape": [4, 3], "init": "INIT_ZEROS"}]
    raftps.jobs.submit(client, external_spec(job, params, mode="UPDATE_MODE_ASYNC", lr=1.0))
    spec = wait_slots(client, job, 2).spec
    d = cluster_tls_dir(cluster)
    tag = uuid.uuid4().hex[:6]
    reader = localcluster.client_cert(bin_path, d, "reader-" + tag, "reader")
    mine = localcluster.client_cert(bin_path, d, "trainer-" + tag, "trainer", jobs=[job])
    theirs = localcluster.client_cert(bin_path, d, "trainer-other-" + tag, "trainer", jobs=[other])
    eps = [n.grpc for n in cluster]
    g = {"w": np.arange(12, dtype=np.float32).reshape(4, 3)}

    with raftps.Client(eps, tls=reader) as rc:
        # Reads are a reader's: the slot records, the job's status.
        assert len(rc.range("/jobs/" + job + "/ps/", prefix=True)) == 2
        assert raftps.jobs.status(rc, job).spec.name == job
        with pytest.raises(errors.PermissionDenied) as ei:
            rc.put("/jobs/" + job + "/trainers/r", b"x")
        assert "reader" in ei.value.message
        with ParamClient(rc, job, "r", spec=spec, retries=2) as ps:
            with pytest.raises(errors.PermissionDenied):
                ps.push(g, examples=1)
            with pytest.raises(errors.PermissionDenied):
                ps.pull()
    # Another job's trainer reads nothing of this job (issue 32): not even
    # its slot records, so it cannot find the pservers, let alone push.
    with raftps.Client(eps, tls=theirs) as tc:
        with pytest.raises(errors.PermissionDenied):
            with ParamClient(tc, job, "trainer-other-" + tag, spec=spec, retries=2) as ps:
                ps.push(g, examples=1)
        with pytest.raises(errors.PermissionDenied):
            raftps.jobs.status(tc, job)
    # Nothing was applied by the refused pushes.
    with ParamClient(client, job, "admin", spec=spec) as ps:
        assert (ps.pull()["w"] == 0).all()
    # The job's own trainer certificate pushes (SGD, lr 1, from zeros).
    # Its trainer field is its certificate's name (issue 32: a trainer acts
    # only as the trainer its certificate names).
    with raftps.Client(eps, tls=mine) as tc, ParamClient(tc, job, "t-mine", spec=spec, retries=2) as ps:
        with pytest.raises(errors.PermissionDenied):
            ps.push(g, examples=1)
    with raftps.Client(eps, tls=mine) as tc, ParamClient(tc, job, "trainer-" + tag, spec=spec) as ps:
        ps.push(g, examples=1)
        assert (ps.pull()["w"] == -g["w"]).all()


def test_tls_arguments_checked(cluster, tmp_path, monkeypatch):
    for k in ("RAFTPS_CACERT", "RAFTPS_CERT", "RAFTPS_KEY"):
        monkeypatch.delenv(k, raising=False)
    admin = cluster[0].client_tls
    with pytest.raises(errors.InvalidArgument) as ei:
        raftps.Client([cluster[0].grpc], cacert=admin.cacert)
    assert "go together" in ei.value.message
    with pytest.raises(errors.InvalidArgument) as ei:
        raftps.Client([cluster[0].grpc], cacert=admin.cacert, cert=admin.cert, key=str(tmp_path / "none.pem"))
    assert "none.pem" in ei.value.message
    # The environment variables, as the Go CLI reads them.
    monkeypatch.setenv("RAFTPS_CACERT", admin.cacert)
    monkeypatch.setenv("RAFTPS_CERT", admin.cert)
    monkeypatch.setenv("RAFTPS_KEY", admin.key)
    with raftps.Client([n.grpc for n in cluster], timeout=10.0) as c:
        assert c.tls == admin
        c.put("/tls-env/" + uuid.uuid4().hex[:6], b"1")


def test_plaintext_cluster_with_insecure(bin_path, workdir):
    """Nodes started with --insecure (secure=False) serve a plaintext client."""
    nodes = localcluster.start(bin_path, os.path.join(workdir, "plain"), 1, roles="server", secure=False)
    try:
        assert "--insecure" in nodes[0].args
        with raftps.Client([nodes[0].grpc], timeout=10.0, insecure=True) as c:
            rev = c.put("/plain", b"text")
            assert c.get("/plain").mod_revision == rev and not c.status().tls
    finally:
        localcluster.stop(nodes)
