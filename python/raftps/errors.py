"""Exceptions of the raftps client: one class per gRPC status code.

Every error a node returns arrives as a :class:`RaftpsError` subclass that
carries the gRPC code (``.code``, a :class:`grpc.StatusCode`) and the
server's message (``.message``), e.g. ``InvalidArgument("job spec:
params[2] (\\"fc.weight\\").shape: ...")``. Catch the class, never match the
message text.
"""

from __future__ import annotations

import grpc

from raftps._protowire import fields


class RaftpsError(Exception):
    """Base class of every raftps client error.

    Attributes:
        code: the gRPC status code (None for errors raised by the client).
        message: the server's message (or the client's explanation).
    """

    code: grpc.StatusCode | None = None
    # reason is the ErrorInfo reason the server named the error with
    # (api/rpctypes' table, e.g. "SLOT_EPOCH"; "" when it named none).
    reason: str = ""

    def __init__(self, message: str = "", code: grpc.StatusCode | None = None, reason: str = ""):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.reason = reason

    def __str__(self) -> str:
        name = self.code.name if self.code is not None else type(self).__name__
        return f"{name}: {self.message}"


class Cancelled(RaftpsError):
    code = grpc.StatusCode.CANCELLED


class Unknown(RaftpsError):
    code = grpc.StatusCode.UNKNOWN


class InvalidArgument(RaftpsError):
    """Bad input; the message names the field (e.g. ``params[0].shape``)."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceeded(RaftpsError):
    """The call's timeout passed (retryable)."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFound(RaftpsError):
    """A missing job, lease or key."""

    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(RaftpsError):
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(RaftpsError):
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(RaftpsError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(RaftpsError):
    """The state does not allow the call (e.g. a stale push: re-pull)."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(RaftpsError):
    code = grpc.StatusCode.ABORTED


class OutOfRange(RaftpsError):
    """E.g. a watch from a compacted revision."""

    code = grpc.StatusCode.OUT_OF_RANGE


class Unimplemented(RaftpsError):
    code = grpc.StatusCode.UNIMPLEMENTED


class Internal(RaftpsError):
    code = grpc.StatusCode.INTERNAL


class Unavailable(RaftpsError):
    """No node answered, no leader yet, or a pserver slot is not served
    (retryable)."""

    code = grpc.StatusCode.UNAVAILABLE


class DataLoss(RaftpsError):
    code = grpc.StatusCode.DATA_LOSS


class Unauthenticated(RaftpsError):
    code = grpc.StatusCode.UNAUTHENTICATED


class StalePush(FailedPrecondition):
    """A pserver refused a push as stale (the sync step or the async
    staleness bound moved on): pull again and recompute the batch."""


class Fenced(Unavailable):
    """A pserver slot was fenced (its holder lost its lease); the client
    re-resolves the slot and retries."""


class LeaseLost(NotFound):
    """A lease kept alive by :class:`raftps.client.Lease` expired or was
    revoked; keys attached to it are gone."""


_BY_CODE = {
    cls.code: cls
    for cls in (
        Cancelled, Unknown, InvalidArgument, DeadlineExceeded, NotFound, AlreadyExists,
        PermissionDenied, ResourceExhausted, FailedPrecondition, Aborted, OutOfRange,
        Unimplemented, Internal, Unavailable, DataLoss, Unauthenticated,
    )
}

RETRYABLE = (Unavailable, DeadlineExceeded, Aborted)


# The trailer that carries a status's google.rpc.Status (with its details).
_STATUS_DETAILS = "grpc-status-details-bin"
_ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"


def reason_of(err: grpc.RpcError) -> str:
    """The ErrorInfo reason of err's status (api/rpctypes' ToStatus puts
    it in the status details: google.rpc.Status.details[] (field 3), an Any
    (type_url 1, value 2) of google.rpc.ErrorInfo (reason 1)); "" if none."""
    md = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None
    for k, v in md or ():
        if k != _STATUS_DETAILS or not isinstance(v, bytes):
            continue
        try:
            for num, det in fields(v):
                if num != 3:
                    continue
                anyf = dict(fields(det))
                if bytes(anyf.get(1, b"")).decode() == _ERROR_INFO:
                    return bytes(dict(fields(anyf.get(2, b""))).get(1, b"")).decode()
        except (ValueError, UnicodeDecodeError):
            return ""
    return ""


def from_grpc(err: grpc.RpcError) -> RaftpsError:
    """Maps a grpc.RpcError to the RaftpsError subclass of its code, keeping
    the server's message and the ErrorInfo reason (``.reason``)."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    msg = err.details() if hasattr(err, "details") else str(err)
    cls = _BY_CODE.get(code, RaftpsError)
    e = cls(msg or "", code, reason_of(err))
    e.__cause__ = err
    return e
