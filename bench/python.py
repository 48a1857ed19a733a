#!/usr/bin/python3
"""Python rows of `make bench`: the Python client and PyTorch trainers
against a local `raftps node` on loopback.

Rows (one run, one machine; the rows that compare run their contenders
interleaved, so that the load of a shared machine hits them alike):

1. cnn examples/s: the example's CNN (examples/pytorch/fashion_mnist.py
   Net) trained by 1 PyTorch trainer through 1 pserver slot (sync mode,
   momentum SGD on the pserver, raftps.torch.DistributedOptimizer) against
   the same PyTorch loop in one process (torch.optim.SGD); the same
   batches of 64, after a warm-up. Reported: both rates and their ratio.
2. push+pull MB/s of 10M float32 parameters (10 tensors of 1M, 2 slots,
   async SGD) from Python (raftps.ps.ParamClient) and from the Go client
   (psclient.Client, bench/pypushpull) against the same pservers, one after
   the other, repeated (--reps): the median ratio and its spread. MB
   counts the float32 bytes pushed and pulled. Also each client's CPU
   time per round (user+system, all its threads; Python's process_time,
   Go's getrusage), which a loaded machine moves less than MB/s.
3. 2 trainers on the same CNN (bench/python_trainer.py; batches of 64
   each, momentum SGD lr 0.05/0.9, one torch thread each): raftps PS mode
   (a sync job, 1 pserver), raftps allreduce mode (DistributedOptimizer
   mode="allreduce" under elastic.run, a commit per step) and plain DDP
   with Gloo run by torchrun (--rdzv_backend c10d: its TCPStore), one
   after the other per repetition. examples/s = both trainers' timed
   examples / the slower one's seconds; ratios vs DDP.
4. a trainer SIGKILLed -> training resumes: 2 trainers step; one is
   SIGKILLed; seconds until the survivor steps again (raftps allreduce,
   min_np 1, 1 s leases: a step in a group of 1) vs until torchrun's
   restarted workers step (--max_restarts 1, its default monitor interval
   of 5 s, and 1 s).

Writes a markdown table to stdout and to bench/results/python-<UTC time>.md
(and .json). Usage: bench/python.py [--bin bin/raftps] [--quick] [--rows 1,2,3,4]
"""

import argparse
import datetime
import json
import os
import signal
import socket
import statistics
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


def bench_pushpull(c, eps, iters, gobin, reps):
    """Python's and Go's push+pull MB/s, ``reps`` times interleaved (Python
    then Go) on the same pservers, and each client's CPU milliseconds per
    round: four lists (py, go, py_cpu_ms, go_cpu_ms)."""
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
    py, go, py_cpu, go_cpu = [], [], [], []
    for _ in range(reps):
        c0, t0 = time.process_time(), time.perf_counter()
        for _ in range(iters):
            ps.push(grads)
            ps.pull(dst)
        py.append(2 * 4 * n_tensors * size * iters / 1e6 / (time.perf_counter() - t0))
        py_cpu.append((time.process_time() - c0) * 1e3 / iters)
        r = subprocess.run([gobin, "--endpoints", eps.split(",")[0], "--job", job, "--iters", str(iters)],
                           capture_output=True, text=True, check=True)
        out = json.loads(r.stdout)
        go.append(out["mb_per_s"])
        go_cpu.append(out["cpu_seconds"] * 1e3 / iters)
    ps.close()
    raftps.jobs.cancel(c, job)
    return py, go, py_cpu, go_cpu


TRAINER = os.path.join(HERE, "python_trainer.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(log, args, max_restarts=0, monitor=None):
    """Starts plain torchrun (2 workers of python_trainer.py ddp, Gloo, the
    c10d rendezvous on its own TCPStore)."""
    # --redirects/--tee 1: their default (0) stops torch 1.13's torchrun at
    # start on Python 3.11 (Std.from_str("0") is None there).
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
           "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{free_port()}",
           "--max_restarts", str(max_restarts), "--redirects", "1", "--tee", "1", "--log_dir", log + ".d"]
    if monitor is not None:
        cmd += ["--monitor_interval", str(monitor)]
    with open(log + ".out", "w") as out:
        return subprocess.Popen(cmd + [TRAINER, "ddp", "--log", log, *args], stdout=out, stderr=subprocess.STDOUT)


def raftps_trainers(eps, job, mode, log, args):
    """Starts 2 python_trainer.py processes of ``mode`` for job."""
    procs = []
    for k in range(2):
        with open(f"{log}.{k}.out", "w") as out:
            procs.append(subprocess.Popen([sys.executable, TRAINER, mode, "--endpoints", eps, "--job", job, "--id", f"t{k}",
                                           "--index", str(k), "--log", log, *args], stdout=out, stderr=subprocess.STDOUT))
    return procs


def read_log(log):
    try:
        with open(log) as f:
            return [json.loads(l) for l in f if l.endswith("\n")]
    except FileNotFoundError:
        return []


