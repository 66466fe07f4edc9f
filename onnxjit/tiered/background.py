"""Compiles in a background process, which leaves its program in the disk cache.

A `Job` is one compile that a tier-0 call asked for: the model's bytes, its options and what to
compile (a signature's program, or a symbolic program: `worker`). A fresh `python -m
onnxjit.tiered.worker` gets the model on its stdin at once (`frames`: a pickle, the model's
bytes out of band, so never copied), in a session of its own (Ctrl-C at the terminal reaches the
caller, which decides; a kill takes the worker's code generation workers with it), and what to
compile once it says it is ready: until then `retarget` may change the job (a symbolic program
superseding the shape's it was started for takes over its process, some 0.5 s of start-up a
stream's second shape no longer waits for; `_await_ready` drains the worker's stderr meanwhile).
A process rather than a thread: the compile is mostly Python (passes, IR emission) holding the
GIL, which would stall the interpreter's many short numpy calls, and a process uses the second
core while this one interprets. The worker stores its program in the disk cache like any compile
(atomic writes), so the caller's usual lookup finds it there; a waiter thread marks the job done
when the process exits.

Jobs run one at a time per process (`start` queues the rest): the machine's cores are shared
with the interpreting caller. `cancel` kills a queued or running job whose program is no longer
wanted (a symbolic one superseding a shape's). When the interpreter exits, the jobs still
wanted run to their end first (`_finish_at_exit`: the next process finds their programs on
disk; Ctrl-C stops them), and a worker whose parent died exits by itself, so none outlives
its caller; in a forked child the parent's jobs count as finished (`_forked_child`).
"""

from __future__ import annotations

import atexit
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["Job", "start", "cancel", "retarget", "active"]

_lock = threading.Lock()
_queue: list[Job] = []
_running: Job | None = None
_all: weakref.WeakSet[Job] = weakref.WeakSet()
_U64 = struct.Struct("<Q")


class Job:
    """One background compile: `done` once its process exited; `error` says why it failed."""

    def __init__(self, key: str, request: dict[str, Any]):
        self.key = key
        self.request = request
        self.done = threading.Event()
        self.error: str | None = None
        self.cancelled = False
        self.proc: subprocess.Popen | None = None
        self.payload: list = []  # the framed model (`frames`), while it is being sent
        self.lock = threading.Lock()  # `committed` and what `request["job"]` says
        self.committed = False  # the worker has been told what to compile
        _all.add(self)

    def wait(self, timeout: float | None = None) -> bool:
        return self.done.wait(timeout)

    def __repr__(self) -> str:
        state = "done" if self.done.is_set() else "running" if self.proc else "queued"
        return f"<Job {self.key[:12]} {state}{' ' + self.error if self.error else ''}>"


def start(job: Job) -> Job:
    """Queue `job`; it starts at once when no other job runs."""
    with _lock:
        _queue.append(job)
        _next_locked()
    return job


def retarget(job: Job, key: str, what: tuple) -> bool:
    """Make a job not yet told what to compile build `what` (stored under `key`) instead;
    False when it is too late (its worker has its job, or it is over)."""
    with job.lock:
        if job.committed or job.cancelled or job.done.is_set():
            return False
        job.key, job.request = key, dict(job.request, job=what)
        return True


def cancel(job: Job) -> None:
    with _lock:
        job.cancelled = True
        if job in _queue:
            _queue.remove(job)
            job.error = "cancelled"
            job.done.set()
        elif job.proc is not None and job.proc.poll() is None:
            _kill(job.proc)


def active() -> list[Job]:
    with _lock:
        return ([_running] if _running is not None else []) + list(_queue)


def _kill(proc: subprocess.Popen) -> None:
    """Kill a worker and its code generation workers (its own session: one process group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (OSError, AttributeError):
        proc.kill()


def _next_locked() -> None:
    global _running
    if _running is not None or not _queue:
        return
    job = _running = _queue.pop(0)
    env = dict(os.environ, ONNXJIT_TIERED="0", ONNXJIT_PROGRESS="0")
    try:
        job.payload = frames({k: v for k, v in job.request.items() if k != "job"})
        job.proc = subprocess.Popen([sys.executable, "-m", "onnxjit.tiered.worker"],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=env, start_new_session=True)
    except Exception as e:  # noqa: BLE001 - the call then compiles in its own process
        job.error = f"could not start a compile process: {e}"
        _running = None
        job.done.set()
        _next_locked()
        return
    threading.Thread(target=_wait, args=(job,), name="onnxjit-tier-wait", daemon=True).start()


def _wait(job: Job) -> None:
    global _running
    assert job.proc is not None
    try:
        err = _send(job.proc, job.payload, lambda: _commit(job))
        job.payload = []
        if job.proc.returncode != 0:
            lines = err.decode(errors="replace").strip().splitlines()
            job.error = ("cancelled" if job.cancelled else lines[-1] if lines else
                         f"exit code {job.proc.returncode}")
    except Exception as e:  # noqa: BLE001 - reported through the job
        job.error = str(e)
    finally:
        with _lock:
            _running = None
            job.done.set()
            _next_locked()


def _commit(job: Job) -> list:
    """The job's frames, now that its worker is ready: from here on it compiles what it says."""
    with job.lock:
        job.committed = True
        return frames({"job": job.request["job"]})


