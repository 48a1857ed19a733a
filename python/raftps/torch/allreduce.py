"""Elastic allreduce on raftps (Horovod Elastic's allreduce mode): Gloo
process groups formed on :class:`raftps.torch.Store`, membership from
Raft.

    session = TrainerSession(client, "mnist")              # registered under a lease
    opt = DistributedOptimizer(model, session=session, mode="allreduce")
    state = elastic.TorchState(model, opt, batches=TaskBatches(TaskSource(...)))

    @elastic.run
    def train(state):
        for idx in state.batches:
            opt.zero_grad(); loss_fn(model(X[idx]), Y[idx]).backward()
            opt.step(examples=len(idx)); state.commit()

Membership. The group's members are the trainers registered under
/jobs/<job>/trainers/ (each on its :class:`raftps.tasks.TrainerSession`
lease), oldest registration first, at most ``max_np`` of them, without
blacklisted ones; a group forms only with at least ``min_np``. A
generation record, ``/torch/store/<job>/elastic/gen`` (JSON ``{"gen",
"members", "failure", "blacklist"}``), names each group; it changes only
by compare-and-swap on its mod revision, so every trainer agrees on the
members of generation ``gen``. The members of a generation put a ready
key each, then build a Gloo group on a Store under
``/torch/store/<job>/gloo/<gen>/``; rank i is ``members[i]`` (rank 0 the
oldest survivor, whose state ``sync()`` broadcasts).

Changes. A trainer that joins (or ends its cooldown) proposes the next
generation. Each step's allreduce carries whether any member saw a
change, so every member raises :class:`HostsUpdatedInterrupt` at the
same ``state.commit()`` (no restore; Horovod agrees the same way) and
they form the new generation together. A member that dies inside a
collective: the collective is abandoned (never on Gloo's timeout) and
the step raises :class:`GroupChanged` (a TrainerFailure: the last commit
is restored). Two detectors:

- A process that dies closes its sockets and Gloo reports the closed
  connection (within milliseconds). The member that sees it asks each
  peer's Gloo pair which ones carry the error (a send on a broken pair
  fails at once, naming it) and proposes the next generation without
  those members right away, their registrations marked suspected in the
  record's blacklist (``[until, losses, registration]``: the mod revision
  of the suspect's key). The other members abandon their collectives on
  the failure generation (the watch) and join it.
- A hung member, or one on a host that went away: its raftps lease
  expires and its registration goes (the watch); after a failure a
  member waits up to two lease TTLs for that before proposing the same
  members again.

A suspicion can be false (a partition): the suspect is alive and is
fenced out all the same, since the generation record changes only by
compare-and-swap and the new group's Store prefix names the generation.
It learns it is out from the record, registers anew
(:meth:`raftps.tasks.TrainerSession.reregister`: a new mod revision, no
longer the suspected one, and the newest registration, so it is not the
rank 0 whose stale state the group would take) and proposes a generation
with itself when its cooldown ends. A member lost either way is blacklisted for ``cooldown``
seconds, doubled per loss up to ``cooldown_max``.

Data. Each trainer takes its own tasks from the master (the task queue
stays the data source). Every step allreduces ``sum(grad * examples)``
with the examples and an active flag: a trainer without a batch (the
master said WAIT) joins the step with zero examples, one whose job is
over keeps joining with active 0 until every member is over. Gradients
are averaged weighted by examples, as the pservers' sync steps.
"""

from __future__ import annotations

import ctypes
import datetime
import io
import json
import threading
import time
from typing import Iterable

import torch
import torch.distributed as dist

from raftps import errors
from raftps.tasks import trainer_prefix
from raftps.torch.elastic import HostsUpdatedInterrupt, TrainerFailure
from raftps.torch.optimizer import GradScaled
from raftps.torch.store import Store, store_prefix