def finish(procs, timeout):
    """Waits for procs; kills (by pid) those still running after timeout.
    Returns whether all exited 0."""
    deadline = time.monotonic() + timeout
    ok = True
    for p in procs:
        try:
            ok &= p.wait(max(deadline - time.monotonic(), 0.1)) == 0
        except subprocess.TimeoutExpired:
            ok = False
            p.kill()
            p.wait()
    return ok


def stop_torchrun(p, log):
    """Stops a torchrun and the workers its log names (by their pids)."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        finish([p], 30)
    for e in read_log(log):
        if e["ev"] == "start":
            try:
                os.kill(e["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass


def trainer_job(c, mode):
    job = f"bench-{mode}-{time.time_ns() % 10**10}"
    raftps.jobs.submit(c, spec(job, param_specs(Net()), "UPDATE_MODE_SYNC", 1,
                               {"name": "momentum", "learning_rate": 0.05, "momentum": 0.9}))
    wait_slots(c, job, 1)
    return job


def rate(log):
    done = [e for e in read_log(log) if e["ev"] == "done"]
    if len(done) != 2:
        raise RuntimeError(f"{log}: {len(done)} trainers finished, want 2")
    return sum(e["examples"] for e in done) / max(e["seconds"] for e in done)


def bench_trainers(c, eps, work, batches, warmup, reps):
    """examples/s of 2 trainers in PS mode, allreduce mode and DDP, ``reps``
    times interleaved: {mode: [rates]}."""
    args = ["--batches", str(batches), "--warmup", str(warmup)]
    out = {"ps": [], "allreduce": [], "ddp": []}
    for r in range(reps):
        for mode in out:
            log = os.path.join(work, f"{mode}-{r}.jsonl")
            if mode == "ddp":
                procs = [torchrun(log, args)]
                job = None
            else:
                job = trainer_job(c, mode)
                procs = raftps_trainers(eps, job, mode, log, args)
            if not finish(procs, 600):
                raise RuntimeError(f"{mode} trainers failed: see {log}")
            out[mode].append(rate(log))
            if job:
                raftps.jobs.cancel(c, job)
    return out


def wait_for(log, pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        hit = [e for e in read_log(log) if pred(e)]
        if hit:
            return hit
        time.sleep(0.05)
    raise TimeoutError(f"{log}: {what} within {timeout} s")


def steps_of(log, n, pred):
    """Whether both trainers logged at least n steps matching pred."""
    es = [e for e in read_log(log) if e["ev"] == "step" and pred(e)]
    return all(sum(1 for e in es if e["index"] == k) >= n for k in range(2))


def kill_raftps(c, eps, work, r):
    """Seconds from a SIGKILL of one of 2 allreduce trainers to the
    survivor's first step in the new group."""
    job = trainer_job(c, "kill")
    log = os.path.join(work, f"kill-allreduce-{r}.jsonl")
    procs = raftps_trainers(eps, job, "allreduce", log, ["--batches", "100000", "--warmup", "0", "--log-steps"])
    try:
        wait_for(log, lambda e: steps_of(log, 10, lambda s: s["size"] == 2), 180, "10 steps of 2 trainers")
        t_kill = time.time()
        procs[1].kill()
        hit = wait_for(log, lambda e: e["ev"] == "step" and e["index"] == 0 and e["size"] == 1 and e["t"] > t_kill,
                       120, "the survivor's step alone")
        return hit[0]["t"] - t_kill
    finally:
        for p in procs:
            p.kill()
            p.wait()
        raftps.jobs.cancel(c, job)


def kill_torchrun(work, r, monitor):
    """Seconds from a SIGKILL of one of 2 DDP workers to the first step of
    the workers torchrun restarted (--max_restarts 1)."""
    log = os.path.join(work, f"kill-torchrun-{monitor}-{r}.jsonl")
    p = torchrun(log, ["--batches", "100000", "--warmup", "0", "--log-steps", "--restart-batches", "5"],
                 max_restarts=1, monitor=monitor)
    try:
        wait_for(log, lambda e: steps_of(log, 10, lambda s: s["restart"] == 0), 180, "10 steps of 2 workers")
        victim = [e for e in read_log(log) if e["ev"] == "start" and e["index"] == 1 and e["restart"] == 0][0]
        t_kill = time.time()
        os.kill(victim["pid"], signal.SIGKILL)
        hit = wait_for(log, lambda e: e["ev"] == "step" and e["restart"] == 1, 180, "a restarted worker's step")
        return min(e["t"] for e in hit) - t_kill
    finally:
        stop_torchrun(p, log)


def bench_kill(c, eps, work, reps):
    out = {"raftps_allreduce": [], "torchrun_monitor_5s": [], "torchrun_monitor_1s": []}
    for r in range(reps):
        out["raftps_allreduce"].append(kill_raftps(c, eps, work, r))
        out["torchrun_monitor_5s"].append(kill_torchrun(work, r, None))
        out["torchrun_monitor_1s"].append(kill_torchrun(work, r, 1))
    return out


