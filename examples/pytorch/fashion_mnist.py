#!/usr/bin/python3
"""A small CNN in PyTorch trained on the shipped Fashion-MNIST
(datasets/fashion-mnist, IDX gzip; nothing is downloaded) with raftps's
parameter servers, task queue and checkpoints.

    fashion_mnist.py demo [--epochs 4] [--no-faults] [--mode ps|allreduce]   # local 3-node cluster, faults, summary (make demo-python)
    fashion_mnist.py local [--epochs 4]                # plain single-process PyTorch, same hyperparameters
    fashion_mnist.py train --endpoints H:P,... --job J --id T   # one trainer process

The demo starts three `raftps node` processes (roles server,pserver),
submits an `external` job (the CNN's parameters, momentum SGD on 2 pserver
slots, sync mode, checkpoints), runs two trainer processes, SIGKILLs one
trainer and then the node serving pserver slot 0 (restarted 5 s later;
the demo's nodes run --pserver-lease-ttl 3s, so the slot is served
elsewhere about 2 s after its holder's last keepalive; the node default,
5 s, makes that 3.3 s and the stall measured 4.4-6.0 s),
adds a trainer, and prints a summary: final test accuracy (the last pass's
eval task), how long training stood still after each fault, the restores,
and the test accuracy of the exported safetensors checkpoint loaded into a
fresh model. It exits 1 if the accuracy misses --target.

``--mode allreduce`` runs the same trainers in raftps's elastic allreduce
mode (raftps.torch.allreduce: a Gloo group on raftps.torch.Store, the
job's optimizer applied by every trainer, membership from the trainers'
registrations), with the same faults: a trainer SIGKILLed mid-step (a
survivor's collective fails on the closed connection, it names the dead
member from its broken Gloo pair and proposes the next generation
without it at once, not waiting for its 3 s lease; the survivors restore
the last commit and re-form), a raftps node SIGKILLed (the group's store
outlives it), a trainer added (rank 2, synced from rank 0). For a
trainer kill the summary gives, per survivor, when its collective failed
and the re-form's phases. There is no export: the pservers' copy of the
parameters is unused in this mode.

Hyperparameters (both modes; allreduce mode runs 5 epochs, see
MODE_DEFAULTS): 4 epochs, batch 64 per trainer (sync
averages the two trainers' batches: 128 per step; `local` uses 128, so
both see every record once per epoch in steps of 128), momentum SGD with
momentum 0.9 and the pservers' schedule lr_t = lr / (1 + lr_decay * t)
(t = steps before; `local` applies the same with LambdaLR), seed 1 for
the initialization's distribution (PyTorch's default,
raftps.torch.param_specs) and the record order (the master's per-pass
permutation; `local` a torch.randperm).

Security: the demo's cluster runs mutual TLS with a CA of its own
(<data dir>/tls); each trainer has a trainer certificate for the job only.
`--insecure` runs it plaintext.
"""

import argparse
import faulthandler
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import raftps  # noqa: E402
import raftps.jobs  # noqa: E402
from raftps.datasets import fashion_mnist  # noqa: E402

DATASET = os.path.join(ROOT, "datasets", "fashion-mnist")


class SmallNet(torch.nn.Module):
    """conv5x5(16) - pool - conv5x5(32) - pool - fc(10): 18,378 parameters
    (fast; about 88.5% after 8 epochs)."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 16, 5)
        self.conv2 = torch.nn.Conv2d(16, 32, 5)
        self.fc = torch.nn.Linear(512, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


class Net(torch.nn.Module):
    """conv3x3(32) - pool - conv3x3(64) - pool - fc(128) - fc(10):
    421,642 parameters."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = torch.nn.Linear(64 * 7 * 7, 128)
        self.fc2 = torch.nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


MODELS = {"cnn": Net, "small": SmallNet}

