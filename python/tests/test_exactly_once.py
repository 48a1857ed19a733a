"""Exactly-once writes from Python: every write carries a request id
(raftps-client-id, raftps-seq, raftps-acked metadata), the same on each
retry, so a write whose answer was lost after the cluster applied it is
retried on another node and not applied again."""

import uuid

import grpc

import raftps


class _LostAnswer(grpc.RpcError):
    def code(self):
        return grpc.StatusCode.UNAVAILABLE

    def details(self):
        return "test: the node applied the write and its answer was lost"


class LoseFirstAnswer(grpc.UnaryUnaryClientInterceptor):
    """Lets the first call of ``method`` reach the cluster (and be applied)
    and then reports UNAVAILABLE to the client, as a node dying before it
    answers would; records each attempt's request id."""

    def __init__(self, method: str):
        self.method = method
        self.attempts: list[dict] = []

    def intercept_unary_unary(self, continuation, details, request):
        if not details.method.endswith("/" + self.method):
            return continuation(details, request)
        self.attempts.append(dict(details.metadata or ()))
        out = continuation(details, request)
        out.result()  # applied (or raises the real error)
        if len(self.attempts) == 1:
            raise _LostAnswer()
        return out


def _client(cluster, icpt):
    return raftps.Client([n.grpc for n in cluster], timeout=10.0, tls=cluster[0].client_tls,
                         interceptors=[icpt])


def _same_request(attempts):
    assert len(attempts) == 2, attempts
    a, b = attempts
    assert a["raftps-client-id"] == b["raftps-client-id"] and a["raftps-seq"] == b["raftps-seq"], attempts
    assert int(a["raftps-seq"]) >= 1


def test_retried_put_applies_once(client, cluster):
    k = "/exactly-once/put-" + uuid.uuid4().hex[:8]
    icpt = LoseFirstAnswer("Put")
    with _client(cluster, icpt) as c:
        rev = c.put(k, b"v")
    kv = client.get(k)
    # Applied once: one version, at the revision the retry was answered with.
    assert len(icpt.attempts) == 2 and kv.version == 1 and kv.mod_revision == rev
    _same_request(icpt.attempts)


def test_retried_txn_applies_once(client, cluster):
    k = "/exactly-once/txn-" + uuid.uuid4().hex[:8]
    icpt = LoseFirstAnswer("Txn")
    with _client(cluster, icpt) as c:
        # Create-if-absent: applied twice, the retry would find the key and fail.
        resp = c.txn([c.cmp_version(k, "==", 0)], [c.op_put(k, b"first")], [c.op_put(k, b"second")])
    assert len(icpt.attempts) == 2 and resp.succeeded
    kv = client.get(k)
    assert kv.value == b"first" and kv.version == 1 and kv.mod_revision == resp.header.revision
    _same_request(icpt.attempts)


def test_request_ids_advance_and_ack(client, cluster):
    """Each new write gets the next seq; acked tells the cluster which
    answers it may forget (every seq below the lowest unsettled one)."""
    icpt = LoseFirstAnswer("NoSuchMethod")
    seen = []

    class Record(grpc.UnaryUnaryClientInterceptor):
        def intercept_unary_unary(self, continuation, details, request):
            seen.append(dict(details.metadata or ()))
            return continuation(details, request)

    with raftps.Client([n.grpc for n in cluster], timeout=10.0, tls=cluster[0].client_tls,
                       interceptors=[Record(), icpt]) as c:
        k = "/exactly-once/seq-" + uuid.uuid4().hex[:8]
        c.put(k, b"1")
        c.get(k)
        c.put(k, b"2")
        with c.request_id() as held:
            c.put(k, b"3")
    writes = [m for m in seen if "raftps-seq" in m]
    assert len(seen) == 4 and len(writes) == 3  # the read carries none
    assert [int(m["raftps-seq"]) for m in writes] == [1, 2, held + 1]
    assert [int(m["raftps-acked"]) for m in writes] == [1, 2, held]
