"""A PyTorch model trained on raftps, exported with `raftps checkpoint
export --format safetensors`, loads into a fresh model with exactly the
trained parameters (and so the same test accuracy)."""

import subprocess
import uuid

import numpy as np
import pytest
import torch

import raftps.jobs
from raftps import errors
from raftps.checkpoint import load_state_dict, read_safetensors
from raftps.datasets import fashion_mnist
from raftps.ps import ParamClient
from raftps.tasks import TaskBatches, TaskSource, TrainerSession
from raftps.torch import DistributedOptimizer, param_specs

from conftest import DATASET, external_spec, wait_slots


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 5, stride=3)
        self.fc = torch.nn.Linear(4 * 8 * 8, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


def test_safetensors_export_reproduces_model(client, cluster, bin_path, tmp_path):
    torch.set_num_threads(1)
    job = f"ckpt-{uuid.uuid4().hex[:6]}"
    spec = external_spec(job, param_specs(Tiny()), records=1200, rpt=200, batch=50, passes=1,
                         optimizer="momentum", lr=0.05, checkpoint={"every_steps": 5, "keep_max": 2})
    spec["optimizer"]["momentum"] = 0.9
    raftps.jobs.submit(client, spec)
    wait_slots(client, job, 2)
    x, y = fashion_mnist(DATASET, "train", limit=1200)
    X, Y = torch.from_numpy(x).unsqueeze(1), torch.from_numpy(y)
    session = TrainerSession(client, job, "py", ttl=3)
    ps = ParamClient(client, job, "py")
    model = Tiny()
    opt = DistributedOptimizer(ps, model.named_parameters(), session=session)
    snaps = {}  # step -> the parameters after it (sync: every slot's version is the step)
    for idx in TaskBatches(TaskSource(client, job, "py", ps=ps)):
        i = torch.from_numpy(idx)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(X[i]), Y[i]).backward()
        opt.step(examples=len(idx))
        assert len(set(ps.versions)) == 1
        snaps[ps.versions[0]] = {n: p.detach().clone() for n, p in model.named_parameters()}
    assert opt.steps == 24 and max(snaps) == 24
    st = raftps.jobs.wait(client, job, 60)
    assert raftps.jobs.state_name(st) == "JOB_SUCCEEDED"
    out = str(tmp_path / "m.safetensors")
    eps = ",".join(n.grpc for n in cluster)
    # The export picks the newest complete version and then reads it; a
    # checkpoint committed in between can supersede it ("not globally
    # consistent"): pick again, a bounded number of times.
    for _ in range(10):
        r = subprocess.run([bin_path, "checkpoint", "export", job, "--format", "safetensors", "--out", out,
                            "--endpoints", eps], capture_output=True, text=True)
        if r.returncode == 0 or "not globally consistent" not in r.stderr:
            break
        __import__("time").sleep(0.5)
    assert r.returncode == 0, r.stderr
    arrays, meta = read_safetensors(out)
    assert meta["job"] == job and meta["format"] == "raftps"
    step = int(meta["step"])
    # The newest complete version: the final one (a last checkpoint when
    # the job ends) or, while that one is still being written (checkpoints
    # are asynchronous), one of those taken every 5 steps.
    if not (step in snaps and step >= 5 and step % 5 == 0 or step == 24):
        listing = subprocess.run([bin_path, "checkpoint", "list", job, "--endpoints", eps], capture_output=True, text=True)
        st = subprocess.run([bin_path, "job", "status", job, "--endpoints", eps], capture_output=True, text=True)
        pytest.fail(f"exported step {step} (version {meta['version']}):\n{listing.stdout}{listing.stderr}\n{st.stdout}{st.stderr}")
    fresh = Tiny()
    load_state_dict(out, fresh)
    for n, b in fresh.named_parameters():
        assert torch.equal(snaps[step][n], b), n
    model.load_state_dict(snaps[step])
    xt, yt = fashion_mnist(DATASET, "test", limit=1000)
    Xt = torch.from_numpy(xt).unsqueeze(1)
    with torch.no_grad():
        acc = (model(Xt).argmax(1).numpy() == yt).mean()
        acc2 = (fresh(Xt).argmax(1).numpy() == yt).mean()
    assert acc == acc2
    # A file that is not safetensors is InvalidArgument, not a crash.
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}")
    with pytest.raises(errors.InvalidArgument):
        read_safetensors(str(bad))
    ps.close()
    session.close()
