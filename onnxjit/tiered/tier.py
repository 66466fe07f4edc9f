"""The tiers of one `CompiledModel`: native code when it exists, else tier 0 and a compile.

    artifact(sig):
        found = the model's lookup without compiling (memory, disk, a symbolic program)
        found native code          -> it (the caller keeps it for the signature's next calls)
        no tier-0 plan, or the compile of this program failed before
                                   -> the synchronous compile (which raises what it raises)
        else the program that would serve `sig` (the signature's own, or the symbolic one the
             specializer picks) gets a background job, one per program; a symbolic job takes
             over a shape program's job whose worker is still starting (`background.retarget`)
             and cancels the others it supersedes
                                   -> an `Interpreted` artifact: tier 0 for this call

`Interpreted.run` runs the plan; when the plan cannot give the outputs (an op it lacks, a size
the numpy code rejects) it waits for the job and runs the native code, so a bad call still gets
the native code's `InputError`; after a tier-0 call of over `SLOW_SECONDS` every later call
waits for the native code. Tiering is on when the option says so (`tiered`, default on,
`$ONNXJIT_TIERED=0` off), a disk cache exists (the jobs hand programs over through it) and the
graph has at least `MIN_NODES` nodes (smaller ones compile in a fraction of a second).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from onnxjit import cache as cache_mod
from onnxjit.progress import LazyText
from onnxjit.signature import describe
from onnxjit.tiered.pending import Pending
from onnxjit.timings import INFO, log

if TYPE_CHECKING:
    from onnxjit.tiered import background
    from onnxjit.tiered.interpreter import Plan

__all__ = ["Tier", "Interpreted", "MIN_NODES"]

#: graphs with fewer nodes compile in well under a second: they are compiled synchronously
MIN_NODES = 16
#: a tier-0 call this long (an op whose numpy evaluation loops in Python over a large input)
#: makes the model's later calls wait for the native code instead
SLOW_SECONDS = 5.0


def tier_of(owner: Any) -> Tier | None:
    """The tiers of a new `CompiledModel`, or None when tiering is off for it."""
    return Tier(owner) if owner.options.tiered and owner.options.cache_dir is not None else None


def info(owner: Any) -> dict[str, Any]:
    """`CompiledModel.tier_info`."""
    if owner._tier is None:
        why = "off (tiered=False)" if not owner.options.tiered else "no disk cache"
        return {"enabled": False, "why_not": why, "interpreted": 0, "jobs": []}
    return owner._tier.info()


class Interpreted:
    """One call's tier-0 artifact (never kept for the signature: the next call looks again)."""

    def __init__(self, tier: Tier, sig: tuple, job: background.Job):
        self.tier, self.signature, self.job = tier, sig, job

    def run(self, arrays: list) -> tuple:
        tier = self.tier
        out = None
        if not tier.slow:
            t0 = time.perf_counter()
            out = tier.plan.run(arrays)  # type: ignore[union-attr]
            if time.perf_counter() - t0 > SLOW_SECONDS:
                tier.slow = True  # numpy is far behind here: later calls wait for the code
        if out is not None:
            tier.interpreted += 1
            return out
        art: Any = self
        while art.__class__ is Interpreted:  # a cancelled job: the one superseding it
            art.job.wait()
            art = self.tier.artifact(self.signature)
        return art.run(arrays)


class Tier:
    """Tier 0 and the background jobs of one model (its `_tier` attribute)."""

    Interpreted = Interpreted

    def __init__(self, owner: Any):
        self.owner = owner
        self.plan: Plan | None = None
        self.why_not: str | None = None  # why there is no plan (for `onnxjit info`)
        self.jobs: dict[str, background.Job] = {}
        #: signature -> the job compiling the program that will serve it
        self.waiting: dict[tuple, background.Job] = {}
        self.interpreted = 0  # calls served by tier 0
        self.slow = False  # a tier-0 call took over SLOW_SECONDS
        self._lock = threading.Lock()
        self._planned = False

    def _plan(self) -> Plan | None:
        if not self._planned:
            with self._lock:
                if not self._planned:
                    graph = self.owner._graph().graph
                    if len(graph.nodes) < MIN_NODES:
                        self.why_not = f"{len(graph.nodes)} nodes compile quickly"
                    else:
                        from onnxjit.tiered.interpreter import NotPlannable, Plan

                        try:
                            self.plan = Plan(graph)
                        except NotPlannable as e:
                            self.why_not = str(e)
                    self._planned = True
        return self.plan

    def artifact(self, sig: tuple) -> Any:
        job = self.waiting.get(sig)
        if job is not None and not job.done.is_set():  # its program is still compiling
            return Interpreted(self, sig, job)
        owner = self.owner
        what = LazyText(lambda: f"{owner._source_name} for {describe(owner._all_names, sig)}")
        found = owner._lookup(sig, what, compile=False)
        if found is not None and not isinstance(found, Pending):
            self.waiting.pop(sig, None)
            return found
        if self._plan() is None:
            return owner._artifact(sig)
        if isinstance(found, Pending):
            key = found.key
            task: tuple = ("symbolic", found.ssig, found.hints)
        else:
            key = owner._artifact_key(sig)
            task = ("signature", sig)
        with self._lock:
            job = self.jobs.get(key)
            if job is None:
                log(INFO, "tier 0 answers %s while a background process compiles its %s "
                    "program", what, task[0])
                job = self.jobs[key] = self._submit(key, task)
        if job.done.is_set():
            return owner._artifact(sig)  # stored by now, or failed: the compile says why
        self.waiting[sig] = job
        return Interpreted(self, sig, job)

    def _submit(self, key: str, what: tuple) -> background.Job:
        from onnxjit.tiered import background

        owner = self.owner
        if what[0] == "symbolic":  # the symbolic program serves the shapes' calls too: a
            # shape's job whose worker is still starting compiles it instead, the others stop
            taken = None
            for old, other in list(self.jobs.items()):
                if other.request["job"][0] != "signature" or other.done.is_set():
                    continue
                if taken is None and background.retarget(other, key, what):
                    taken = self.jobs.pop(old)
                else:
                    background.cancel(other)
            if taken is not None:
                return taken
        cache_mod.STATS.misses += 1
        options = owner.options.replace(progress=False)
        request = {"data": owner._data, "hash": owner._hash, "options": options,
                   "base_dir": owner._base_dir, "name": owner._source_name, "job": what}
        return background.start(background.Job(key, request))

    def info(self) -> dict[str, Any]:
        """`CompiledModel.tier_info` of a model with tiering on."""
        jobs = [{"what": j.request["job"][0], "error": j.error,
                 "state": "done" if j.done.is_set() else "running" if j.proc else "queued"}
                for j in self.jobs.values()]
        return {"enabled": self.plan is not None or not self._planned, "why_not": self.why_not,
                "interpreted": self.interpreted, "jobs": jobs}

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for every background job of this model; True when none is left running."""
        end = None if timeout is None else time.monotonic() + timeout
        for job in list(self.jobs.values()):
            left = None if end is None else max(0.0, end - time.monotonic())
            if not job.wait(left):
                return False
        return True
