"""The `onnxjit` command line: demo, run, dump, info, convert, bench.

    onnxjit demo                      compile the bundled MLP, check it against numpy, time it
    onnxjit run MODEL [-i name=x.npy] [--shape name=1x3x224x224] [-o out.npz]
    onnxjit dump MODEL DIR [--shape ...]   IR after every pass, LLVM IR and assembly into DIR
    onnxjit info MODEL                inputs, outputs, opsets, op counts, unsupported ops
    onnxjit convert IN OUT            .onnx <-> .onnxtxt (ONNX textual syntax); '-' is stdin/out
    onnxjit bench [--quick] [-k NAME] [--json F] [--markdown F] [--baseline F --tolerance 0.2]

MODEL is a `.onnx` file, a `.onnxtxt` file (the ONNX textual syntax), or `-` for model text on
stdin. Errors onnxjit raises on purpose are printed as one line (exit 2); anything else is a bug and
keeps its traceback.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

import onnxjit
from onnxjit.errors import OnnxJitError

DEMO_MODEL = Path(__file__).parent / "examples" / "mlp.onnx"


def _shapes(specs: Sequence[str]) -> dict[str, tuple[int, ...]]:
    out = {}
    for s in specs:
        name, _, dims = s.partition("=")
        out[name] = tuple(int(d) for d in dims.split("x") if d) if dims else ()
    return out


def _feeds(fn: onnxjit.runtime.CompiledModel, files: Sequence[str],
           shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    feeds: dict[str, np.ndarray] = {}
    for spec in files:
        name, _, path = spec.partition("=")
        feeds[name] = np.load(path)
    rng = np.random.default_rng(0)
    for name, dtype, dims in fn._declared:
        if name in feeds or name not in fn.input_names:  # an initializer keeps its value
            continue
        shape = shapes.get(name)
        if shape is None:
            if dims is None or not all(isinstance(d, int) for d in dims):
                raise OnnxJitError(f"input '{name}' has symbolic dims {dims}; give --shape "
                                   f"{name}=AxBxC or -i {name}=file.npy")
            shape = tuple(dims)  # type: ignore[arg-type]
        if dtype.is_float:
            feeds[name] = rng.standard_normal(shape).astype(dtype.numpy)
        else:
            feeds[name] = rng.integers(0, 2, shape).astype(dtype.numpy)
    return feeds


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
    fn = onnxjit.compile(_model_arg(args.model), cache_dir=args.cache_dir or None)
    feeds = _feeds(fn, args.input, _shapes(args.shape))
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
    fn = onnxjit.compile(_model_arg(args.model), dump_ir=args.dir, cache_dir=False)
    fn(**_feeds(fn, args.input, _shapes(args.shape)))
    files = sorted(p.relative_to(args.dir) for p in Path(args.dir).rglob("*") if p.is_file())
    for f in files:
        print(f)
    return 0


def cmd_info(args: argparse.Namespace) -> int:
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


def cmd_bench(args: argparse.Namespace) -> int:
    from onnxjit.bench.runner import main as bench_main

    return bench_main(args)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="onnxjit", description="ONNX compiler for CPUs")
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
    s = sub.add_parser("info")
    s.add_argument("model")
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
    args = p.parse_args(argv)
    handler = {"demo": cmd_demo, "run": cmd_run, "dump": cmd_dump, "info": cmd_info,
               "compile": cmd_compile, "convert": cmd_convert, "bench": cmd_bench}[args.cmd]
    try:
        return handler(args)
    except OnnxJitError as e:
        print(f"onnxjit: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