def _abandon(pg) -> None:
    """Leaks a Gloo group whose collective may still be blocked on a peer:
    its destructor (at the last reference, or at interpreter exit) would
    join its threads, which wait out Gloo's timeout. The OS reclaims it at
    exit."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(pg))

# The message of c10d Work.wait(timeout) when the timeout passes first.
_WAIT_TIMED_OUT = "Operation timed out!"

# The tag of _probe's sends (no collective's: those use tag 0 and c10d's
# own sequence of slots).
_PROBE_TAG = 0x7270


class GroupChanged(TrainerFailure):
    """A collective was abandoned: a member died (or the group was
    replaced) mid-collective. elastic.run restores the last commit."""


class Group:
    """One generation's Gloo group: ``gen``, ``members``, ``rank``, ``size``."""

    def __init__(self, gen: int, members: list[str], rank: int, pg, store: Store):
        self.gen, self.members, self.rank, self.pg, self.store = gen, members, rank, pg, store
        self.size = len(members)


class Rendezvous:
    """The generations of a job's allreduce group (see the module doc).

    Args:
        session: this trainer's :class:`raftps.tasks.TrainerSession`.
        min_np / max_np: bounds on the group's size (max_np None: no bound).
        cooldown / cooldown_max: seconds a member lost mid-training stays
            out, doubled per loss.
        timeout: Gloo's own timeout for a collective, seconds: a backstop
            only (raftps's watch detects dead members), longer than any
            pause of a member between steps (e.g. an eval task); torch's
            default.
        form_timeout: seconds ``form`` waits for min_np trainers
            (DeadlineExceeded after it).
    """

    def __init__(self, session, min_np: int = 1, max_np: int | None = None, cooldown: float = 1.0,
                 cooldown_max: float = 60.0, timeout: float = 1800.0, form_timeout: float = 300.0):
        if min_np < 1 or (max_np is not None and max_np < min_np):
            raise errors.InvalidArgument(f"elastic: min_np {min_np}, max_np {max_np}: want 1 <= min_np <= max_np")
        self.session, self.client, self.job, self.me = session, session.client, session.job, session.id
        self.min_np, self.max_np = min_np, max_np
        self.cooldown, self.cooldown_max = cooldown, cooldown_max
        self.timeout, self.form_timeout = timeout, form_timeout
        self.prefix = store_prefix(self.job)
        self.genkey = (self.prefix + "elastic/gen").encode()
        self.group: Group | None = None
        self.blacklist: dict[str, list] = {}
        self.forms = 0
        # Members whose Gloo pairs broke in the last failed collective
        # (see _probe), proposed out of the next generation.
        self.suspects: list[str] = []
        # Phases of the last form(), seconds from its start: "proposed",
        # "ready", "built" (absent: not reached); "failed_at" the time.time()
        # of the collective's failure that started it (0: none).
        self.form_times: dict[str, float] = {}
        self._failed_at = 0.0
        self._cond = threading.Condition()
        self._latest = (0, False)  # (gen, failure) of the newest record seen
        self._events = 0
        self._closed = False
        rec, rev = self._read()
        self._note(rec)
        self._watch = self.client.watch(self.prefix + "elastic/", prefix=True, start_revision=rev + 1)
        threading.Thread(target=self._follow, name="raftps-elastic", daemon=True).start()

    # -- the record ------------------------------------------------------

    def _read(self) -> tuple[dict, int]:
        """The generation record and its mod revision (0: none yet); with
        the header revision when the record is missing."""
        resp = self.client.range_pb(self.genkey)
        if not resp.kvs:
            return {"gen": 0, "members": [], "blacklist": {}}, resp.header.revision
        kv = resp.kvs[0]
        rec = json.loads(kv.value)
        rec["_mod"] = kv.mod_revision
        return rec, resp.header.revision

    def _note(self, rec: dict) -> None:
        with self._cond:
            if rec["gen"] > self._latest[0]:
                self._latest = (rec["gen"], bool(rec.get("failure")))
            self.blacklist = rec.get("blacklist", {})
            self._events += 1
            self._cond.notify_all()

    def _follow(self) -> None:
        try:
            for ev in self._watch:
                if ev.kv.key == self.genkey and ev.type == "PUT":
                    self._note(json.loads(ev.kv.value))
                else:
                    with self._cond:
                        self._events += 1
                        self._cond.notify_all()
        except (errors.RaftpsError, ValueError):
            pass

    def _live(self) -> dict[str, int]:
        """Registered trainers and the mod revisions of their keys, oldest
        registration first (Raft's order)."""
        p = trainer_prefix(self.job)
        resp = self.client.range_pb(p, prefix=True, keys_only=True)
        kvs = sorted(resp.kvs, key=lambda kv: kv.create_revision)
        return {kv.key.decode()[len(p):]: kv.mod_revision for kv in kvs}

    def _blacklisted(self, name: str, now: float, registration: int) -> bool:
        """Whether trainer ``name``, registered at mod revision
        ``registration``, is out: in its cooldown, or that very
        registration is suspected dead."""
        b = self.blacklist.get(name)
        return b is not None and (b[0] > now or (len(b) > 2 and b[2] == registration))

    def _wait_change(self, seen: int, sgen: int, until: float) -> None:
        """Waits for an elastic key event or a trainer-set change (or 0.1 s:
        a cooldown may end)."""
        with self._cond:
            end = min(until, time.monotonic() + 0.1)
            while self._events == seen and self.session.generation == sgen:
                left = end - time.monotonic()
                if left <= 0:
                    return
                self._cond.wait(left)

    # -- forming ------------------------------------------------------------

    def form(self, failure: bool) -> Group:
        """Joins the newest generation if it is newer than the current
        group's and its members are the trainers eligible now, else
        proposes the next one (``failure``: marked as replacing a broken
        group, so members still inside a collective abandon it). Returns
        the group this trainer is a member of."""
        old = self.group
        # Every member resets together (the step's agreed flag, or a
        # failure), so the next group is always a newer generation.
        after = old.gen if old is not None else 0
        deadline = time.monotonic() + self.form_timeout
        # After a failure the lost member's registration is usually about
        # to go with its lease: wait up to two lease TTLs for that before
        # proposing the same members again (which would only cost a round).
        patience = time.monotonic() + 2 * self.session.ttl if failure else 0.0
        suspects = list(self.suspects) if failure else []
        suspected: dict[str, int] | None = None  # suspect -> its registration when first read
        t0, times = time.monotonic(), {"failed_at": self._failed_at if failure else 0.0}
        self.form_times = times
        while True:
            if time.monotonic() > deadline:
                raise errors.DeadlineExceeded(f"elastic: no group of >= {self.min_np} trainers formed "
                                              f"within {self.form_timeout:g}s")
            with self._cond:
                seen = self._events
            sgen = self.session.generation
            rec, _ = self._read()
            self._note(rec)
            live = self._live()
            now = time.time()
            mine = rec.get("blacklist", {}).get(self.me)
            if mine is not None and len(mine) > 2 and mine[2] == live.get(self.me):
                # Suspected dead while alive (e.g. a partition): fenced out
                # of the generation; a new registration ends the suspicion.
                try:
                    self.session.reregister()
                except errors.Unavailable:  # its lease lapsed: being re-registered anyway
                    self._wait_change(seen, sgen, deadline)
                continue
            # Suspects from our own failed collective, while the suspected
            # registration lasts.
            if suspected is None:
                suspected = {m: live[m] for m in suspects if m in live}
            out = [m for m, reg in suspected.items() if live.get(m) == reg]
            want = [m for m, reg in live.items() if not self._blacklisted(m, now, reg) and m not in out][:self.max_np]
            g = rec["gen"]
            if g <= after or set(rec["members"]) != set(want):
                if g <= after and set(rec["members"]) == set(want) and time.monotonic() < patience:
                    self._wait_change(seen, sgen, patience)
                    continue
                if len(want) < self.min_np or self.me not in want:
                    self._wait_change(seen, sgen, deadline)
                    continue
                # Our proposal carries our ready key: if it wins, on to
                # the others' (no re-read: the record is ours).
                try:
                    rec = self._propose(rec, live, want, failure and g <= after, now, out)
                except errors.NotFound:  # our lease lapsed: the session re-registers
                    self._wait_change(seen, sgen, deadline)
                    continue
                times.setdefault("proposed", time.monotonic() - t0)
                if rec is None:
                    continue
                g = rec["gen"]
            elif self.me not in rec["members"]:
                self._wait_change(seen, sgen, deadline)  # a spare, or in cooldown
                continue
            else:
                try:
                    self.client.put(self._ready(g) + self.me, b"1", lease=self._lease())
                except errors.NotFound:  # as above
                    self._wait_change(seen, sgen, deadline)
                    continue
            if not self._wait_ready(self._ready(g), rec["members"], g, deadline):
                continue
            times["ready"] = time.monotonic() - t0
            grp = self._build(g, rec["members"])
            times["built"] = time.monotonic() - t0
            self.suspects = []
            return grp

    def _lease(self) -> int:
        """The session's lease, for our ready keys (they go with us);
        NotFound while the session re-registers on a new one (its lease
        lapsed: our registration went too, so the group re-forms)."""
        lease = self.session.lease_id
        if lease == 0:
            raise errors.NotFound(f"elastic: trainer {self.me}: its lease lapsed, being re-registered")
        return lease

    def _ready(self, g: int) -> str:
        """The prefix of generation g's ready keys (one per member)."""
        return self.prefix + f"elastic/ready/{g}/"

    def _propose(self, rec: dict, live: dict[str, int], want: list[str], failure: bool, now: float,
                 suspects: list[str]) -> dict | None:
        """Proposes generation rec["gen"] + 1 of ``want`` (with our ready
        key) by compare-and-swap on rec's mod revision; returns the new
        record, None if another proposal won."""
        bl = {k: v for k, v in rec.get("blacklist", {}).items() if v[0] > now or k in live}

        def lost(m: str, registration: int) -> None:  # blacklist it with a doubling cooldown
            n = bl.get(m, [0, 0])[1] + 1
            bl[m] = [now + min(self.cooldown * 2 ** (n - 1), self.cooldown_max), n, registration]

        for m in rec["members"]:
            if m not in live:
                lost(m, 0)
        for m in suspects:
            if bl.get(m, [0, 0, 0])[2:] != [live[m]]:  # not yet marked by this form's earlier proposals
                lost(m, live[m])
        new = {"gen": rec["gen"] + 1, "members": want, "failure": failure, "blacklist": bl}
        c = self.client
        resp = c.txn([c.cmp_mod_revision(self.genkey, "==", rec.get("_mod", 0))],
                     [c.op_put(self.genkey, json.dumps(new).encode()),
                      c.op_put(self._ready(new["gen"]) + self.me, b"1", lease=self._lease())])
        if not resp.succeeded:
            return None
        new["_mod"] = resp.header.revision
        self._note(new)
        return new

    def _wait_ready(self, ready: str, members: list[str], g: int, deadline: float) -> bool:
        """Waits for every member's ready key; False if the generation or
        the trainer set changed first."""
        keys = [(ready + m).encode() for m in members]
        while True:
            with self._cond:
                seen = self._events
            sgen = self.session.generation
            c = self.client
            resp = c.txn(success=[c.op_get(k) for k in keys])
            if all(r.response_range.kvs for r in resp.responses):
                return True
            with self._cond:
                if self._latest[0] > g:
                    return False
            if any(m not in self.session.members() for m in members):
                return False
            if time.monotonic() > deadline:
                return False
            self._wait_change(seen, sgen, deadline)

    def _build(self, g: int, members: list[str]) -> Group:
        store = Store(self.client, prefix=f"{self.prefix}gloo/{g}/", ttl=max(self.session.ttl, 5),
                      timeout=datetime.timedelta(seconds=self.timeout))
        rank = members.index(self.me)
        pg = dist.ProcessGroupGloo(store, rank, len(members), datetime.timedelta(seconds=self.timeout))
        old, self.group = self.group, Group(g, list(members), rank, pg, store)
        if old is not None:
            _abandon(old.pg)
            try:
                old.store.close()
            except errors.RaftpsError:
                pass
        self.forms += 1
        return self.group

    # -- while training -----------------------------------------------------

    def hosts_updated(self) -> bool:
        """Whether the group should re-form: a newer generation was
        proposed, a member left, or an eligible trainer waits to join."""
        grp = self.group
        with self._cond:
            if self._latest[0] > grp.gen:
                return True
        reg = self.session.members()
        if any(m not in reg for m in grp.members):
            return True
        if self.max_np is None or grp.size < self.max_np:
            now = time.time()
            return any(m not in grp.members and not self._blacklisted(m, now, self.session.registration(m))
                       for m in reg)
        return False

    def broken(self) -> bool:
        """Whether a collective of the group may never complete: a member's
        registration is gone, or a member proposed a generation after a
        failure."""
        grp = self.group
        with self._cond:
            if self._latest[0] > grp.gen and self._latest[1]:
                return True
        reg = self.session.members()
        return any(m not in reg for m in grp.members)

    def wait(self, work) -> None:
        """Waits for a Gloo work; GroupChanged if it failed or the group
        broke meanwhile (the work is then abandoned). A failed work's
        broken pairs name the members in ``suspects``."""
        while True:
            try:
                work.wait(datetime.timedelta(milliseconds=50))
                return
            except RuntimeError as e:
                # c10d's Work.wait raises exactly this when the wait's own
                # timeout passes (the work may complete right after it:
                # is_completed() cannot tell that from a failure); any
                # other error is the collective's own.
                if str(e) != _WAIT_TIMED_OUT:
                    self._failed_at = time.time()
                    self.suspects = self._probe()
                    raise GroupChanged(f"elastic: collective of generation {self.group.gen} failed: {e} "
                                       f"(broken connections to {self.suspects or 'none'})") from None
            if self.broken():
                self._failed_at = time.time()
                self.suspects = []
                raise GroupChanged(f"elastic: generation {self.group.gen} lost a member mid-collective")

    def _probe(self) -> list[str]:
        """The members whose Gloo pair with us is broken: a send on a pair
        that saw its connection close or reset raises that error at once
        (tcp::Pair keeps it); on a live pair it only posts (the send is
        never received: the group is abandoned)."""
        grp, probe, out = self.group, torch.zeros(1), []
        for r, m in enumerate(grp.members):
            if r == grp.rank:
                continue
            try:
                grp.pg.send([probe], r, _PROBE_TAG)
            except RuntimeError:
                out.append(m)
        return out

    def close(self) -> None:
        self._closed = True
        self._watch.cancel()
        if self.group is not None:
            try:
                self.group.store.close()
            except errors.RaftpsError:
                pass