# MODE_DEFAULTS are each mode's passes and optimizer when not given: 4
# passes of momentum SGD in PS mode (90.8% with faults), 5 in allreduce mode
# (the same SGD, one pass more for a margin over 90%; `local --mode
# allreduce` is its single-process run). Adam at lr 0.001 reached 86.6% and
# 87.6% after 1 and 2 passes in `local`, below momentum SGD's 87.8% after 1.
MODE_DEFAULTS = {"ps": {"epochs": 4, "optimizer": "momentum"},
                 "allreduce": {"epochs": 5, "optimizer": "momentum"}}


def load(split, limit=None):
    x, y = fashion_mnist(DATASET, split, limit)
    return torch.from_numpy(x).unsqueeze(1), torch.from_numpy(y)


@torch.no_grad()
def evaluate(model, x, y, batch=1000):
    model.eval()
    loss, correct = 0.0, 0
    for i in range(0, len(x), batch):
        out = model(x[i:i + batch])
        loss += F.cross_entropy(out, y[i:i + batch], reduction="sum").item()
        correct += (out.argmax(1) == y[i:i + batch]).sum().item()
    model.train()
    return loss / len(x), correct / len(x)


# --- plain single-process PyTorch (the baseline) -------------------------

def cmd_local(a):
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    x, y = load("train", a.records)
    xt, yt = load("test")
    model = MODELS[a.model]()
    if a.optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    # The pservers' schedule: lr_t = lr / (1 + lr_decay * t), t = updates
    # applied before this one (pserver/optim).
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: 1.0 / (1.0 + a.lr_decay * t))
    bs = 2 * a.batch_size
    t0 = time.time()
    for epoch in range(a.epochs):
        perm = torch.randperm(len(x))
        for i in range(0, len(x), bs):
            idx = perm[i:i + bs]
            opt.zero_grad()
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
            sched.step()
        tl, ta = evaluate(model, xt, yt)
        print(json.dumps({"ev": "epoch", "epoch": epoch, "test_accuracy": ta, "test_loss": tl,
                          "elapsed": time.time() - t0}), flush=True)
    n = a.epochs * len(x)
    print(json.dumps({"ev": "local_done", "test_accuracy": ta, "seconds": time.time() - t0,
                      "examples_per_sec": n / (time.time() - t0)}), flush=True)


# --- one trainer process --------------------------------------------------

