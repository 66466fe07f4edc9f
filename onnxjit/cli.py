"""The `onnxjit` command line: demo, run, dump, info, compile, convert, bench.

    onnxjit demo                      compile the bundled MLP, check it against numpy, time it
    onnxjit run MODEL -i name=x.npy [-o out.npz]    (or --random [--shape name=1x3x224x224])
    onnxjit dump MODEL DIR [-i ...] [--shape ...]   IR after every pass, LLVM IR and assembly
    onnxjit info MODEL [--timings [--shape ...]]    inputs, outputs, opsets, op counts; with
                                      --timings, a compile and the seconds of each stage
    onnxjit compile MODEL [--hint batch=8]          the program for every size, into the cache
    onnxjit convert IN OUT            .onnx <-> .onnxtxt (ONNX textual syntax); '-' is stdin/out
    onnxjit bench [--quick] [-k NAME] [--json F] [--markdown F] [--baseline F --tolerance 0.2]
    onnxjit --version;  -v / -vv before the command: the `onnxjit` logger's info / debug lines
    onnxjit cache info | clear | prune [--max-size 2G] [--cache-dir DIR]

MODEL is a `.onnx` file, a `.onnxtxt` file (the ONNX textual syntax), or `-` for model text on
stdin. A user's mistake (an error onnxjit raises on purpose, a file that cannot be read or
written) is printed as one line (exit 2), Ctrl-C as "onnxjit: interrupted" (exit 130); anything
else is a bug and keeps its traceback. Compiles over a second show their progress on stderr
when it is a terminal (`ONNXJIT_PROGRESS=0` turns that off).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

import onnxjit
from onnxjit import cli_inputs
from onnxjit.errors import OnnxJitError

DEMO_MODEL = Path(__file__).parent / "examples" / "mlp.onnx"


def cmd_demo(args: argparse.Namespace) -> int:
    from onnxjit.importer import load_model

    print(f"onnxjit {onnxjit.__version__}: demo on {DEMO_MODEL.name} (MLP 784-128-128-10, "
          "ReLU, symbolic batch)")
    t0 = time.perf_counter()
    fn = onnxjit.compile(DEMO_MODEL, cache_dir=args.cache_dir or None)
    x = np.random.default_rng(0).standard_normal((32, 784)).astype(np.float32)
    (y,) = fn(x)
    t_first = time.perf_counter() - t0
    # numpy reference from the model's own weights
    g = load_model(DEMO_MODEL).graph
    w = {v.name: v.const for v in g.initializers}
    h = np.maximum(x @ w["w1"] + w["b1"], 0)
    h = np.maximum(h @ w["w2"] + w["b2"], 0)
    ref = h @ w["w3"] + w["b3"]
    err = float(np.max(np.abs(y - ref)) / (np.max(np.abs(ref)) + 1e-30))
    ok = err < 1e-5
    n = 200
    t1 = time.perf_counter()
    for _ in range(n):
        fn(x)
    t_jit = (time.perf_counter() - t1) / n
    t1 = time.perf_counter()
    for _ in range(n):
        h = np.maximum(x @ w["w1"] + w["b1"], 0)
        h = np.maximum(h @ w["w2"] + w["b2"], 0)
        h @ w["w3"] + w["b3"]
    t_np = (time.perf_counter() - t1) / n
    info = fn.cache_info()
    print(f"  compile + first run (batch 32): {t_first * 1e3:8.1f} ms "
          f"(disk cache hits {info['disk_hits']}, misses {info['misses']})")
    print(f"  onnxjit  per call (batch 32):   {t_jit * 1e6:8.1f} us")
    print(f"  numpy    per call (batch 32):   {t_np * 1e6:8.1f} us")
    print(f"  max relative error vs numpy:    {err:.2e}  -> {'OK' if ok else 'MISMATCH'}")
    return 0 if ok else 1


def _model_arg(model: str):  # noqa: ANN202 - a path or a parsed ModelProto
    """A MODEL argument as `compile`/`load_model` take it: `-` reads model text from stdin."""
    if model == "-":
        return onnxjit.parse(sys.stdin.read())
    return model


def cmd_run(args: argparse.Namespace) -> int:
    """Run the model once on the values of `-i` files (or random ones with `--random`); it
    compiles at once (no tier 0: a one-call process would exit before a background compile
    stores anything, and the next run would start from nothing again)."""
    fn = onnxjit.compile(_model_arg(args.model), cache_dir=args.cache_dir or None,
                         tiered=False)
    feeds = cli_inputs.feeds(fn, args.input, args.shape, args.random, fn.required_inputs)
    t0 = time.perf_counter()
    outs = fn(**feeds)
    dt = time.perf_counter() - t0
    for name, y in zip(fn.output_names, outs):
        summary = f"mean {y.mean():.6g}" if y.size and y.dtype != np.bool_ else ""
        print(f"{name}: {y.dtype}{list(y.shape)} {summary}")
    print(f"first call (compile + run): {dt * 1e3:.1f} ms")
    if args.output:
        np.savez(args.output, **dict(zip(fn.output_names, outs)))
    return 0


def cmd_dump(args: argparse.Namespace) -> int:
    """Compile with dumps into DIR; inputs not given by `-i` are random (only their shapes
    matter to the code, unless shapes depend on values)."""
    fn = onnxjit.compile(_model_arg(args.model), dump_ir=args.dir, cache_dir=False)
    fn(**cli_inputs.feeds(fn, args.input, args.shape, True, fn.required_inputs))
    files = sorted(p.relative_to(args.dir) for p in Path(args.dir).rglob("*") if p.is_file())
    for f in files:
        print(f)
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    """What the model declares and uses; `--timings`: compile it and time each stage."""
    if args.timings:
        return _timings(args)
    if args.shape:
        raise OnnxJitError("--shape sizes the compile of --timings; add --timings")
    from collections import Counter

    from onnxjit.importer import load_model
    from onnxjit.ir.opdef import lookup
    from onnxjit.supported import expanded

    m = load_model(_model_arg(args.model))
    g = m.graph
    print(f"ir_version {m.ir_version}, opsets {m.opset_imports}, producer "
          f"{m.producer_name} {m.producer_version}")
    for v in g.inputs:
        print(f"  input  {v.name}: {v.type}")
    for name, v in zip(g.output_names or [], g.outputs):
        print(f"  output {name}: {v.type}")
    ops = Counter(n.qualified_op for n in g.walk())
    print(f"  {sum(ops.values())} nodes, {len(g.initializers)} initializers")
    per_shape = []
    for op_name, k in sorted(ops.items()):
        n = next(n for n in g.walk() if n.qualified_op == op_name)
        d = lookup(n.domain, n.op)
        mark = "" if d or expanded(n.domain, n.op) else "   <- not supported"
        if d and not (d.symbolic or d.scalar):
            mark, _ = "   (sizes per shape)", per_shape.append(op_name)
        print(f"    {op_name:24s} {k:5d}{mark}")
    if per_shape:
        print(f"  ops whose code needs concrete sizes: {', '.join(per_shape)}; with "
              "specialize 'auto'/'dynamic' the model compiles a program per input shape")
    print(f"  first calls: {_tier0(args.model)}")
    return 0


def _tier0(model: str) -> str:
    """Whether tier 0 (`onnxjit.tiered`) answers this model's calls while it compiles."""
    from onnxjit.driver import import_model
    from onnxjit.options import CompileOptions
    from onnxjit.tiered.interpreter import NotPlannable, Plan
    from onnxjit.tiered.tier import MIN_NODES

    try:
        g = import_model(_model_arg(model), CompileOptions.from_user({"cache_dir": False})).graph
    except OnnxJitError as e:
        return f"compiled at once ({e})"
    if len(g.nodes) < MIN_NODES:
        return f"compiled at once ({len(g.nodes)} nodes compile quickly)"
    try:
        Plan(g)
    except NotPlannable as e:
        return f"compiled at once (tier 0 cannot run it: {e})"
    return "tier 0 (numpy) answers while a background process compiles"