_default: Rendezvous | None = None


def init(session, **kw) -> Rendezvous:
    """Forms this trainer's first group (``hvd.init()``); keyword arguments
    as :class:`Rendezvous`. Returns the rendezvous, also the module's
    default for rank/size/allreduce/broadcast_*."""
    global _default
    r = Rendezvous(session, **kw)
    r.form(failure=False)
    _default = r
    return r


def _r(r: Rendezvous | None) -> Rendezvous:
    r = r or _default
    if r is None or r.group is None:
        raise errors.FailedPrecondition("elastic: call raftps.torch.allreduce.init(session) first")
    return r


def rank(r: Rendezvous | None = None) -> int:
    """This trainer's rank in the current generation (0: oldest member)."""
    return _r(r).group.rank


def size(r: Rendezvous | None = None) -> int:
    """How many trainers the current generation has."""
    return _r(r).group.size


def allreduce(t: torch.Tensor, average: bool = True, r: Rendezvous | None = None) -> torch.Tensor:
    """The sum (``average``: mean) of ``t`` over the group, as a new tensor;
    GroupChanged if the group broke."""
    r = _r(r)
    out = t.detach().clone().contiguous()
    r.wait(r.group.pg.allreduce([out]))
    if average:
        out /= r.group.size
    return out


def _broadcast_tensors(tensors: Iterable[torch.Tensor], root_rank: int, r: Rendezvous) -> None:
    ts = [t for t in tensors]
    if not ts:
        return
    flat = torch.cat([t.detach().reshape(-1).to(torch.float32) for t in ts])
    r.wait(r.group.pg.broadcast(flat, root_rank))
    off = 0
    with torch.no_grad():
        for t in ts:
            n = t.numel()
            t.copy_(flat[off:off + n].view_as(t).to(t.dtype))
            off += n