def cmd_train(a):
    from raftps.ps import ParamClient
    from raftps.tasks import TaskBatches, TaskSource, TrainerSession
    from raftps.torch import DistributedOptimizer, elastic

    torch.set_num_threads(1)
    faulthandler.register(signal.SIGUSR1)  # the demo dumps a trainer's stacks before killing a hung one

    def emit(**kw):
        kw["t"] = time.time()
        kw["id"] = a.id
        print(json.dumps(kw), flush=True)

    c = raftps.Client(a.endpoints)
    spec = raftps.jobs.status(c, a.job).spec
    x, y = load("train", spec.dataset.records)
    xt, yt = load("test")
    # allreduce: a dead member's broken Gloo connections are the detector;
    # the lease (3 s) only that of a hung one (1 s leases lapsed under this
    # machine's load: a live trainer re-registered and the group re-formed).
    session = TrainerSession(c, a.job, a.id, ttl=3 if a.mode == "allreduce" else 2)
    if a.min_trainers > 1:
        session.wait_members(a.min_trainers, 120)
    model = MODELS[a.model]()
    if a.mode == "allreduce":
        ps = None
        opt = DistributedOptimizer(model, session=session, mode="allreduce", spec=spec)
    else:
        ps = ParamClient(c, a.job, a.id, spec=spec)
        opt = DistributedOptimizer(ps, model.named_parameters(), session=session)

    def eval_fn(task):
        if ps is not None:
            opt.pull()
        loss, acc = evaluate(model, xt, yt)
        emit(ev="eval", pass_=task.pass_, test_accuracy=acc, test_loss=loss)
        return loss, acc, len(xt)

    batches = TaskBatches(TaskSource(c, a.job, a.id, ps=ps, spec=spec), eval_fn=eval_fn)
    if ps is None:
        opt.attach(batches)  # join the group's steps while waiting for a task and after the job
    state = elastic.TorchState(model, opt, batches=batches, step=0)
    restores = [0]

    def on_reset():
        why = state.last_failure[:300] if state.restores > restores[0] else "trainer set changed"
        restores[0] = state.restores
        # Allreduce mode: when the collective failed and the phases of the
        # re-form (seconds after form's start), for the demo's summary.
        form = dict(opt.rdzv.form_times) if ps is None else {}
        # The group's members in allreduce mode, the registered trainers in PS mode.
        members = opt.members() if ps is None else state.members()
        emit(ev="reset", members=sorted(members), step=state.step, restores=state.restores, why=why,
             form=form)

    state.register_reset_callbacks([on_reset])
    emit(ev="start", members=sorted(session.members()))

    @elastic.run
    def train(state):
        for idx in state.batches:
            i = torch.from_numpy(idx)
            opt.zero_grad()
            loss = F.cross_entropy(model(x[i]), y[i])
            loss.backward()
            opt.step(examples=len(idx))
            state.batches.record(loss.item(), len(idx))
            state.step += 1
            emit(ev="step", step=state.step, loss=round(loss.item(), 4))
            try:
                state.commit()
            except elastic.HostsUpdatedInterrupt as e:
                emit(ev="interrupt", members=sorted(e.members), step=state.step)
                raise

    t0 = time.time()
    train(state)
    # The model holds the parameters of this trainer's last pull, i.e. the
    # final ones if it took part in the last step (versions tell).
    # Allreduce mode: every member ends with the same model; rank 0 evaluates it.
    if ps is not None or state.rank == 0:
        loss, acc = evaluate(model, xt, yt)
        emit(ev="final_eval", test_accuracy=acc, test_loss=loss, versions=list(ps.versions) if ps else [])
    emit(ev="done", step=state.step, resets=state.resets, restores=state.restores, stale=opt.stale,
         tasks=batches.source.tasks_done, seconds=time.time() - t0, retried=ps.retried if ps else 0)
    session.close()
    if ps is not None:
        ps.close()
    else:
        opt.close()
    c.close()


# --- the demo -------------------------------------------------------------

