"""The allreduce group's membership rules (raftps.torch.allreduce.
Rendezvous) with in-process trainer sessions: max_np keeps the newest
registration out as a spare; a member that is lost is blacklisted with a
cooldown in the generation record, stays out while it lasts, then joins
(ranks in registration order)."""

import threading
import time
import uuid

import pytest

from raftps import errors
from raftps.tasks import TrainerSession
from raftps.torch.allreduce import Rendezvous


def form_in_thread(r, failure=False):
    out = {}

    def run():
        try:
            out["group"] = r.form(failure)
        except Exception as e:  # noqa: BLE001 (asserted by the caller)
            out["error"] = e
    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th, out


def test_bounds_are_checked(client):
    s = TrainerSession(client, f"rdzv-{uuid.uuid4().hex[:6]}", "x", ttl=2)
    try:
        with pytest.raises(errors.InvalidArgument, match="min_np"):
            Rendezvous(s, min_np=3, max_np=2)
    finally:
        s.close()


def test_max_np_spare_blacklist_cooldown_and_rejoin(client):
    job = f"rdzv-{uuid.uuid4().hex[:6]}"
    sa = TrainerSession(client, job, "a", ttl=1)
    sb = TrainerSession(client, job, "b", ttl=1)
    ra, rb = Rendezvous(sa, max_np=1, cooldown=3), Rendezvous(sb, max_np=1, cooldown=3)
    sa2 = None
    try:
        ga = ra.form(False)
        assert (ga.gen, ga.members, ga.rank, ga.size) == (1, ["a"], 0, 1)
        # b, the newer registration, is a spare while the group is full.
        th, out = form_in_thread(rb)
        th.join(3)
        assert th.is_alive() and not out, out
        assert not ra.hosts_updated()
        # a is lost (its registration goes): b forms generation 2 alone
        # and the record blacklists a.
        sa.close()
        th.join(60)
        assert not th.is_alive() and "group" in out, out
        gb = out["group"]
        assert gb.members == ["b"] and gb.gen == 2 and gb.rank == 0
        rec, _ = rb._read()
        until, losses, suspected = rec["blacklist"]["a"]
        assert losses == 1 and until > time.time() - 1
        assert suspected == 0  # lost with its registration, not suspected while registered
        # a comes back within its cooldown: it is not eligible until then.
        sa2 = TrainerSession(client, job, "a", ttl=1)
        rb.max_np = None
        ra2 = Rendezvous(sa2, cooldown=3)
        th, out = form_in_thread(ra2)
        th.join(0.5)
        rec, _ = rb._read()
        if time.time() < until:
            assert rec["gen"] == 2 and th.is_alive(), (rec, out)
        # After the cooldown a proposes generation 3 with b (b is older:
        # rank 0); b, whose group now is not the newest, re-forms too.
        deadline = time.monotonic() + 60
        while not rb.hosts_updated():
            assert time.monotonic() < deadline, "b never saw a's proposal"
            time.sleep(0.1)
        gb3 = rb.form(False)
        th.join(60)
        assert "group" in out, out
        ga3 = out["group"]
        assert time.time() >= until
        assert gb3.members == ga3.members == ["b", "a"] and gb3.gen == ga3.gen == 3
        assert (gb3.rank, ga3.rank) == (0, 1)
        ra2.close()
    finally:
        for r in (ra, rb):
            r.close()
        for s in (sa, sb, sa2):
            if s is not None:
                s.close()