def _timings(args: argparse.Namespace) -> int:
    """Compile the model (no disk cache: a cold compile) for its declared shapes, or those of
    `--shape`, and print the seconds of each compile stage (`CompiledModel.timings`)."""
    from onnxjit.progress import format_table
    from onnxjit.timings import grouped_total

    fn = onnxjit.compile(_model_arg(args.model), cache_dir=False)
    fn._prepare(tuple(cli_inputs.zeros(fn, args.shape)))  # compiles; runs nothing
    timings = fn.timings()
    for what, stages in timings.items():
        if len(what) > 100:  # old models list their weights as inputs: hundreds of them
            what = f"{what[:90]}, ... ({what.count(': ')} inputs)"
        print(f"{what}:")
        print(format_table(stages))
    groups = grouped_total(timings)
    print(f"compile total: {sum(groups.values()):.3f} s; by group: "
          + ", ".join(f"{g} {s:.3f} s" for g, s in sorted(groups.items(), key=lambda x: -x[1])))
    return 0


def _hints(specs: Sequence[str]) -> dict[str, int]:
    out = {}
    for spec in specs:
        name, _, value = spec.partition("=")
        if not name or not value.isdigit():
            raise OnnxJitError(f"--hint takes symbol=size (an int), got '{spec}'")
        out[name] = int(value)
    return out


