"""The background compile process: `python -m onnxjit.tiered.worker`, a request on stdin.

The request (framed by `background.frames`: a pickle, the model's bytes out of band) holds the
model's bytes and hash, its options (with progress off and tiering off), its base folder and
source name, and what to compile: `("signature", sig)` builds the program of one signature as a
first call would, `("symbolic", ssig, hints)` the symbolic program of `ssig` as the specializer
would. Either stores what it builds in the disk cache, which is the whole result; the exit
status says whether it worked and stderr's last line why not. A thread exits the process when
its parent is gone, so an orphaned compile does not run on. The process lowers its priority
(`NICE`): the caller's calls, answered by tier 0 meanwhile, come first on a busy machine.
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
    job = req["job"]
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
