"""Long differential fuzzing runs of onnxjit (issue 26), and triage of a failing case.

    python tools/fuzz.py --cases 3000 --seed 100000 --out /tmp/fuzz   # a long run
    python tools/fuzz.py --triage 1234                 # where case 1234 goes wrong
    python tools/fuzz.py --mode corners --cases 3000   # one op at a time, at its corners
    python tools/fuzz.py --mode backend --cases 3000   # onnx's node cases, new values

Algorithm: cases `seed .. seed+cases-1` (`tests/fuzz_graphs.generate`) are judged
(`tests/fuzz_oracle.judge`) in child processes of `--batch` cases each, so a crash or hang in
one case costs only its batch: the child reports one JSON line per case as it finishes, and the
parent restarts after the last reported case, recording the one that killed the child as
"crash" (or "refcrash" when it died in a reference: the child names the engine it starts).
Every case whose verdict is not pass/unsupported/precision is written to --out as
`<seed>.onnx`, `<seed>.npz` (feeds of call k under "k/<name>") and `<seed>.json`
(verdict, ops, and the known bug it hits by `tests/fuzz_known.known_bug`); `summary.json`
holds the counts, known bugs apart.

Triage (`--triage SEED`) prints the first value onnxjit gets wrong (`fuzz_known.first_failure`:
each value in turn as the only output of the model cut down to what it needs), its node and
the dims of its inputs, and the known bug it is put down to, if any; when no value fails, the
first one where only one reference ran and onnxjit differs from it ("unconfirmed": onnxruntime
has no kernel, or onnx.reference fails), which is no verdict but worth a look.
`--mode corners` draws the cases from the second generator (`tests/fuzz_corners`: one op at
its attribute corners, every int type) instead of the op chains of `tests/fuzz_graphs`;
`--mode backend` from the third (`tests/fuzz_backend`: onnx's backend node cases with new
values and symbolic dims).
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS))
COUNTED = ("pass", "unsupported", "precision")


def generator(mode: str):
    """The case generator of a mode: "chains" (`fuzz_graphs`), "corners" (`fuzz_corners`) or
    "backend" (`fuzz_backend`)."""
    if mode == "corners":
        from fuzz_corners import generate
    elif mode == "backend":
        from fuzz_backend import generate
    else:
        from fuzz_graphs import generate
    return generate


def child(first: int, count: int, out: Path, mode: str) -> None:
    from fuzz_known import known_bug
    from fuzz_oracle import judge

    for seed in range(first, first + count):
        print(json.dumps({"seed": seed, "start": True}), flush=True)
        case = None
        try:
            case = generator(mode)(seed)
            v = judge(case.model, case.feeds, case.symbolic, case.spec_shapes(),
                      functools.partial(_stage, seed))
            rec = {"seed": seed, "status": v.status, "detail": v.detail[:3000],
                   "refs_agree": v.refs_agree, "notes": v.notes[:6], "ops": case.ops}
            if v.status in ("mismatch", "error"):
                rec["known"] = known_bug(case, v)
        except Exception as e:  # a generator or oracle bug: report, go on
            rec = {"seed": seed, "status": "harness", "detail": repr(e)[:2000]}
        if rec["status"] not in COUNTED:
            save(out, rec, mode, case)
        print(json.dumps(rec), flush=True)


def _stage(seed: int, name: str) -> None:
    print(json.dumps({"seed": seed, "stage": name}), flush=True)


def save(out: Path, rec: dict, mode: str, case=None) -> None:
    import numpy as np

    case = case or generator(mode)(rec["seed"])
    (out / f"{rec['seed']}.onnx").write_bytes(case.model.SerializeToString())
    np.savez(out / f"{rec['seed']}.npz", **{f"{k}/{n}": a for k, f in enumerate(case.feeds)
                                            for n, a in f.items()})
    (out / f"{rec['seed']}.json").write_text(json.dumps(rec, indent=1))


def run(first: int, cases: int, out: Path, batch: int, timeout: float, mode: str) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    counts: collections.Counter = collections.Counter()
    known: collections.Counter = collections.Counter()
    refs_agree_bad = 0
    seed, end, t0 = first, first + cases, time.time()
    log = (out / "log.jsonl").open("a")
    while seed < end:
        n = min(batch, end - seed)
        proc = subprocess.Popen([sys.executable, __file__, "--child", str(seed), str(n),
                                 "--out", str(out), "--mode", mode],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        last_start, last_stage, done = None, None, seed
        try:
            for line in proc.stdout:
                try:
                    rec = json.loads(line)
                except ValueError:  # something else printed to stdout
                    continue
                if rec.get("start"):
                    last_start, last_stage = rec["seed"], None
                    continue
                if rec.get("stage"):
                    last_stage = rec["stage"]
                    continue
                done = rec["seed"] + 1
                status = rec["status"] + (" (known)" if rec.get("known") else "")
                counts[status] += 1
                if rec.get("known"):
                    known[rec["known"]] += 1
                log.write(line)
                log.flush()
                if rec["status"] in ("mismatch", "error", "harness") and not rec.get("known"):
                    refs_agree_bad += bool(rec.get("refs_agree"))
                    print(f"{rec['seed']}: {rec['status']}: {rec['detail'][:200]}", flush=True)
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
        if proc.returncode not in (0, None) and last_start is not None and last_start >= done:
            # a reference that dies on a case (onnxruntime's session creation has) is not ours
            status = "crash" if last_stage in (None, "onnxjit") else "refcrash"
            rec = {"seed": last_start, "status": status,
                   "detail": f"rc {proc.returncode} in {last_stage or 'the generator'}"}
            counts[status] += 1
            log.write(json.dumps(rec) + "\n")
            try:  # the parent must outlive whatever broke the child
                save(out, rec, mode)
            except Exception as e:
                print(f"{last_start}: could not save the reproducer: {e!r}", flush=True)
            print(f"{last_start}: {status} ({rec['detail']})", flush=True)
            done = last_start + 1
        seed = max(done, seed + 1) if done == seed else done
    summary = {"mode": mode, "first": first, "cases": cases, "counts": dict(counts),
               "known": dict(known),
               "new_failures_where_references_agree": refs_agree_bad,
               "seconds": round(time.time() - t0)}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def triage(seed: int, mode: str = "chains") -> None:
    from fuzz_known import OK, first_failure, known_bug
    from fuzz_oracle import judge

    case = generator(mode)(seed)
    v = judge(case.model, case.feeds, case.symbolic, case.spec_shapes())
    print(f"case {seed}: {v.status}: {v.detail[:1500]}\n  notes: {v.notes}")
    node, fv = first_failure(case)
    if node is not None:
        _report(case, node, fv, "first failing value")
        print(f"  known: {known_bug(case, v)}")
        return
    # values where only one reference family ran and onnxjit differs from it are no
    # verdict against onnxjit, but worth a look: report the first one
    node, fv = first_failure(case, tuple(s for s in OK if s != "unconfirmed"))
    if node is None:
        print("no single value fails")
        return
    _report(case, node, fv, "no value fails where two references ran; first value that "
            "differs from the only reference that ran")


def _report(case, node, fv, what: str) -> None:
    from onnx import helper

    print(f"{what}: {node.output[0]}: {node.op_type} "
          f"{ {a.name: helper.get_attribute_value(a) for a in node.attribute} }\n"
          f"  inputs {[(i, case.dims.get(i)) for i in node.input]}\n"
          f"  {fv.status}: {fv.detail[:1500]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0, help="the first case's seed")
    ap.add_argument("--out", type=Path, default=Path("fuzz-out"))
    ap.add_argument("--batch", type=int, default=50, help="cases per child process")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per batch")
    ap.add_argument("--triage", type=int, help="localize the failure of one case")
    ap.add_argument("--mode", choices=("chains", "corners", "backend"), default="chains",
                    help="the generator: op chains (fuzz_graphs), one op at its attribute "
                    "corners (fuzz_corners), or the onnx backend node cases with new values "
                    "(fuzz_backend)")
    ap.add_argument("--child", nargs=2, type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    os.environ.setdefault("ONNXJIT_CACHE_DIR", "")
    if a.child:
        a.out.mkdir(parents=True, exist_ok=True)
        child(*a.child, a.out, a.mode)
    elif a.triage is not None:
        triage(a.triage, a.mode)
    else:
        print(json.dumps(run(a.seed, a.cases, a.out, a.batch, a.timeout, a.mode), indent=1))


if __name__ == "__main__":
    main()