def cmd_compile(args: argparse.Namespace) -> int:
    """Build the program for every size of the model's symbolic dims into the disk cache."""
    fn = onnxjit.compile(_model_arg(args.model), cache_dir=args.cache_dir or None,
                         specialize=args.specialize)
    t0 = time.perf_counter()
    r = fn.precompile(**_hints(args.hint))
    dt = time.perf_counter() - t0
    where = fn.options.cache_dir or "memory only (no disk cache)"
    if not r["symbols"]:
        print(f"every size is fixed: compiled its program in {dt:.2f} s -> {where}")
    elif r["symbolic"]:
        print(f"one program for every {', '.join(r['symbols'])}: {dt:.2f} s -> {where}")
    else:
        print(f"no program for every size of {', '.join(r['symbols'])}: {r['reason']}; "
              "each shape compiles its own")
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    """Binary protobuf <-> text: the output's suffix (or `-`, text on stdout) picks the form."""
    from onnxjit.importer import parse_model
    from onnxjit.model_source import read_model_bytes

    src = _model_arg(args.input)
    data, _ = read_model_bytes(src)
    proto = parse_model(data, f"model file '{args.input}'")
    if args.output == "-":
        sys.stdout.write(onnxjit.to_text(proto))
        return 0
    out = Path(args.output)
    if out.suffix == ".onnxtxt":
        out.write_text(onnxjit.to_text(proto), encoding="utf-8", errors="surrogateescape")
    elif out.suffix == ".onnx":
        out.write_bytes(proto.SerializeToString())
    else:
        raise OnnxJitError(f"cannot tell the output format of '{out}': use a .onnx or "
                           ".onnxtxt suffix, or '-' for text on stdout")
    return 0


def cmd_cache(args: argparse.Namespace) -> int:
    """`onnxjit cache info | clear | prune [--max-size SIZE]` on the disk cache folder."""
    from datetime import datetime

    from onnxjit import cache_prune
    from onnxjit.cache_prune import human as format_size
    from onnxjit.options import CompileOptions, parse_size

    opts = CompileOptions.from_user({"cache_dir": args.cache_dir})
    folder = opts.cache_dir
    if folder is None:
        raise OnnxJitError("the disk cache is disabled ($ONNXJIT_CACHE_DIR is empty)")
    cap = opts.cache_max_bytes
    if args.action == "info":
        i = cache_prune.info(folder)
        print(f"cache folder: {folder}{'' if folder.is_dir() else ' (not created yet)'}")
        print(f"entries: {i['entries']}, {format_size(i['bytes'])}; cap "
              f"{format_size(cap) if cap else 'none'}")
        if i["entries"]:
            when = [datetime.fromtimestamp(i[k]).strftime("%Y-%m-%d %H:%M")
                    for k in ("oldest", "newest")]
            print(f"least recently used {when[0]}, most recently {when[1]}")
        return 0
    if args.action == "clear":
        r = cache_prune.clear(folder)
        print(f"removed {r['removed']} entries ({format_size(r['removed_bytes'])}) from "
              f"{folder}")
        return 0
    limit = cap if args.max_size is None else parse_size(args.max_size, "--max-size")
    if limit is None:
        raise OnnxJitError("no size cap is set: give --max-size SIZE (e.g. 500M)")
    r = cache_prune.prune(folder, limit)
    print(f"removed {r['removed']} entries ({format_size(r['removed_bytes'])}); "
          f"{r['entries']} left, {format_size(r['bytes'])} (cap {format_size(limit)})")
    return 0


def _cache_parser(sub: Any) -> None:
    s = sub.add_parser("cache", help="show, clear or prune the disk cache")
    s.add_argument("action", choices=("info", "clear", "prune"))
    s.add_argument("--max-size", default=None,
                   help="prune: remove the least recently used entries down to this size "
                        "(e.g. 500M, 2G; default: the cap, $ONNXJIT_CACHE_MAX_SIZE or 5G)")
    s.add_argument("--cache-dir", default=None,
                   help="the folder (default $ONNXJIT_CACHE_DIR, else ~/.cache/onnxjit)")


def cmd_bench(args: argparse.Namespace) -> int:
    from onnxjit.bench.runner import main as bench_main

    return bench_main(args)