def cmd_demo(a):
    from raftps import localcluster
    from raftps.torch import param_specs

    bin_path = a.bin or os.path.join(ROOT, "bin", "raftps")
    if not os.path.exists(bin_path):
        subprocess.run(["go", "build", "-o", bin_path, "./cmd/raftps"], cwd=ROOT, check=True)
    work = a.data_dir or tempfile.mkdtemp(prefix="raftps-demo-python-")
    print(f"data and logs: {work}", flush=True)
    # Mutual TLS (a CA of the demo's own in <work>/tls): the demo drives the
    # cluster with the admin's certificate, each trainer has a trainer
    # certificate for this job only (RAFTPS_CACERT/CERT/KEY in its
    # environment), the CLI gets --cacert/--cert/--key.
    # --pserver-lease-ttl: a dead node's slots are served elsewhere about
    # 2/3 of it after the node's last keepalive (node default 5 s).
    extra = ["--pserver-lease-ttl", a.pserver_lease_ttl] if a.pserver_lease_ttl else []
    nodes = localcluster.start(bin_path, work, 3, roles="server,pserver", secure=not a.insecure, extra=extra)
    admin = nodes[0].client_tls
    cli_tls = ["--cacert", admin.cacert, "--cert", admin.cert, "--key", admin.key] if admin else []
    eps = ",".join(n.grpc for n in nodes)
    c = raftps.Client(eps, tls=admin, insecure=admin is None)
    job = a.name or f"fmnist-cnn-{int(time.time()) % 100000}"
    torch.manual_seed(a.seed)
    spec = {"name": job, "model": {"name": "external"}, "params": param_specs(MODELS[a.model]()),
            "dataset": {"path": DATASET, "records": a.records}, "records_per_task": a.records_per_task,
            "batch_size": a.batch_size, "passes": a.epochs,
            "optimizer": {"name": a.optimizer, "learning_rate": a.lr,
                          "momentum": a.momentum if a.optimizer == "momentum" else 0.0, "lr_decay": a.lr_decay},
            "num_pservers": 2, "mode": "UPDATE_MODE_SYNC", "seed": a.seed, "eval_each_pass": True,
            "checkpoint": {"every_steps": a.checkpoint_steps, "keep_max": 3},
            "task_timeout_floor_ms": 120000, "max_task_timeouts": 10, "target_accuracy": a.target}
    raftps.jobs.submit(c, spec)
    procs, logs = {}, {}

    def start_trainer(tid, min_trainers=1):
        logs[tid] = os.path.join(work, f"{tid}.log")
        env = dict(os.environ, GLOO_SOCKET_IFNAME=os.environ.get("GLOO_SOCKET_IFNAME", "lo"))
        if admin is not None:
            t = localcluster.client_cert(bin_path, localcluster.tls_dir(work), tid, "trainer", jobs=[job])
            env.update(RAFTPS_CACERT=t.cacert, RAFTPS_CERT=t.cert, RAFTPS_KEY=t.key)
        procs[tid] = subprocess.Popen([sys.executable, os.path.abspath(__file__), "train", "--endpoints", eps,
                                       "--job", job, "--id", tid, "--min-trainers", str(min_trainers),
                                       "--model", a.model, "--mode", a.mode],
                                      stdout=open(logs[tid], "w"), stderr=open(logs[tid] + ".err", "w"), env=env)

    t_start = time.time()
    start_trainer("t1", 2)
    start_trainer("t2", 2)
    faults = []  # (time, what)
    plan = [] if a.no_faults else [(0.30, "kill-trainer"), (0.45, "kill-slot0-node"), (0.60, "add-trainer")]
    restart_at = None
    killed_node = None
    slot0_moved = None  # (time, node) when slot 0's record named another node
    total = None
    last_print = 0
    while True:
        try:
            st = raftps.jobs.status(c, job)
        except raftps.RaftpsError:
            time.sleep(0.5)
            continue
        if total is None:
            total = st.total_tasks * a.epochs
        progress = (getattr(st, "pass") * st.total_tasks + st.done) / max(total, 1)
        if st.state in raftps.jobs.TERMINAL:
            break
        now = time.time()
        if now - last_print > 10:
            print(f"  {now - t_start:6.1f}s pass {getattr(st, 'pass')} tasks {st.done}/{st.total_tasks} "
                  f"trainers {list(st.trainers)}", flush=True)
            last_print = now
        while plan and progress >= plan[0][0]:
            _, what = plan.pop(0)
            if what == "kill-trainer":
                procs["t1"].send_signal(signal.SIGKILL)
                faults.append((time.time(), "SIGKILL trainer t1"))
            elif what == "kill-slot0-node":
                slot0 = next((p for p in st.pservers if p.index == 0), None)
                killed_node = next((n for n in nodes if slot0 is not None and n.id == slot0.node), None)
                if killed_node is not None:
                    killed_node.kill()
                    faults.append((time.time(), f"SIGKILL node {killed_node.id} (pserver slot 0)"))
                    restart_at = time.time() + 5
            elif what == "add-trainer":
                start_trainer("t3")
                faults.append((time.time(), "trainer t3 added"))
            print(f"  {time.time() - t_start:6.1f}s {faults[-1][1]} at {100 * progress:.0f}% of the tasks", flush=True)
        if killed_node is not None and slot0_moved is None:
            s0 = next((p for p in st.pservers if p.index == 0), None)
            if s0 is not None and s0.node and s0.node != killed_node.id:
                slot0_moved = (time.time(), s0.node)
        if restart_at is not None and time.time() >= restart_at:
            killed_node.start()
            restart_at = None
        time.sleep(0.2)
    wall = time.time() - t_start
    for p in procs.values():
        try:
            p.wait(300)  # a final eval of 10,000 images took 27 s under load
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGUSR1)  # stacks into <id>.log.err
            time.sleep(1)
            p.kill()
    st = raftps.jobs.status(c, job)

    # Training progress from the trainers' step logs.
    steps = []
    by_trainer = {}  # tid -> its step times
    for tid, path in logs.items():
        for line in open(path):
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("ev") == "step":
                steps.append(e["t"])
                by_trainer.setdefault(tid, []).append(e["t"])
    steps.sort()

    fault_times = [t for t, _ in faults]

    def stall(t0):
        """Longest gap between finished steps (any trainer) after t0, within
        20 s and before the next fault; the first step after t0; when the
        longest gap ended (seconds after t0)."""
        end = min([t0 + 20] + [t for t in fault_times if t > t0])
        ts = [t0] + [t for t in steps if t0 < t <= end]
        first = ts[1] - t0 if len(ts) > 1 else float("nan")
        gap, at = max(((b - a_, b - t0) for a_, b in zip(ts, ts[1:])), default=(float("nan"), float("nan")))
        return gap, first, at

    def before_gap(t0):
        """A step's usual time before t0: the median gap between the steps
        of the trainer with the most steps in the 20 s before t0."""
        ts = max(([t for t in v if t0 - 20 <= t < t0] for v in by_trainer.values()), key=len, default=[])
        gaps = sorted(b - a_ for a_, b in zip(ts, ts[1:]))
        return gaps[len(gaps) // 2] if gaps else float("nan")

    def join_gap(tid, t0):
        """An added trainer: when the group re-formed with it (the first
        reset naming it, seconds after t0) and the gap between the last step
        finished before that reset and the first one after it."""
        resets = [json.loads(l) for path in logs.values() for l in open(path) if '"reset"' in l]
        r = min((e["t"] for e in resets if e["t"] > t0 and tid in e["members"]), default=None)
        if r is None:
            return float("nan"), float("nan")
        before = max((t for t in steps if t <= r), default=float("nan"))
        after = min((t for t in steps if t > r), default=float("nan"))
        return r - t0, after - before

    def reform_lines(t0):
        """Per survivor, the first reset after a trainer kill at t0: when its
        collective failed, the re-form's phases, its first step."""
        out = []
        for tid, path in sorted(logs.items()):
            ev = [json.loads(l) for l in open(path) if l.startswith("{")]
            r = next((e for e in ev if e["ev"] == "reset" and e["t"] > t0), None)
            if r is None:
                continue
            f = r.get("form", {})
            st_ = next((e["t"] for e in ev if e["ev"] == "step" and e["t"] > r["t"]), float("nan"))
            fail = f"collective failed +{f['failed_at'] - t0:.2f}s, " if f.get("failed_at") else ""
            phases = ", ".join(f"{k} {f[k]:.2f}s" for k in ("proposed", "ready", "built") if k in f)
            out.append(f"{tid}: {fail}re-formed ({phases} into the form) and reset +{r['t'] - t0:.2f}s, "
                       f"next step done +{st_ - t0:.2f}s; {r['why'][-90:]}")
        return out

    # The reported accuracy: the final parameters, evaluated by the trainer
    # whose last pull saw the highest versions (the last step).
    finals = []
    for tid, path in logs.items():
        for line in open(path):
            if '"final_eval"' in line:
                finals.append(json.loads(line))
    final = max(finals, key=lambda e: sum(e["versions"]), default=None)
    final_acc = final["test_accuracy"] if final else float("nan")
    print(f"\nraftps demo-python: PyTorch CNN on Fashion-MNIST, "
          f"{'elastic allreduce (Gloo on raftps.torch.Store)' if a.mode == 'allreduce' else '2 pservers, sync'}")
    print(f"security:         {'mutual TLS (trainers: trainer certificates for this job)' if admin else 'plaintext (--insecure)'}")
    print(f"pserver lease:    TTL {a.pserver_lease_ttl or '5s (node default)'} (--pserver-lease-ttl: a dead node's "
          f"slots are served elsewhere about 2/3 of it after its last keepalive)")
    opt_desc = f"momentum SGD lr {a.lr} momentum {a.momentum}" if a.optimizer == "momentum" else f"Adam lr {a.lr}"
    print(f"hyperparameters:  batch {a.batch_size} per trainer, {opt_desc}, "
          f"lr_t = lr/(1+{a.lr_decay}t), seed {a.seed}")
    print(f"job:              {job}: {raftps.jobs.state_name(st)} in {wall:.1f}s "
          f"({a.epochs} passes of {a.records} records, {len(steps)} trainer steps)")
    for m in st.metrics:
        print(f"  pass {m.pass_ if hasattr(m, 'pass_') else getattr(m, 'pass')}:         test accuracy "
              f"{100 * m.test_accuracy:.2f}%, test loss {m.test_loss:.4f}, train loss {m.train_loss:.4f}")
    print(f"test accuracy:    {100 * final_acc:.2f}% (target {100 * a.target:.2f}%; final parameters, "
          f"versions {final['versions'] if final else '?'}, evaluated by trainer {final['id'] if final else '?'})")
    stalls = []
    for t, what in faults:
        if what.startswith("SIGKILL"):
            s, first, at = stall(t)
            stalls.append(s)
            print(f"fault:            {what}: training stood still {s:.2f}s (longest gap between finished steps "
                  f"in the 20 s after the kill, ending {at:.2f}s after it; first step {first:.2f}s after the "
                  f"kill; a step took {before_gap(t):.2f}s before it)")
            if a.mode == "allreduce" and "trainer" in what:
                for line in reform_lines(t):
                    print(" " * 18 + line)
            if "slot 0" in what and slot0_moved is not None:
                print(f"                  slot 0 claimed by {slot0_moved[1]} {slot0_moved[0] - t:.2f}s after the kill "
                      f"(seen by 0.2 s polling); the first step came {first - (slot0_moved[0] - t):.2f}s after "
                      f"the claim was seen (the new holder restores the checkpoint and waits out the old holder's "
                      f"fence before serving: the handover rule, pserver/agent)")
        else:
            if a.mode == "allreduce":
                tid = what.split()[1]
                r, gap = join_gap(tid, t)
                print(f"change:           {what}: the group re-formed with it {r:.2f}s after its start (its "
                      f"start-up first); the gap between finished steps around that re-form {gap:.2f}s")
            else:
                print(f"change:           {what}")
    for r in st.restores:
        print(f"restore:          slot {r.slot} version {r.version} from {r.source}: {r.reason}")
    print(f"tasks requeued:   {st.requeued}, task timeouts {st.timeouts}")
    for tid, path in sorted(logs.items()):
        ev = [json.loads(l) for l in open(path) if l.startswith("{")]
        resets = [e for e in ev if e["ev"] == "reset"]
        done = [e for e in ev if e["ev"] == "done"]
        print(f"trainer {tid}:       {sum(1 for e in ev if e['ev'] == 'step')} steps, "
              f"{len(resets)} resets {[len(r['members']) for r in resets]}"
              + (f", {done[0]['tasks']} tasks, {done[0]['stale']} stale pushes" if done else " (killed)"))
    # The final checkpoint, exported as safetensors, in a fresh model.
    exported_acc = None
    out = os.path.join(work, job + ".safetensors")
    # The final state is the complete version with the highest step (a
    # rollback relabels versions, so the highest version number need not be it).
    version = []
    r = subprocess.run([bin_path, "checkpoint", "list", job, "-o", "json", "--endpoints", eps, *cli_tls],
                       capture_output=True, text=True)
    try:
        vs = json.loads(r.stdout)
        vs = vs.get("versions", vs) if isinstance(vs, dict) else vs
        done = [v for v in vs if v.get("complete")]
        best = max(done, key=lambda v: (v.get("step", 0), v.get("version", 0)))
        version = [str(best["version"])]
        print(f"checkpoints:      {len(vs)} versions; final: version {best['version']} at step {best.get('step')}")
    except (ValueError, KeyError, TypeError) as e:
        print(f"checkpoints:      list failed ({e}): {r.stdout.strip()[:200]} {r.stderr.strip()[:200]}")
    r = subprocess.run([bin_path, "checkpoint", "export", job, *version, "--format", "safetensors", "--out", out,
                        "--endpoints", eps, *cli_tls], capture_output=True, text=True)
    if a.mode == "allreduce":
        print("exported:         n/a (allreduce mode: the model lives on the trainers, the pservers' copy is unused)")
    elif r.returncode == 0:
        from raftps.checkpoint import load_state_dict
        fresh = MODELS[a.model]()
        load_state_dict(out, fresh)
        xt, yt = load("test")
        exported_acc = evaluate(fresh, xt, yt)[1]
        print(f"exported:         {out}: fresh model test accuracy {100 * exported_acc:.2f}% "
              f"(reported {100 * final_acc:.2f}%, diff {100 * abs(exported_acc - final_acc):.2f} pp)")
    else:
        print(f"exported:         checkpoint export failed: {r.stderr.strip()}")
    summary = {"job": job, "mode": a.mode, "faults": not a.no_faults, "tls": admin is not None,
               "pserver_lease_ttl": a.pserver_lease_ttl or "5s", "test_accuracy": final_acc, "exported_accuracy": exported_acc,
               "stalls": stalls, "seconds": wall, "steps": len(steps), "requeued": st.requeued,
               "restores": len(st.restores)}
    print("summary-json: " + json.dumps(summary))
    c.close()
    localcluster.stop(nodes)
    ok = raftps.jobs.state_name(st) == "JOB_SUCCEEDED" and final_acc >= a.target
    sys.exit(0 if ok else 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("demo", "local", "train"):
        p = sub.add_parser(name)
        p.add_argument("--epochs", type=int, default=None, help="passes (default: 4 in ps mode, 5 in allreduce mode)")
        p.add_argument("--model", choices=sorted(MODELS), default="cnn", help="cnn: 421k params; small: 18k")
        p.add_argument("--records", type=int, default=60000)
        p.add_argument("--batch-size", type=int, default=64, help="per trainer (local: twice this)")
        p.add_argument("--optimizer", choices=["momentum", "adam"], default=None,
                       help="default: momentum")
        p.add_argument("--lr", type=float, default=None, help="default: 0.1 (momentum), 0.001 (adam)")
        p.add_argument("--momentum", type=float, default=0.9)
        p.add_argument("--lr-decay", type=float, default=None,
                       help="lr_t = lr / (1 + lr_decay * t), t = steps before (the pservers' schedule); "
                            "default 0.002 (momentum), 0.001 (adam)")
        p.add_argument("--seed", type=int, default=1)
        p.add_argument("--mode", choices=["ps", "allreduce"], default="ps",
                       help="ps: pservers apply the updates; allreduce: Gloo group of the trainers (elastic)")
    d = sub.choices["demo"]
    d.add_argument("--no-faults", action="store_true", help="the baseline run without faults")
    d.add_argument("--insecure", action="store_true", help="plaintext nodes (--insecure) instead of mutual TLS")
    d.add_argument("--pserver-lease-ttl", default="3s",
                   help="the nodes' --pserver-lease-ttl (\"\": the node default, 5s); bounds a slot's failover")
    d.add_argument("--target", type=float, default=0.90)
    d.add_argument("--records-per-task", type=int, default=1000)
    d.add_argument("--checkpoint-steps", type=int, default=100)
    d.add_argument("--bin", default="")
    d.add_argument("--data-dir", default="")
    d.add_argument("--name", default="")
    t = sub.choices["train"]
    t.add_argument("--endpoints", required=True)
    t.add_argument("--job", required=True)
    t.add_argument("--id", required=True)
    t.add_argument("--min-trainers", type=int, default=1)
    a = ap.parse_args()
    # Per-mode defaults (MODE_DEFAULTS): `local --mode allreduce` runs the
    # allreduce demo's hyperparameters in one process.
    for k, v in MODE_DEFAULTS[a.mode].items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    if a.lr is None:
        a.lr = 0.001 if a.optimizer == "adam" else 0.1
    if a.lr_decay is None:
        a.lr_decay = 0.001 if a.optimizer == "adam" else 0.002
    {"demo": cmd_demo, "local": cmd_local, "train": cmd_train}[a.cmd](a)


if __name__ == "__main__":
    main()
