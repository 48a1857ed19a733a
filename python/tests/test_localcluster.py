"""raftps.localcluster gives every listener of every node its own port:
nodes started together take theirs from one free_ports call, an added node
avoids the existing ones', and no listener is left to an ephemeral port
(which could be one chosen for a node started later)."""

from raftps import localcluster


def test_ports_distinct(monkeypatch, tmp_path):
    state = {"next": 20000}

    def overlapping(n):  # each call overlaps the previous one
        out = list(range(state["next"], state["next"] + n))
        state["next"] += 2
        return out

    monkeypatch.setattr(localcluster, "free_ports", overlapping)
    nodes = localcluster.new_nodes("/bin/true", str(tmp_path), 3)
    nodes.append(localcluster.new_node("/bin/true", str(tmp_path), nodes))
    seen = {}
    for nd in nodes:
        nd.set_args(nodes, 3, [])
        assert len(nd.addrs()) == localcluster.PORTS_PER_NODE
        for a in nd.addrs():
            assert a not in seen, f"{a} of {nd.id} is also {seen[a]}'s"
            seen[a] = nd.id
        for flag, addr in (("--peer-addr", nd.peer), ("--pserver-addr", nd.pserver)):
            i = nd.args.index(flag)
            assert nd.args[i + 1] == addr, nd.args
    assert [nd.id for nd in nodes] == ["n1", "n2", "n3", "n4"]
