"""Mutual TLS for the Python client: the files of the Go CLI's --cacert,
--cert and --key (etcdctl's names; environment RAFTPS_CACERT, RAFTPS_CERT,
RAFTPS_KEY).

A raftps cluster runs mutual TLS unless its nodes were started with
--insecure: a client shows a certificate signed by the cluster CA, whose
role (admin, trainer or reader, made by ``raftps tls cert create --client
NAME --role ROLE``) decides what it may call; a call its role does not
allow raises :class:`raftps.errors.PermissionDenied`.

    tls = raftps.TLS("ca.pem", "alice.pem", "alice-key.pem")
    c = raftps.Client(endpoints, tls=tls)      # or RAFTPS_CACERT/CERT/KEY set

The three files go together (all or none). Nodes' certificates name their
IP addresses and DNS names; the client checks the node's certificate
against the host of the endpoint it dials ("127.0.0.1:7000": IP
127.0.0.1).
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import time
import weakref

import grpc

from raftps import errors

ENV_CACERT, ENV_CERT, ENV_KEY = "RAFTPS_CACERT", "RAFTPS_CERT", "RAFTPS_KEY"


@dataclasses.dataclass(frozen=True)
class TLS:
    """Paths of PEM files: the cluster CA certificate, the client's
    certificate and its private key."""

    cacert: str
    cert: str
    key: str

    @classmethod
    def resolve(cls, cacert: str | None = None, cert: str | None = None, key: str | None = None) -> "TLS | None":
        """The TLS files from the arguments, each missing one from its
        environment variable (RAFTPS_CACERT, RAFTPS_CERT, RAFTPS_KEY), or
        None if none is given anywhere (plaintext, for nodes started with
        --insecure). Raises InvalidArgument if only some are given."""
        f = [cacert or os.environ.get(ENV_CACERT, ""), cert or os.environ.get(ENV_CERT, ""),
             key or os.environ.get(ENV_KEY, "")]
        if not any(f):
            return None
        if not all(f):
            raise errors.InvalidArgument(
                f"TLS: the CA certificate, certificate and key go together (--cacert {f[0]!r}, "
                f"--cert {f[1]!r}, --key {f[2]!r}; or {ENV_CACERT}, {ENV_CERT}, {ENV_KEY})")
        return cls(*f)

    def name(self) -> str:
        """The client certificate's name (its subject common name): the
        identity the cluster acts for (a trainer pushes and registers as
        this name; security.IdentityOf in Go). Raises InvalidArgument if the
        certificate cannot be read or names no one."""
        from cryptography import x509
        from cryptography.x509.oid import NameOID
        try:
            with open(self.cert, "rb") as fh:
                cert = x509.load_pem_x509_certificate(fh.read())
        except (OSError, ValueError) as e:
            raise errors.InvalidArgument(f"TLS: cannot read the certificate {self.cert!r}: {e}") from e
        cns = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        if not cns or not cns[0].value:
            raise errors.InvalidArgument(f"TLS: the certificate {self.cert!r} has no common name")
        return str(cns[0].value)

    def pem(self) -> tuple[bytes, bytes, bytes]:
        """The three files' contents: (CA certificate, certificate, key).
        Raises InvalidArgument naming an unreadable file."""
        data = []
        for what, path in (("CA certificate", self.cacert), ("certificate", self.cert), ("key", self.key)):
            try:
                with open(path, "rb") as fh:
                    data.append(fh.read())
            except OSError as e:
                raise errors.InvalidArgument(f"TLS: cannot read the {what} {path!r}: {e.strerror}") from e
        return data[0], data[1], data[2]

    def credentials(self) -> grpc.ChannelCredentials:
        """gRPC channel credentials: verify nodes against the CA, show the
        client certificate. Raises InvalidArgument naming an unreadable file."""
        ca, cert, key = self.pem()
        return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)


def _connectivity(_state: grpc.ChannelConnectivity) -> None:
    """The no-op subscriber of channel (see there)."""


# Channels made by channel() and not yet collected: closed at exit, since
# an interpreter does not exit while a subscribed channel is open.
_open_channels: "weakref.WeakSet[grpc.Channel]" = weakref.WeakSet()


@atexit.register
def _close_channels() -> None:
    close_channels(list(_open_channels))


def close_channels(channels, wait: float = 1.0) -> None:
    """Closes channels made by channel(): first stops their connectivity
    polling threads (unsubscribes, then waits up to ``wait`` seconds for
    each thread to leave its 0.2 s watch), then closes them. grpc's own
    close does both at once, and a polling thread that was between two
    watches calls the next on a closed channel: "ValueError: Cannot
    monitor channel state: Channel closed!" in a thread (seen in the test
    suite under load)."""
    for ch in channels:
        ch.unsubscribe(_connectivity)
    deadline = time.monotonic() + wait
    for ch in channels:
        # grpc 1.51's _ChannelConnectivityState; without it, close at once.
        state = getattr(ch, "_connectivity_state", None)
        while state is not None and getattr(state, "polling", False) and time.monotonic() < deadline:
            time.sleep(0.01)
        ch.close()


def channel(target: str, creds: grpc.ChannelCredentials | None, options) -> grpc.Channel:
    """A channel to target: secure with creds, plaintext without.

    The channel is subscribed to its connectivity (grpc's polling thread,
    stopped by ``close_channels``), so a connection attempt makes progress between
    calls. Without it, gRPC Python drives a channel's sockets only while a
    call polls: a call that fails fast on a channel in TRANSIENT_FAILURE
    leaves the next attempt's TLS handshake half done, and a server that
    bounds handshakes (raftps: security.HandshakeTimeout, 5 s) closes it;
    with calls a second apart, the channel never connects again ("Socket
    closed") although the server is up. Channels still open at exit are
    closed then (an open subscribed channel keeps the interpreter from
    exiting)."""
    if creds is None:
        ch = grpc.insecure_channel(target, options=options)
    else:
        ch = grpc.secure_channel(target, creds, options=options)
    ch.subscribe(_connectivity, try_to_connect=True)
    _open_channels.add(ch)
    return ch
