"""python/README.md's guide ("Your first model, step by step") runs as
written: each ``python`` block after a ``<!-- guide: NAME -->`` marker is
saved as NAME and run against the fixture's 3-node TLS cluster: the job
spec, one trainer in PS mode and the export into a fresh model, then two
trainers of the same script in allreduce mode, which end with one model."""

import os
import re
import subprocess
import sys
import uuid

import torch

import raftps.jobs

from conftest import DATASET

HERE = os.path.dirname(os.path.abspath(__file__))
README = os.path.join(os.path.dirname(HERE), "README.md")


def blocks():
    text = open(README).read()
    return dict(re.findall(r"<!-- guide: (\S+) -->\n```python\n(.*?)```", text, re.S))


def run(args, env, cwd, timeout=300):
    r = subprocess.run([sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{args}: exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    return r.stdout


def test_guide_code_blocks_run(client, cluster, bin_path, tmp_path):
    code = blocks()
    assert sorted(code) == ["export.py", "mynet.py", "submit.py", "train.py"], sorted(code)
    for name, src in code.items():
        (tmp_path / name).write_text(src)
    base = dict(os.environ, RAFTPS_ENDPOINTS=",".join(n.grpc for n in cluster), DATASET=DATASET,
                GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1",
                PATH=os.path.dirname(os.path.abspath(bin_path)) + os.pathsep + os.environ.get("PATH", ""),
                PYTHONPATH=os.path.dirname(HERE) + os.pathsep + str(tmp_path))
    cwd = str(tmp_path)

    # PS mode: submit, one trainer, export into a fresh model.
    ps = dict(base, JOB=f"guide-ps-{uuid.uuid4().hex[:6]}", MODE="ps", TRAINER="t1")
    run(["submit.py"], ps, cwd)
    assert "t1: rank 0 of 1, ps mode, done after" in run(["train.py"], ps, cwd)
    st = raftps.jobs.wait(client, ps["JOB"], 120)
    assert raftps.jobs.state_name(st) == "JOB_SUCCEEDED", st.message
    assert "loaded 50890 parameters" in run(["export.py"], ps, cwd)

    # Allreduce mode: the same script, two trainers, one model. MIN_NP=2:
    # else the first trainer up may finish the job alone before the
    # second (a slow torch import under load) joins, which then saves
    # its untrained model (seen in CI).
    ar = dict(base, JOB=f"guide-ar-{uuid.uuid4().hex[:6]}", MODE="allreduce", MIN_NP="2")
    run(["submit.py"], ar, cwd)
    procs = [subprocess.Popen([sys.executable, "train.py"], env=dict(ar, TRAINER=t), cwd=cwd,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for t in ("a", "b")]
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, err[-3000:]
            outs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    steps = [re.search(r"rank \d of 2, allreduce mode, done after (\d+) steps", o) for o in outs]
    assert all(steps), outs
    assert all(int(m.group(1)) > 0 for m in steps), outs  # both trained, not only the first up
    st = raftps.jobs.status(client, ar["JOB"])
    assert raftps.jobs.state_name(st) == "JOB_SUCCEEDED", st.message
    sa, sb = (torch.load(str(tmp_path / f"{ar['JOB']}-{t}.pt")) for t in ("a", "b"))
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
