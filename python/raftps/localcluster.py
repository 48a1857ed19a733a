"""Local raftps clusters of `raftps node` child processes on loopback, for
tests, examples and benchmarks (the Python twin of Go's
internal/testing/localcluster).

    nodes = localcluster.start(bin_path, workdir, 3, roles="server,pserver")
    client = raftps.Client([n.grpc for n in nodes], tls=nodes[0].client_tls)
    nodes[0].kill(); nodes[0].start()                # SIGKILL, restart
    localcluster.stop(nodes)

Clusters run mutual TLS unless started with ``secure=False`` (then the
nodes get --insecure), as Go's localcluster.Secure does it but with the
binary's own commands: ``raftps tls ca create`` makes a CA in
<workdir>/tls, ``raftps tls cert create --node`` a certificate per node
(IP 127.0.0.1, DNS localhost) and ``--client admin --role admin`` the
admin's, which every node's ``client_tls`` names (a :class:`raftps.TLS`).
``tls ca create`` also writes the gossip keyring (<workdir>/tls/gossip.keyring,
which TLS nodes require); each node starts with its own copy,
<workdir>/<id>.keyring (``raftps keyring`` rewrites a node's file).
:func:`client_cert` issues more (a trainer's for its jobs, a reader's).

Each node logs to <workdir>/<id>.log (appended across restarts).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from typing import Sequence

from raftps import errors
from raftps.client import Client
from raftps.tls import TLS

# The repository's datasets/ directory (python/raftps/../../datasets).
DATASET_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "datasets"))


def free_ports(n: int) -> list[int]:
    """n distinct free TCP+UDP ports on 127.0.0.1 (gossip uses both)."""
    out, held = [], []
    try:
        while len(out) < n:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            held.append(s)
            p = s.getsockname()[1]
            u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                u.bind(("127.0.0.1", p))
                out.append(p)
            except OSError:
                pass
            finally:
                u.close()
    finally:
        for s in held:
            s.close()
    return out


# PORTS_PER_NODE: the client API, Raft, gossip, HTTP, node-to-node and
# pserver listeners (--grpc-addr, --raft-addr, --gossip-addr, --http-addr,
# --peer-addr, --pserver-addr).
PORTS_PER_NODE = 6


class Node:
    """One `raftps node` process; ``args`` is the same on every start."""

    def __init__(self, bin_path: str, workdir: str, node_id: str, ports: Sequence[int] | None = None):
        # Every listener gets a port chosen here (PORTS_PER_NODE): a port
        # left to the node (ephemeral) could be one chosen for a node not
        # started yet. Nodes started together take theirs from one
        # free_ports call, since separate calls can repeat a port.
        p = list(ports) if ports is not None else free_ports(PORTS_PER_NODE)
        if len(p) != PORTS_PER_NODE:
            raise ValueError(f"{len(p)} ports, want {PORTS_PER_NODE}")
        self.id, self.bin = node_id, bin_path
        self.data_dir = os.path.join(workdir, node_id)
        self.log_path = os.path.join(workdir, node_id + ".log")
        self.grpc, self.raft, self.gossip, self.http, self.peer, self.pserver = (f"127.0.0.1:{x}" for x in p)
        self.args: list[str] = []
        self.proc: subprocess.Popen | None = None
        # TLS: the node's --tls-* files and the admin client's (None: plaintext).
        self.node_tls: TLS | None = None
        self.client_tls: TLS | None = None
        # The node's gossip keyring file (--gossip-keyring-file; None: plaintext).
        self.keyring: str | None = None

    def addrs(self) -> list[str]:
        """Every listener's address: gRPC, Raft, gossip, HTTP, peer, pserver."""
        return [self.grpc, self.raft, self.gossip, self.http, self.peer, self.pserver]

    def set_args(self, others: Sequence["Node"], expect: int, extra: Sequence[str]) -> None:
        self.args = ["node", "--id", self.id, "--data-dir", self.data_dir, "--grpc-addr", self.grpc,
                     "--raft-addr", self.raft, "--gossip-addr", self.gossip, "--http-addr", self.http,
                     "--peer-addr", self.peer, "--pserver-addr", self.pserver]
        join = [o.gossip for o in others if o is not self]
        if join:
            self.args += ["--join", ",".join(join)]
        if expect:
            self.args += ["--bootstrap-expect", str(expect)]
        if self.node_tls is not None:
            self.args += ["--tls-ca-file", self.node_tls.cacert, "--tls-cert-file", self.node_tls.cert,
                          "--tls-key-file", self.node_tls.key, "--gossip-keyring-file", self.keyring]
        else:
            # Plaintext: nodes refuse to start without TLS material unless told.
            self.args += ["--insecure"]
        if os.path.isdir(DATASET_ROOT):
            # Nodes confine jobs' dataset paths to their --dataset-root
            # directories; jobs here name datasets/fashion-mnist.
            self.args += ["--dataset-root", DATASET_ROOT]
        self.args += list(extra)

    def start(self) -> None:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([self.bin, *self.args], stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL and wait."""
        if self.running():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self, wait: float = 10.0) -> None:
        """SIGTERM, wait up to ``wait`` seconds, then SIGKILL."""
        if self.running():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                self.kill()


def _tls_cmd(bin_path: str, *args: str) -> None:
    r = subprocess.run([bin_path, "tls", *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"raftps tls {' '.join(args)}: {r.stderr.strip() or r.stdout.strip()}")


def make_ca(bin_path: str, tls_dir: str) -> TLS:
    """Creates a CA (``raftps tls ca create``) and the admin client
    certificate in tls_dir; returns the admin's TLS files."""
    os.makedirs(tls_dir, exist_ok=True)
    _tls_cmd(bin_path, "ca", "create", "--dir", tls_dir)
    return client_cert(bin_path, tls_dir, "admin", "admin")


def _ca_args(tls_dir: str) -> list[str]:
    return ["--ca", os.path.join(tls_dir, "ca.pem"), "--ca-key", os.path.join(tls_dir, "ca-key.pem"),
            "--dir", tls_dir]


def client_cert(bin_path: str, tls_dir: str, name: str, role: str, jobs: Sequence[str] = ()) -> TLS:
    """Issues a client certificate (role admin, trainer or reader; a
    trainer's names its jobs) with the CA in tls_dir."""
    job_args = [a for j in jobs for a in ("--job", j)]
    _tls_cmd(bin_path, "cert", "create", *_ca_args(tls_dir), "--client", name, "--role", role, *job_args)
    return TLS(os.path.join(tls_dir, "ca.pem"), os.path.join(tls_dir, name + ".pem"),
               os.path.join(tls_dir, name + "-key.pem"))


def _secure_node(nd: Node, tls_dir: str, admin: TLS, keyring: str) -> None:
    """Issues nd's node certificate and gives it its own copy (mode 0600)
    of the gossip keyring file ``keyring``."""
    _tls_cmd(nd.bin, "cert", "create", *_ca_args(tls_dir), "--node", nd.id)
    nd.node_tls = TLS(os.path.join(tls_dir, "ca.pem"), os.path.join(tls_dir, nd.id + ".pem"),
                      os.path.join(tls_dir, nd.id + "-key.pem"))
    nd.client_tls = admin
    nd.keyring = os.path.join(os.path.dirname(nd.data_dir), nd.id + ".keyring")
    shutil.copy(keyring, nd.keyring)  # copies the mode (0600) too


def tls_dir(workdir: str) -> str:
    """Where a secure cluster in workdir keeps its CA and certificates."""
    return os.path.join(workdir, "tls")


def new_nodes(bin_path: str, workdir: str, n: int) -> list[Node]:
    """Nodes n1..nN (not started) whose listeners' ports all differ: they
    come from one free_ports call."""
    ports = free_ports(PORTS_PER_NODE * n)
    return [Node(bin_path, workdir, f"n{i + 1}", ports[PORTS_PER_NODE * i:PORTS_PER_NODE * (i + 1)]) for i in range(n)]


def new_node(bin_path: str, workdir: str, existing: Sequence[Node]) -> Node:
    """Node n<len+1> (not started) with ports none of existing's uses."""
    taken = {a for nd in existing for a in nd.addrs()}
    for _ in range(100):
        ports = free_ports(PORTS_PER_NODE)
        if not taken & {f"127.0.0.1:{x}" for x in ports}:
            return Node(bin_path, workdir, f"n{len(existing) + 1}", ports)
    raise RuntimeError("no free ports apart from the existing nodes' after 100 tries")


def start(bin_path: str, workdir: str, n: int = 3, roles: str = "server,pserver",
          extra: Sequence[str] = (), timeout: float = 60.0, secure: bool = True) -> list[Node]:
    """Starts n nodes n1..nN that join each other (--bootstrap-expect n)
    and waits until they have a leader and n voters. ``secure``: mutual
    TLS with a fresh CA in <workdir>/tls (see the module doc); each node's
    ``client_tls`` is the admin's certificate."""
    os.makedirs(workdir, exist_ok=True)
    nodes = new_nodes(bin_path, workdir, n)
    if secure:
        admin = make_ca(bin_path, tls_dir(workdir))
        for nd in nodes:
            _secure_node(nd, tls_dir(workdir), admin, os.path.join(tls_dir(workdir), "gossip.keyring"))
    for nd in nodes:
        nd.set_args(nodes, n, ["--roles", roles, *extra])
    for nd in nodes:
        nd.start()
    wait_ready(nodes, n, timeout)
    return nodes


def add(bin_path: str, workdir: str, existing: Sequence[Node], roles: str, extra: Sequence[str] = ()) -> Node:
    """Starts a node n<len+1> that joins the existing ones (with a node
    certificate from the cluster's CA and a copy of the first existing
    node's current gossip keyring if the cluster is secure)."""
    nd = new_node(bin_path, workdir, existing)
    if existing and existing[0].client_tls is not None:
        _secure_node(nd, tls_dir(workdir), existing[0].client_tls, existing[0].keyring)
    nd.set_args(existing, 0, ["--roles", roles, *extra])
    nd.start()
    return nd


def wait_ready(nodes: Sequence[Node], voters: int, timeout: float = 60.0) -> None:
    """Waits until every running node reports a leader, ``voters`` voters
    and answers a linearizable read."""
    deadline = time.monotonic() + timeout
    last = None
    for nd in nodes:
        if not nd.running():
            continue
        with Client([nd.grpc], timeout=2.0, tls=nd.client_tls, insecure=nd.client_tls is None) as c:
            while True:
                try:
                    st = c.status()
                    if st.leader and len(st.voters) >= voters:
                        c.range_pb("/", count_only=True)
                        break
                    last = f"{nd.id}: leader {st.leader!r}, voters {list(st.voters)}"
                except errors.RaftpsError as e:
                    last = f"{nd.id}: {e}"
                if any(n.proc is not None and n.proc.poll() is not None and n is nd for n in nodes):
                    raise RuntimeError(f"node {nd.id} exited; see {nd.log_path}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"cluster not ready after {timeout:.0f}s ({last}); "
                                       f"{nd.id}'s log ends:\n{log_tail(nd.log_path)}")
                time.sleep(0.2)


def log_tail(path: str, lines: int = 40) -> str:
    """The last ``lines`` lines of a node's log (for errors)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            return b"".join(f.read().splitlines(keepends=True)[-lines:]).decode(errors="replace")
    except OSError as e:
        return f"(no log: {e})"


def stop(nodes: Sequence[Node]) -> None:
    for nd in nodes:
        nd.stop(5.0)
