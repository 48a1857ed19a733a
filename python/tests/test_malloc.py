"""raftps._malloc: the glibc settings that importing raftps.ps applies so
that grpcio's per-message buffers stay in the heap (no page faults per
message), and the ways to opt out."""

import os
import subprocess
import sys
import uuid

import raftps
import raftps.jobs
from raftps import _malloc
from raftps.ps import ParamClient

from conftest import external_spec, wait_slots

HERE = os.path.dirname(os.path.abspath(__file__))


def test_tuning_stops_page_faults_per_round(client, cluster):
    """Push+pull of 8M float32 params (two 16 MB slots, streamed in 4 MiB
    messages) in a child process over grpcio (RAFTPS_PS_TRANSPORT=grpcio:
    the transport whose per-message ``bytes`` the settings are for), with
    the settings and with RAFTPS_MALLOC_TUNING=0: glibc's defaults fault
    every message's pages in again (about one fault per 4 KiB moved)."""
    job = f"malloc-{uuid.uuid4().hex[:6]}"
    params = [{"name": f"p{i}", "shape": [1_000_000], "init": "INIT_ZEROS"} for i in range(8)]
    raftps.jobs.submit(client, external_spec(job, params, mode="UPDATE_MODE_ASYNC", lr=0.01))
    wait_slots(client, job, 2)
    eps = ",".join(n.grpc for n in cluster)

    def run(env):
        out = subprocess.run([sys.executable, os.path.join(HERE, "malloc_worker.py"), eps, job, "3"],
                             capture_output=True, text=True, timeout=300,
                             env={**os.environ, "PYTHONPATH": os.path.dirname(HERE), "RAFTPS_PS_TRANSPORT": "grpcio",
                                  **env})
        assert out.returncode == 0, out.stderr[-2000:]
        applied, faults = out.stdout.split()
        return applied == "1", int(faults)

    applied, tuned = run({})
    off, default = run({"RAFTPS_MALLOC_TUNING": "0"})
    raftps.jobs.cancel(client, job)
    assert applied and not off
    moved_pages = 2 * 8_000_000 * 4 // 4096  # pushed and pulled, per round
    assert default > moved_pages // 4, f"glibc's defaults: {default} faults per round; the probe no longer measures"
    assert tuned < default // 3, f"tuned: {tuned} minor faults per round, glibc's defaults: {default}"


def test_opt_outs_leave_malloc_alone(monkeypatch):
    calls = []
    monkeypatch.setattr(_malloc, "_mallopt", lambda p, v: calls.append((p, v)) or True)
    for env in ({"RAFTPS_MALLOC_TUNING": "0"}, {"MALLOC_TRIM_THRESHOLD_": str(1 << 20)},
                {"MALLOC_MMAP_THRESHOLD_": str(1 << 20)}):
        monkeypatch.setattr(_malloc, "_applied", None)
        with monkeypatch.context() as m:
            for k, v in env.items():
                m.setenv(k, v)
            assert _malloc.keep_message_buffers() is False, env
    assert calls == []