def broadcast_parameters(params, root_rank: int = 0, r: Rendezvous | None = None) -> None:
    """Copies root_rank's tensors into everyone's, in place: ``params`` is a
    state_dict or ``named_parameters()`` (``hvd.broadcast_parameters``)."""
    items = params.items() if hasattr(params, "items") else params
    _broadcast_tensors([t for _, t in sorted(items, key=lambda kv: kv[0])], root_rank, _r(r))


def broadcast_object(obj, root_rank: int = 0, r: Rendezvous | None = None):
    """root_rank's picklable ``obj`` on every member (torch.save bytes)."""
    r = _r(r)
    buf = io.BytesIO()
    if r.group.rank == root_rank:
        torch.save(obj, buf)
    n = torch.tensor([buf.getbuffer().nbytes], dtype=torch.int64)
    r.wait(r.group.pg.broadcast(n, root_rank))
    data = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8) if r.group.rank == root_rank \
        else torch.empty(int(n.item()), dtype=torch.uint8)
    r.wait(r.group.pg.broadcast(data, root_rank))
    return torch.load(io.BytesIO(data.numpy().tobytes()))


def broadcast_optimizer_state(optimizer: torch.optim.Optimizer, root_rank: int = 0,
                              r: Rendezvous | None = None) -> None:
    """Loads root_rank's optimizer state_dict into everyone's optimizer
    (``hvd.broadcast_optimizer_state``)."""
    optimizer.load_state_dict(broadcast_object(optimizer.state_dict(), root_rank, r))