def test_false_suspicion_is_fenced_then_rejoins(client):
    """A member suspects a live one (its Gloo pair broke, e.g. a
    partition): the next generation leaves the suspect out at once (no
    lease expiry: 30 s leases here), its registration marked in the
    record; the suspect is fenced out of that generation, re-registers
    and, after its cooldown, proposes a generation with itself, which the
    others join."""
    job = f"rdzv-{uuid.uuid4().hex[:6]}"
    sa, sb, sc = (TrainerSession(client, job, t, ttl=30) for t in "abc")
    ra, rb, rc = (Rendezvous(s, cooldown=5) for s in (sa, sb, sc))
    try:
        forms = [form_in_thread(r) for r in (ra, rb, rc)]
        for th, out in forms:
            th.join(120)
            assert "group" in out, out
        assert [out["group"].members for _, out in forms] == [["a", "b", "c"]] * 3
        def registration(t):  # the mod revision of t's key
            return client.range_pb(f"/jobs/{job}/trainers/{t}").kvs[0].mod_revision

        reg_c = registration("c")
        # a's collective failed and its probe named c; b learns of the
        # failure generation; c, alive, is in a failed collective too.
        ra.suspects = ["c"]
        forms = [form_in_thread(r, failure=True) for r in (ra, rb, rc)]
        for th, out in forms[:2]:
            th.join(60)
            assert "group" in out, out
            assert (out["group"].gen, out["group"].members) == (2, ["a", "b"])
        rec, _ = ra._read()
        assert rec["failure"] and rec["blacklist"]["c"][1:] == [1, reg_c], rec
        # c was fenced out of generation 2 and re-registered.
        deadline = time.monotonic() + 60
        while registration("c") == reg_c:
            assert time.monotonic() < deadline, "c never re-registered"
            time.sleep(0.1)
        # After its cooldown c proposes generation 3 with itself; a and b
        # see a newer generation and re-form.
        while not (ra.hosts_updated() and rb.hosts_updated()):
            assert time.monotonic() < deadline, "a and b never saw c's proposal"
            time.sleep(0.1)
        assert time.time() >= rec["blacklist"]["c"][0]
        again = [form_in_thread(r) for r in (ra, rb)]
        for th, out in again + forms[2:]:
            th.join(60)
            assert "group" in out, out
            assert (out["group"].gen, out["group"].members) == (3, ["a", "b", "c"])
    finally:
        for r in (ra, rb, rc):
            r.close()
        for s in (sa, sb, sc):
            s.close()


def test_lease_lapse_while_forming(client):
    """A trainer's lease lapses between form()'s read of the trainers and
    its write of the ready key (seen in the demo under load: the write
    failed with NotFound and the trainer died). form() waits for the
    session to re-register on a new lease and forms the group."""
    job = f"rdzv-{uuid.uuid4().hex[:6]}"
    sa = TrainerSession(client, job, "a", ttl=3)
    ra = Rendezvous(sa)
    try:
        before = ra._live()
        reads = []

        def live():  # the first read is the one from before the lapse
            reads.append(1)
            return before if len(reads) == 1 else Rendezvous._live(ra)

        ra._live = live
        client.lease_revoke(sa.lease_id)
        g = ra.form(False)
        assert (g.gen, g.members, g.rank) == (1, ["a"], 0)
        assert len(reads) > 1
        assert client.range_pb(f"/jobs/{job}/trainers/a").kvs, "a is registered again"
    finally:
        ra.close()
        sa.close()


def test_update_applied_while_idle_survives_a_restore(client):
    """An update a member applies without a batch of its own (idle(): the
    master said WAIT; drain(): its job is over) is saved as a commit would
    be. Else a restore took the member back before it, and as rank 0 its
    sync() took the whole group back while the others' task positions
    stayed committed after it: their batches' updates lost."""
    import torch

    from raftps.torch import elastic
    from raftps.torch.allreduce import AllreduceOptimizer

    s = TrainerSession(client, f"rdzv-{uuid.uuid4().hex[:6]}", "a", ttl=5)
    r = Rendezvous(s)
    try:
        r.form(False)
        model = torch.nn.Linear(2, 1, bias=False)
        with torch.no_grad():
            model.weight.zero_()
        opt = AllreduceOptimizer(model, s, optimizer=torch.optim.SGD(model.parameters(), lr=1.0), rendezvous=r)
        state = elastic.TorchState(model, opt)
        # The group's step: another member's batch of 2 examples, whose
        # example-weighted gradient sums to 2 per element.
        opt._collective = lambda examples, active, grads: (torch.full((2,), 2.0), 2.0, 0.0)
        for name, call in (("idle", lambda: opt.idle(0.0)), ("drain", opt.drain)):
            before = model.weight.detach().clone()
            call()
            after = model.weight.detach().clone()
            assert torch.equal(after, before - 1.0), (name, before, after)
            state.restore()
            assert torch.equal(model.weight.detach(), after), f"{name}: restore went back to {model.weight}"
    finally:
        r.close()
        s.close()


def test_task_batches_restore_between_tasks_goes_to_task_start():
    """A position saved between tasks (TorchState's first save, or one
    after an idle update) restores a task started since to its start: the
    batches it yielded were never committed."""
    import types

    import numpy as np

    from raftps.tasks import TaskBatches
    b = TaskBatches(types.SimpleNamespace(spec=types.SimpleNamespace(batch_size=2)))
    d = b.state_dict()
    b.task = types.SimpleNamespace(id=7, epoch=1, records=np.arange(6), loss_sum=0.9, examples=2)
    b.cursor = 4
    b.load_state_dict(d)
    assert (b.cursor, b.task.loss_sum, b.task.examples) == (0, 0.0, 0)
