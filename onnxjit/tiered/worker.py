"""The background compile process: `python -m onnxjit.tiered.worker`, two requests on stdin.

    read the model (framed by `background.frames`: a pickle, the model's bytes out of band):
        its bytes and hash, options (progress and tiering off), base folder and source name
    import it, run the graph pipeline, load the code generator  (all a compile needs first)
    write READY to stdout
    read the job: ("signature", sig) builds one signature's program as a first call would,
        ("symbolic", ssig, hints) the symbolic program of `ssig` as the specializer would
    build it; it goes to the disk cache, which is the whole result

The job is asked for only when the process is ready (some 0.4-0.6 s after its start): until then
the caller may still change its mind (`background.retarget`: a stream whose second shape arrived
meanwhile wants the symbolic program, not the first shape's), with no process started in vain.
The exit status says whether it worked and stderr's last line why not. A thread exits the
process when its parent is gone, so an orphaned compile does not run on. The process lowers its
priority (`NICE`): the caller's calls, answered by tier 0 meanwhile, come first on a busy
machine.
"""

from __future__ import annotations

import os
import sys
import threading
import time

#: the compile's scheduling priority below the caller's (its code generation workers inherit
#: it): the lowest, so the scheduler hands a core to a tier-0 call at once. Measured against 5,
#: cold streams from an empty cache, alternated, 3 runs each: OCR recognizer 0.39-0.43 ->
#: 0.34-0.36 s, decoder 0.167-0.174 -> 0.157-0.162 s, detector 0.79-0.87 -> 0.78-0.85 s,
#: MiniLM (whose compile finishes mid-stream) 2.77-2.85 -> 2.77-2.80 s
NICE = 19
#: what the worker writes to stdout once it is ready for its job
READY = b"R"


def _watch_parent(parent: int) -> None:
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(3)


def main() -> int:
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    try:
        os.nice(NICE)  # the caller's calls (tier 0) come first
    except (AttributeError, OSError):
        pass
    from onnxjit.tiered.background import read_request

    req = read_request(sys.stdin.buffer)
    from onnxjit.runtime import CompiledModel

    cm = CompiledModel(req["data"], req["hash"], req["options"], req["base_dir"], req["name"])
    cm._graph()  # the model meta may come from the disk cache: the graph is built here
    from onnxjit.codegen import compile_program  # noqa: F401  (the code generator, loaded)
    from onnxjit.codegen.target import init

    init()
    sys.stdout.buffer.write(READY)
    sys.stdout.buffer.flush()
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # the caller reads no more of it
    job = read_request(sys.stdin.buffer)["job"]
    if job[0] == "signature":
        cm._lookup(job[1], req["name"])
    else:
        cm._symbolic.program(job[1], job[2])
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # noqa: BLE001 - the parent reads the last line
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