def main(argv: Sequence[str] | None = None) -> int:
    """The `onnxjit` command: Ctrl-C ends it with one line and exit status 130 (the shell's
    for SIGINT), wherever it lands (a compile leaves no partial cache entry: `cache`)."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        sys.stdout.flush()
        print("onnxjit: interrupted", file=sys.stderr)
        return 130


def _logging(verbosity: int) -> None:
    """-v: the `onnxjit` logger's info lines (compiles) on stderr; -vv: debug (cache hits)."""
    if verbosity:
        import logging

        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("onnxjit: %(message)s"))
        log = logging.getLogger("onnxjit")
        log.addHandler(handler)
        log.setLevel(logging.DEBUG if verbosity > 1 else logging.INFO)


def _main(argv: Sequence[str] | None) -> int:
    p = argparse.ArgumentParser(prog="onnxjit", description="ONNX compiler for CPUs")
    p.add_argument("--version", action="version", version=f"onnxjit {onnxjit.__version__}")
    p.add_argument("-v", "--verbose", action="count", default=0,
                   help="log compiles (-v) and cache hits and misses (-vv) on stderr")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="compile and check the bundled example model")
    d.add_argument("--cache-dir", default=None)
    for name in ("run", "dump"):
        s = sub.add_parser(name)
        s.add_argument("model")
        if name == "dump":
            s.add_argument("dir")
        s.add_argument("-i", "--input", action="append", default=[], help="name=file.npy")
        s.add_argument("--shape", action="append", default=[], help="name=AxBxC")
        if name == "run":
            s.add_argument("-o", "--output", default=None, help="write outputs to .npz")
            s.add_argument("--cache-dir", default=None)
            s.add_argument("--random", action="store_true",
                           help="random values for the inputs not given by -i")
    s = sub.add_parser("info")
    s.add_argument("model")
    s.add_argument("--timings", action="store_true",
                   help="compile (no disk cache) and print the seconds of each stage")
    s.add_argument("--shape", action="append", default=[],
                   help="name=AxBxC: the size of symbolic dims for --timings")
    s = sub.add_parser("compile", help="build the program for every size of the model's "
                                       "symbolic dims into the disk cache (a warm start)")
    s.add_argument("model")
    s.add_argument("--hint", action="append", default=[],
                   help="symbol=size: a symbolic dim's usual size (tiling decisions)")
    s.add_argument("--cache-dir", default=None)
    s.add_argument("--specialize", default="auto", choices=("auto", "dynamic"))
    c = sub.add_parser("convert", help="convert between .onnx and .onnxtxt (text syntax)")
    c.add_argument("input", help=".onnx, .onnxtxt, or - (text on stdin)")
    c.add_argument("output", help=".onnx, .onnxtxt, or - (text on stdout)")
    b = sub.add_parser("bench", help="benchmarks against onnxruntime (ratios)")
    b.add_argument("--quick", action="store_true", help="a subset, short timing (~2 min)")
    b.add_argument("--json", default=None, help="write results as JSON")
    b.add_argument("--markdown", default=None, help="write a markdown table")
    b.add_argument("--baseline", default=None,
                   help="exit 1 when a ratio fell by more than --tolerance against this JSON")
    b.add_argument("--tolerance", type=float, default=0.2)
    b.add_argument("-k", default=None,
                   help="only benchmarks whose name contains this (comma: any of several)")
    b.add_argument("--seconds", type=float, default=None,
                   help="timing duration per benchmark (default 3, --quick 0.4)")
    b.add_argument("--tiny", action="store_true",
                   help="tiny model sizes (a smoke run; the light models keep their size)")
    b.add_argument("--no-subprocess", action="store_true",
                   help="skip the cold/warm compile and memory measurements in subprocesses")
    b.add_argument("--note", default=None, help="the note stored in the JSON report")
    b.add_argument("--ort-spinning", choices=("on", "off"), default="on",
                   help="onnxruntime's idle-thread spinning (its default: on); its spinning "
                        "threads take the core onnxjit's workers need when interleaved")
    b.add_argument("--interleave", choices=("blocks", "calls"), default="blocks",
                   help="alternate blocks of calls after pauses (default), or single calls: "
                        "then each engine's idle spinning threads slow the other's next call")
    _cache_parser(sub)
    args = p.parse_args(argv)
    _logging(args.verbose)
    handler = {"demo": cmd_demo, "run": cmd_run, "dump": cmd_dump, "info": cmd_info,
               "compile": cmd_compile, "convert": cmd_convert, "bench": cmd_bench,
               "cache": cmd_cache}[args.cmd]
    try:
        return handler(args)
    except OnnxJitError as e:
        print(f"onnxjit: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a file of the user's (an output path, a --baseline) unusable
        where = f" '{e.filename}'" if e.filename else ""
        print(f"onnxjit: error: {e.strerror or e}{where}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
