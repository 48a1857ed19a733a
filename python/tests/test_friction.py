"""A new user's friction (issue 35): a TrainerSession's default id is the
trainer certificate's name (the only trainer name the cluster accepts from
it), and raftps.Client() finds the cluster from RAFTPS_ENDPOINTS and the
TLS variables as the Go CLI does."""

import uuid

import pytest

import raftps
import raftps.jobs
from raftps import errors, localcluster
from raftps.tasks import TrainerSession, trainer_prefix

from conftest import cluster_tls_dir, external_spec


def test_trainer_session_default_id_is_certificate_name(client, cluster, bin_path):
    job = "friction-" + uuid.uuid4().hex[:6]
    raftps.jobs.submit(client, external_spec(job, [{"name": "w", "shape": [2], "init": "INIT_ZEROS"}]))
    me = "trainer-" + uuid.uuid4().hex[:6]
    tls = localcluster.client_cert(bin_path, cluster_tls_dir(cluster), me, "trainer", jobs=[job])
    with raftps.Client([n.grpc for n in cluster], tls=tls) as tc:
        session = TrainerSession(tc, job)
        try:
            assert session.id == me
            assert client.get(trainer_prefix(job) + me) is not None
            assert me in session.members()
        finally:
            session.close()


def test_client_reads_endpoints_from_environment(cluster, monkeypatch):
    # The fixture put the admin's TLS files in RAFTPS_CACERT/CERT/KEY.
    monkeypatch.setenv("RAFTPS_ENDPOINTS", ",".join(n.grpc for n in cluster))
    key = "/friction/" + uuid.uuid4().hex[:6]
    with raftps.Client() as c:
        assert c.endpoints == [n.grpc for n in cluster] and c.tls is not None
        c.put(key, b"v")
        assert c.get(key).value == b"v"


def test_client_without_endpoints_dials_the_cli_default(monkeypatch):
    monkeypatch.delenv("RAFTPS_ENDPOINTS", raising=False)
    with raftps.Client(insecure=True, timeout=0.5) as c:
        assert c.endpoints == ["127.0.0.1:7000"]


def test_certificate_name_of_unreadable_file_is_invalid_argument(tmp_path):
    with pytest.raises(errors.InvalidArgument, match="cannot read the certificate"):
        raftps.TLS(str(tmp_path / "ca.pem"), str(tmp_path / "nope.pem"), str(tmp_path / "k.pem")).name()


def test_trainer_certificate_for_a_job_pattern(client, cluster, bin_path):
    # One certificate (`raftps tls cert create --role trainer --job 'exp-*'`)
    # serves every job its pattern matches, and no other.
    tag = "exp" + uuid.uuid4().hex[:6]
    mine, other = tag + "-1", "other-" + tag
    for job in (mine, other):
        raftps.jobs.submit(client, external_spec(job, [{"name": "w", "shape": [2], "init": "INIT_ZEROS"}]))
    tls = localcluster.client_cert(bin_path, cluster_tls_dir(cluster), tag, "trainer", jobs=[tag + "-*"])
    with raftps.Client([n.grpc for n in cluster], tls=tls) as tc:
        session = TrainerSession(tc, mine)
        try:
            assert session.id == tag and client.get(trainer_prefix(mine) + tag) is not None
            assert raftps.jobs.status(tc, mine).spec.name == mine
        finally:
            session.close()
        with pytest.raises(errors.PermissionDenied):
            TrainerSession(tc, other)
        with pytest.raises(errors.PermissionDenied):
            raftps.jobs.status(tc, other)


def test_client_reads_command_timeout_from_environment(monkeypatch):
    monkeypatch.setenv("RAFTPS_COMMAND_TIMEOUT", "1m30s")
    with raftps.Client("127.0.0.1:7000", insecure=True) as c:
        assert c.timeout == 90.0
    with raftps.Client("127.0.0.1:7000", 2.5, insecure=True) as c:   # an argument wins
        assert c.timeout == 2.5
    monkeypatch.setenv("RAFTPS_COMMAND_TIMEOUT", "ten")
    with pytest.raises(errors.InvalidArgument, match="RAFTPS_COMMAND_TIMEOUT='ten'"):
        raftps.Client("127.0.0.1:7000", insecure=True)