def local_optimizer(spec, params) -> torch.optim.Optimizer:
    """The torch optimizer of a job spec's ``optimizer`` (sgd, momentum,
    adam, adagrad; learning_rate, momentum, nesterov, betas, epsilon,
    weight_decay), as the pservers apply it in PS mode; lr_decay is
    :class:`AllreduceOptimizer`'s schedule."""
    o = spec.optimizer
    name, lr, wd = (o.name or "sgd").lower(), o.learning_rate, o.weight_decay
    if name in ("sgd", "momentum"):
        return torch.optim.SGD(params, lr=lr, momentum=o.momentum, nesterov=o.nesterov and o.momentum > 0,
                               weight_decay=wd)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, betas=(o.beta1 or 0.9, o.beta2 or 0.999), eps=o.epsilon or 1e-8,
                                weight_decay=wd)
    if name == "adagrad":
        return torch.optim.Adagrad(params, lr=lr, eps=o.epsilon or 1e-10, weight_decay=wd)
    raise errors.InvalidArgument(f"allreduce mode: optimizer {o.name!r} unknown (sgd, momentum, adam, adagrad)")


class AllreduceOptimizer(GradScaled):
    """``DistributedOptimizer(model, session=..., mode="allreduce")``: after
    ``loss.backward()``, ``step()`` averages the gradients over the group
    (weighted by ``examples``) and applies the local ``optimizer`` (default:
    the job spec's, see :func:`local_optimizer`).

    ``rank``/``size`` are the group's; ``sync()`` broadcasts rank 0's model
    and optimizer state; the elastic hooks (``hosts_updated``, ``reform``)
    serve :class:`raftps.torch.elastic.TorchState`. It hooks the session's
    task source (``attach(batches)``) so a trainer without a batch still
    joins every step.
    """

    def __init__(self, model: torch.nn.Module, session, optimizer: torch.optim.Optimizer | None = None,
                 examples: int = 1, spec=None, rendezvous: Rendezvous | None = None, **rendezvous_kw):
        self.model, self.session = model, session
        self.named = [(n, p) for n, p in model.named_parameters()]
        if not self.named:
            raise errors.InvalidArgument("DistributedOptimizer: no parameters")
        super().__init__([p for _, p in self.named], {"grad_scale": 1.0})
        if optimizer is None:
            if spec is None:
                from raftps import jobs
                spec = jobs.status(session.client, session.job).spec
            optimizer = local_optimizer(spec, [p for _, p in self.named])
            self.lr_decay = spec.optimizer.lr_decay
        else:
            self.lr_decay = 0.0
        self.local = optimizer
        self.base_lr = [g["lr"] for g in optimizer.param_groups]
        self.t = 0  # updates applied (the pservers' step): lr_t = lr / (1 + lr_decay * t)
        self.examples = examples
        self.steps = 0
        self.empty_steps = 0
        self.stale = 0
        self.updated = False  # the group agreed to re-form (see _collective)
        # Called after an update applied in idle() or drain() (no batch of
        # ours, so no user commit follows): elastic.TorchState sets its save.
        self.on_idle_update = None
        self.rdzv = rendezvous or init(session, **rendezvous_kw)

    # torch.optim.Optimizer's state is the local optimizer's and the step.
    def state_dict(self):
        return {"local": self.local.state_dict(), "t": self.t}

    def load_state_dict(self, d) -> None:
        self.local.load_state_dict(d["local"])
        self.t = d["t"]


    @property
    def rank(self) -> int:
        return self.rdzv.group.rank

    @property
    def size(self) -> int:
        return self.rdzv.group.size

    def set_examples(self, n: int) -> None:
        self.examples = n

    def _collective(self, examples: int, active: bool, grads: bool) -> tuple[torch.Tensor, float, float]:
        parts = []
        if grads:
            s = self.grad_scale * examples
            for _, p in self.named:
                g = p.grad if p.grad is not None else torch.zeros_like(p)
                parts.append(g.detach().reshape(-1) * s)
        else:
            parts.append(torch.zeros(sum(p.numel() for _, p in self.named)))
        # The third scalar: whether any member sees a reason to re-form.
        # Summed in the same collective, every member learns it at the
        # same step, so all raise HostsUpdatedInterrupt together (no
        # member is left waiting in a collective of the old group).
        parts.append(torch.tensor([float(examples), 1.0 if active else 0.0,
                                   1.0 if self.rdzv.hosts_updated() else 0.0]))
        buf = torch.cat(parts)
        self.rdzv.wait(self.rdzv.group.pg.allreduce([buf]))
        if buf[-1] > 0:
            self.updated = True
        return buf[:-3], float(buf[-3]), float(buf[-2])

    def _apply(self, flat: torch.Tensor, total: float) -> None:
        flat /= total
        off = 0
        for _, p in self.named:
            n = p.numel()
            p.grad = flat[off:off + n].view_as(p).clone()
            off += n
        if self.lr_decay:
            for g, lr in zip(self.local.param_groups, self.base_lr):
                g["lr"] = lr / (1.0 + self.lr_decay * self.t)
        self.local.step()
        self.t += 1
        self.steps += 1

    @torch.no_grad()
    def step(self, closure=None, examples: int | None = None):
        """Averages the gradients over the group and steps the local
        optimizer; GroupChanged if the group broke mid-collective."""
        if examples is not None:
            self.examples = examples
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        flat, total, _ = self._collective(self.examples, True, True)
        if total > 0:
            self._apply(flat, total)
        return loss if loss is not None else True

    def idle(self, wait: float) -> None:
        """A step with no batch (the master said WAIT): joins the group's
        step with zero examples; sleeps ``wait`` (at most 0.2 s) if nobody
        had a batch."""
        flat, total, _ = self._collective(0, True, False)
        self.empty_steps += 1
        if total > 0:
            with torch.no_grad():
                self._apply(flat, total)
            self._idle_applied()
        if self.updated:
            raise HostsUpdatedInterrupt(members=self.members())
        if total == 0:
            time.sleep(min(wait, 0.2))

    def drain(self) -> None:
        """This trainer's job is over: joins the group's steps (active 0)
        until every member's is."""
        while True:
            flat, total, active = self._collective(0, False, False)
            if total > 0:
                with torch.no_grad():
                    self._apply(flat, total)
                self._idle_applied()
            if active == 0:
                return
            if self.updated:
                raise HostsUpdatedInterrupt(members=self.members())
            self.empty_steps += 1

    def _idle_applied(self) -> None:
        # An update applied without a batch of ours has no user commit
        # after it: without this save, a restore would take this member
        # back before it, and if this member is rank 0, sync() would take
        # the whole group back while the others' task positions stay
        # committed after it (their batches' updates lost).
        if self.on_idle_update is not None:
            self.on_idle_update()

    def attach(self, batches) -> None:
        """Makes a :class:`raftps.tasks.TaskBatches` join the group's steps
        while it has no batch (WAIT) and after its job is over."""
        batches.source.on_wait = self.idle
        batches.on_over = self.drain

    # -- elastic hooks ------------------------------------------------------

    def hosts_updated(self) -> bool:
        """Whether the group agreed, in a step since the last reset, to
        re-form (TorchState.commit raises HostsUpdatedInterrupt)."""
        return self.updated

    def reform(self, failure: bool) -> None:
        self.rdzv.form(failure)
        self.updated = False

    def sync(self) -> None:
        """Broadcasts rank 0's model (parameters and buffers) and optimizer
        state to every member."""
        broadcast_parameters(self.model.state_dict(), 0, self.rdzv)
        self.load_state_dict(broadcast_object(self.state_dict(), 0, self.rdzv))

    def members(self) -> frozenset:
        return frozenset(self.rdzv.group.members)

    def close(self) -> None:
        self.rdzv.close()
