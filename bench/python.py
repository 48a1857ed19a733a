#!/usr/bin/python3
"""Python rows of `make bench`: the Python client and PyTorch trainers
against a local `raftps node` on loopback.

Rows (one run, one machine):

1. cnn examples/s: the example's CNN (examples/pytorch/fashion_mnist.py
   Net) trained by 1 PyTorch trainer through 1 pserver slot (sync mode,
   momentum SGD on the pserver, raftps.torch.DistributedOptimizer) against
   the same PyTorch loop in one process (torch.optim.SGD); the same
   batches of 64, after a warm-up. Reported: both rates and their ratio.
2. push+pull MB/s of 10M float32 parameters (10 tensors of 1M, 2 slots,
   async SGD) from Python (raftps.ps.ParamClient) and from the Go client
   (psclient.Client, bench/pypushpull) against the same pservers, one after
   the other. MB counts the float32 bytes pushed and pulled.

Writes a markdown table to stdout and to bench/results/python-<UTC time>.md
(and .json). Usage: bench/python.py [--bin bin/raftps] [--quick]
"""

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "examples", "pytorch"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import raftps  # noqa: E402
import raftps.jobs  # noqa: E402
from raftps import localcluster  # noqa: E402
from raftps.ps import ParamClient  # noqa: E402
from raftps.tasks import TrainerSession  # noqa: E402
from raftps.torch import DistributedOptimizer, param_specs  # noqa: E402

from fashion_mnist import DATASET, Net, load  # noqa: E402


def wait_slots(c, job, n, timeout=60):
    deadline = time.monotonic() + timeout
    while len([p for p in raftps.jobs.status(c, job).pservers if p.addr]) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job}: slots not served")
        time.sleep(0.2)


def spec(name, params, mode, pservers, optimizer):
    return {"name": name, "model": {"name": "external"}, "params": params,
            "dataset": {"path": DATASET, "records": 60000}, "records_per_task": 1000, "batch_size": 64,
            "passes": 1, "optimizer": optimizer, "num_pservers": pservers, "mode": mode}


def bench_cnn(c, batches, warmup, chunk=10):
    """Examples/s of the same loop through the pservers and in-process,
    interleaved in chunks of ``chunk`` batches so that the load of a shared
    machine hits both alike."""
    torch.set_num_threads(1)
    x, y = load("train", 64 * (batches + warmup))
    opt_spec = {"name": "momentum", "learning_rate": 0.05, "momentum": 0.9}
    torch.manual_seed(1)
    m = Net()
    local_opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
    job = f"bench-cnn-{int(time.time())}"
    raftps.jobs.submit(c, spec(job, param_specs(Net()), "UPDATE_MODE_SYNC", 1, opt_spec))
    wait_slots(c, job, 1)
    session = TrainerSession(c, job, "bench", ttl=5)
    time.sleep(1.0)  # the pserver learns the trainer set
    ps = ParamClient(c, job, "bench")
    m2 = Net()
    ps_opt = DistributedOptimizer(ps, m2.named_parameters(), session=session, examples=64)

    def run(model, opt, lo, hi):
        t0 = time.perf_counter()
        for b in range(lo, hi):
            i = slice(64 * b, 64 * (b + 1))
            opt.zero_grad()
            F.cross_entropy(model(x[i]), y[i]).backward()
            opt.step()
        return time.perf_counter() - t0

    run(m, local_opt, 0, warmup)
    run(m2, ps_opt, 0, warmup)
    t_local = t_ps = 0.0
    for lo in range(warmup, warmup + batches, chunk):
        hi = min(lo + chunk, warmup + batches)
        t_local += run(m, local_opt, lo, hi)
        t_ps += run(m2, ps_opt, lo, hi)
    ps.close()
    session.close()
    raftps.jobs.cancel(c, job)
    return 64 * batches / t_local, 64 * batches / t_ps


def bench_pushpull(c, eps, iters, gobin):
    n_tensors, size = 10, 1_000_000
    params = [{"name": f"p{i}", "shape": [size], "init": "INIT_ZEROS"} for i in range(n_tensors)]
    job = f"bench-pp-{int(time.time())}"
    raftps.jobs.submit(c, spec(job, params, "UPDATE_MODE_ASYNC", 2, {"name": "sgd", "learning_rate": 0.01}))
    wait_slots(c, job, 2)
    ps = ParamClient(c, job, "py-bench")
    dst = ps.pull()
    grads = {k: np.zeros_like(v) for k, v in dst.items()}
    ps.push(grads)
    ps.pull(dst)
    t0 = time.perf_counter()
    for _ in range(iters):
        ps.push(grads)
        ps.pull(dst)
    py = 2 * 4 * n_tensors * size * iters / 1e6 / (time.perf_counter() - t0)
    ps.close()
    r = subprocess.run([gobin, "--endpoints", eps.split(",")[0], "--job", job, "--iters", str(iters)],
                       capture_output=True, text=True, check=True)
    go = json.loads(r.stdout)["mb_per_s"]
    raftps.jobs.cancel(c, job)
    return py, go


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "bin", "raftps"))
    ap.add_argument("--quick", action="store_true", help="fewer batches and rounds")
    a = ap.parse_args()
    gobin = os.path.join(ROOT, "bin", "pypushpull")
    subprocess.run(["go", "build", "-o", gobin, "./bench/pypushpull"], cwd=ROOT, check=True)
    work = tempfile.mkdtemp(prefix="raftps-bench-python-")
    # Plaintext (--insecure): bench/pypushpull's Go client dials plaintext,
    # and both clients must pay the same transport.
    nodes = localcluster.start(a.bin, work, 1, roles="server,pserver", secure=False)
    eps = nodes[0].grpc
    c = raftps.Client(eps, insecure=True)
    try:
        batches, warmup, iters = (40, 5, 3) if a.quick else (200, 20, 5)
        local, remote = bench_cnn(c, batches, warmup)
        py, go = bench_pushpull(c, eps, iters, gobin)
    finally:
        c.close()
        localcluster.stop(nodes)
    rows = [
        ("PyTorch CNN, 1 trainer + 1 pserver (loopback) vs one process",
         f"{remote:.0f} vs {local:.0f} examples/s: {remote / local:.3f}x", f"{batches} batches of 64, sync, momentum; interleaved in chunks of 10"),
        ("push+pull of 10M float32 params, Python vs Go client",
         f"{py:.0f} vs {go:.0f} MB/s: {py / go:.3f}x", f"{iters} rounds, 2 slots, async sgd, same pservers"),
    ]
    md = "| what | figure | how |\n| --- | --- | --- |\n" + "".join(f"| {w} | {f} | {h} |\n" for w, f, h in rows)
    print(md)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", f"python-{stamp}.md"), "w") as f:
        f.write(md)
    with open(os.path.join(HERE, "results", f"python-{stamp}.json"), "w") as f:
        json.dump({"cnn_local_examples_per_s": local, "cnn_ps_examples_per_s": remote, "cnn_ratio": remote / local,
                   "pushpull_python_mb_per_s": py, "pushpull_go_mb_per_s": go, "pushpull_ratio": py / go,
                   "batches": batches, "iters": iters, "load_avg": os.getloadavg()}, f, indent=1)


if __name__ == "__main__":
    main()
