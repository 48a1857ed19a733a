"""raftps.jobs: submit, follow and cancel training jobs (the Master API).

    spec = {"name": "mnist", "model": {"name": "external"},
            "params": [{"name": "fc.weight", "shape": [784, 10], "init": "INIT_GLOROT"}],
            "dataset": {"path": "datasets/fashion-mnist", "records": 60000},
            "records_per_task": 1000, "batch_size": 64, "passes": 2,
            "optimizer": {"name": "sgd", "learning_rate": 0.1}, "num_pservers": 2}
    st = raftps.jobs.submit(client, spec)       # JobStatus; InvalidArgument names the field
    for ev in raftps.jobs.events(client, "mnist", from_seq=1):
        print(ev.seq, raftps.jobs.event_type(ev))
    raftps.jobs.cancel(client, "mnist")

A spec is a JobSpec message, a dict in the JobSpec's protobuf JSON shape
(field names as in api/raftps/v1/job.proto, enums by name), or a dataclass
whose fields are those names (converted with dataclasses.asdict).
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from typing import Iterator

import grpc
from google.protobuf import json_format

from raftps import errors
from raftps.client import Client
from raftps.v1 import job_pb2

JobSpec = job_pb2.JobSpec
JobStatus = job_pb2.JobStatus
JobEvent = job_pb2.JobEvent

TERMINAL = (job_pb2.JOB_SUCCEEDED, job_pb2.JOB_FAILED, job_pb2.JOB_CANCELLED)


def to_spec(spec) -> job_pb2.JobSpec:
    """A JobSpec from a JobSpec, dict or dataclass (unknown fields are
    InvalidArgument naming them)."""
    if isinstance(spec, job_pb2.JobSpec):
        return spec
    if dataclasses.is_dataclass(spec) and not isinstance(spec, type):
        spec = dataclasses.asdict(spec)
    if not isinstance(spec, dict):
        raise errors.InvalidArgument(f"job spec: want a JobSpec, dict or dataclass, got {type(spec).__name__}")
    try:
        return json_format.ParseDict(spec, job_pb2.JobSpec())
    except json_format.ParseError as e:
        raise errors.InvalidArgument(f"job spec: {e}") from e


def submit(client: Client, spec, timeout: float | None = None) -> job_pb2.JobStatus:
    """Submits a job; returns its status. InvalidArgument names the bad
    field, AlreadyExists a name in use."""
    return client.call("master", "SubmitJob", job_pb2.SubmitJobRequest(spec=to_spec(spec)), timeout).status


def status(client: Client, name: str, timeout: float | None = None) -> job_pb2.JobStatus:
    """The job's status (queues, pass, trainers, pservers, checkpoints,
    metrics, spec). NotFound for an unknown job."""
    return client.call("master", "GetJob", job_pb2.GetJobRequest(name=name), timeout).status


def list_jobs(client: Client, timeout: float | None = None) -> list[job_pb2.JobStatus]:
    return list(client.call("master", "ListJobs", job_pb2.ListJobsRequest(), timeout).jobs)


def cancel(client: Client, name: str, timeout: float | None = None) -> job_pb2.JobStatus:
    """Cancels a job; its trainers get JOB_OVER."""
    return client.call("master", "CancelJob", job_pb2.CancelJobRequest(name=name), timeout).status


def delete(client: Client, name: str, timeout: float | None = None) -> job_pb2.JobStatus:
    """Deletes a finished job (FailedPrecondition while it runs)."""
    return client.call("master", "DeleteJob", job_pb2.DeleteJobRequest(name=name), timeout).status


def state_name(st: job_pb2.JobStatus) -> str:
    return job_pb2.JobState.Name(st.state)


def event_type(ev: job_pb2.JobEvent) -> str:
    return job_pb2.JobEvent.Type.Name(ev.type)


def wait(client: Client, name: str, timeout: float, poll: float = 0.5) -> job_pb2.JobStatus:
    """Polls until the job ends; DeadlineExceeded after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            st = status(client, name)
            if st.state in TERMINAL:
                return st
        except errors.Unavailable:
            pass
        if time.monotonic() > deadline:
            raise errors.DeadlineExceeded(f"job {name!r} still running after {timeout:.0f}s")
        time.sleep(poll)


class Events:
    """Iterator of a job's JobEvents from ``from_seq`` (0: the next one), in
    seq order with no gap and no duplicate across node deaths (the stream is
    resumed on another endpoint from the seq after the last delivered). It
    ends after JOB_ENDED, or on ``cancel()``."""

    def __init__(self, client: Client, name: str, from_seq: int = 0):
        self.client, self.name = client, name
        if from_seq <= 0:
            from_seq = status(client, name).events_seq + 1
        self.next_seq = from_seq
        self._q: queue.Queue = queue.Queue()
        self._cancelled = threading.Event()
        self._call = None
        self._thread = threading.Thread(target=self._run, name="raftps-job-events", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        c = self.client
        backoff = 0.05
        while not self._cancelled.is_set():
            idx = c._pick()
            try:
                self._call = c._stubs[idx].master.WatchJob(
                    job_pb2.WatchJobRequest(name=self.name, from_seq=self.next_seq))
                if self._cancelled.is_set():
                    self._call.cancel()
                for ev in self._call:
                    backoff = 0.05
                    if ev.seq < self.next_seq:
                        continue
                    self.next_seq = ev.seq + 1
                    self._q.put(ev)
                    if ev.type == job_pb2.JobEvent.JOB_ENDED:
                        self._q.put(None)
                        return
                err: errors.RaftpsError = errors.Unavailable("job event stream ended")
            except grpc.RpcError as e:
                err = errors.from_grpc(e)
            except ValueError:  # the client was closed under the stream
                break
            if self._cancelled.is_set() or c._closed:
                break
            if not isinstance(err, (errors.Unavailable, errors.DeadlineExceeded, errors.Aborted,
                                    errors.Cancelled, errors.Unknown, errors.Internal)):
                self._q.put(err)
                return
            c._advance(idx)
            time.sleep(backoff)
            backoff = min(backoff * 2, 1.0)
        self._q.put(None)

    def __iter__(self) -> Iterator[job_pb2.JobEvent]:
        return self

    def __next__(self) -> job_pb2.JobEvent:
        item = self._q.get()
        if item is None:
            self._q.put(None)
            raise StopIteration
        if isinstance(item, BaseException):
            self._q.put(item)
            raise item
        return item

    def cancel(self) -> None:
        self._cancelled.set()
        if self._call is not None:
            self._call.cancel()
        self._q.put(None)

    def __enter__(self) -> "Events":
        return self

    def __exit__(self, *exc) -> None:
        self.cancel()


def events(client: Client, name: str, from_seq: int = 0) -> Events:
    """See :class:`Events`."""
    return Events(client, name, from_seq)