def spread(xs, fmt="{:.0f}"):
    return f"{fmt.format(statistics.median(xs))} [{fmt.format(min(xs))}-{fmt.format(max(xs))}]"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "bin", "raftps"))
    ap.add_argument("--quick", action="store_true", help="fewer batches and rounds")
    ap.add_argument("--rows", default="1,2,3,4", help="which rows to run")
    ap.add_argument("--reps", type=int, default=0, help="repetitions of rows 3-4 (default 2, --quick 1); row 2: at least 3")
    a = ap.parse_args()
    rows_wanted = {int(x) for x in a.rows.split(",")}
    gobin = os.path.join(ROOT, "bin", "pypushpull")
    subprocess.run(["go", "build", "-o", gobin, "./bench/pypushpull"], cwd=ROOT, check=True)
    work = tempfile.mkdtemp(prefix="raftps-bench-python-")
    # Plaintext (--insecure): bench/pypushpull's Go client dials plaintext,
    # and both clients must pay the same transport.
    nodes = localcluster.start(a.bin, work, 1, roles="server,pserver", secure=False)
    eps = nodes[0].grpc
    c = raftps.Client(eps, insecure=True)
    batches, warmup, iters = (40, 5, 3) if a.quick else (200, 20, 5)
    reps = a.reps or (1 if a.quick else 2)
    # Row 3's batches per trainer: the whole file stays within minutes on 2 cores.
    tbatches = max(batches // 4, 20)
    res = {"batches": batches, "iters": iters, "reps": reps, "work": work}
    rows = []
    try:
        if 1 in rows_wanted:
            local, remote = bench_cnn(c, batches, warmup)
            res.update(cnn_local_examples_per_s=local, cnn_ps_examples_per_s=remote, cnn_ratio=remote / local)
            rows.append(("PyTorch CNN, 1 trainer + 1 pserver (loopback) vs one process",
                         f"{remote:.0f} vs {local:.0f} examples/s: {remote / local:.3f}x",
                         f"{batches} batches of 64, sync, momentum; interleaved in chunks of 10"))
        if 2 in rows_wanted:
            py, go, py_cpu, go_cpu = bench_pushpull(c, eps, iters, gobin, max(reps, 3))
            ratios = [p / g for p, g in zip(py, go)]
            res.update(pushpull_python_mb_per_s=py, pushpull_go_mb_per_s=go, pushpull_ratios=ratios,
                       pushpull_ratio=statistics.median(ratios), pushpull_python_cpu_ms_per_round=py_cpu,
                       pushpull_go_cpu_ms_per_round=go_cpu)
            rows.append(("push+pull of 10M float32 params, Python vs Go client",
                         f"{spread(py)} vs {spread(go)} MB/s: {spread(ratios, '{:.2f}')}x; "
                         f"client CPU {spread(py_cpu)} vs {spread(go_cpu)} ms/round",
                         f"median [min-max] of {len(py)} interleaved runs of {iters} rounds; 2 slots, async sgd, same pservers"))
        if 3 in rows_wanted:
            tr = bench_trainers(c, eps, work, tbatches, warmup, reps)
            ps_r = [p / d for p, d in zip(tr["ps"], tr["ddp"])]
            ar_r = [p / d for p, d in zip(tr["allreduce"], tr["ddp"])]
            res.update(trainers_examples_per_s=tr, trainers_ps_vs_ddp=ps_r, trainers_allreduce_vs_ddp=ar_r)
            rows.append(("CNN, 2 trainers: raftps PS mode vs torchrun DDP (Gloo)",
                         f"{spread(tr['ps'])} vs {spread(tr['ddp'])} examples/s: {spread(ps_r, '{:.2f}')}x",
                         f"{tbatches} batches of 64 per trainer; sync job, 1 pserver; median [min-max] of {reps} interleaved runs"))
            rows.append(("CNN, 2 trainers: raftps allreduce mode vs torchrun DDP (Gloo)",
                         f"{spread(tr['allreduce'])} vs {spread(tr['ddp'])} examples/s: {spread(ar_r, '{:.2f}')}x",
                         "Gloo group on raftps.torch.Store, elastic.run, a commit per step; same runs"))
        if 4 in rows_wanted:
            k = bench_kill(c, eps, work, reps)
            res.update(kill_resume_seconds=k)
            rows.append(("trainer SIGKILL -> training resumes: raftps allreduce vs torchrun restart",
                         f"{spread(k['raftps_allreduce'], '{:.2f}')} s vs {spread(k['torchrun_monitor_5s'], '{:.2f}')} s "
                         f"(monitor 1 s: {spread(k['torchrun_monitor_1s'], '{:.2f}')} s)",
                         f"2 trainers, one SIGKILLed; until the survivor steps alone (min_np 1, 1 s leases) / "
                         f"until torchrun's restarted workers step (--max_restarts 1); median [min-max] of {reps}"))
    finally:
        c.close()
        localcluster.stop(nodes)
    md = "| what | figure | how |\n| --- | --- | --- |\n" + "".join(f"| {w} | {f} | {h} |\n" for w, f, h in rows)
    print(md)
    res["load_avg"] = os.getloadavg()
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", f"python-{stamp}.md"), "w") as f:
        f.write(md)
    with open(os.path.join(HERE, "results", f"python-{stamp}.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