def frames(request: dict[str, Any]) -> list:
    """The request as the worker reads it (`read_request`): a u64 count of buffers, then
    length-prefixed frames, the pickle first and the model's bytes after it, out of band
    (protocol 5): no copy of a model of tens of MB on the calling thread (15 ms for 19 MB)."""
    bufs: list = []
    if "data" in request:
        request = dict(request, data=pickle.PickleBuffer(request["data"]))
    head = pickle.dumps(request, protocol=5, buffer_callback=bufs.append)
    parts = [head, *(b.raw() for b in bufs)]
    out: list = [_U64.pack(len(parts))]
    for part in parts:
        out += [_U64.pack(part.nbytes if isinstance(part, memoryview) else len(part)), part]
    return out


def read_request(stream: Any) -> dict[str, Any]:
    """The request `frames` wrote to `stream` (a binary file)."""
    def exactly(n: int) -> bytes:
        data = stream.read(n)
        if len(data) != n:
            raise EOFError(f"request cut short: {len(data)} of {n} bytes")
        return data

    count = _U64.unpack(exactly(8))[0]
    parts = [exactly(_U64.unpack(exactly(8))[0]) for _ in range(count)]
    return pickle.loads(parts[0], buffers=parts[1:])


def _send(proc: subprocess.Popen, payload: list,
          then: Callable[[], list] | None = None) -> bytes:
    """Write the request, and `then()`'s frames once the worker says it is ready (a byte on its
    stdout); then wait for the worker's exit; its stderr."""
    assert proc.stdin is not None and proc.stderr is not None
    early = b""
    try:
        for part in payload:
            proc.stdin.write(part)
        if then is not None:
            proc.stdin.flush()
            ready, early = _await_ready(proc)
            if ready:
                for part in then():
                    proc.stdin.write(part)
    except OSError:  # the worker died (killed, cancelled): its exit status says so
        pass
    finally:
        try:
            proc.stdin.close()
        except OSError:  # a broken pipe's unwritten buffer
            pass
    err = early + proc.stderr.read()
    proc.wait()
    return err


def _await_ready(proc: subprocess.Popen) -> tuple[bool, bytes]:
    """(whether the worker wrote its ready byte before it exited, its stderr so far): stderr
    is read meanwhile, so a worker with much to say before it is ready never blocks on it."""
    assert proc.stdout is not None and proc.stderr is not None
    out, err, chunks = proc.stdout.fileno(), proc.stderr.fileno(), []
    watched = [out, err]
    try:
        while True:
            readable = select.select(watched, [], [])[0]
            if err in readable:
                chunk = os.read(err, 1 << 16)
                chunks.append(chunk)
                if not chunk:
                    watched.remove(err)
            if out in readable:
                return bool(os.read(out, 1)), b"".join(chunks)
    finally:
        proc.stdout.close()


def _forked_child() -> None:
    """In a forked child the jobs' processes and waiter threads are the parent's: every
    unfinished job is over here (its calls compile in the child, or find the parent's
    program on disk)."""
    global _lock, _running
    _lock = threading.Lock()
    _queue.clear()
    _running = None
    for job in list(_all):
        if not job.done.is_set():
            job.error, job.proc = "the compile process belongs to the parent process", None
            job.done = threading.Event()
            job.done.set()


os.register_at_fork(after_in_child=_forked_child)


@atexit.register
def _finish_at_exit() -> None:
    """Let the compiles still wanted finish before the interpreter exits, so their programs
    are on disk for the next process (a short script's stream may end before its compile);
    Ctrl-C stops them (a killed worker leaves no partial entry: writes are atomic)."""
    jobs = active()
    if not jobs:
        return
    from onnxjit.timings import INFO, log

    log(INFO, "finishing %d background compile(s) before exiting", len(jobs))
    if sys.stderr is not None and sys.stderr.isatty():
        print("onnxjit: finishing a background compile before exiting (Ctrl-C skips it)",
              file=sys.stderr, flush=True)
    try:
        while jobs:
            jobs[0].done.wait(0.1)  # short waits: Ctrl-C acts at once
            jobs = active()
    except KeyboardInterrupt:
        _kill_all()


def _kill_all() -> None:
    with _lock:
        jobs = ([_running] if _running is not None else []) + _queue
        _queue.clear()
    for job in jobs:
        job.cancelled = True
        if job.proc is not None and job.proc.poll() is None:
            _kill(job.proc)
