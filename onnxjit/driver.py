"""The driver: pipelines of passes, the hook between passes (verify, dump, time), and the
stages from a model to a native artifact.

Stages a user can stop at and print (`CompiledModel.ir(stage)`): "graph" (after the graph
pipeline, per signature after binding and fusion), "loops", "llvm", "llvm-opt", "asm".

    model source --import+verify--> graph IR --GRAPH_PIPELINE--> graph IR (symbolic shapes)
      per signature: clone, bind input shapes --SIGNATURE_PIPELINE--> loop IR --codegen--> object

Environment variables are read here only (through `CompileOptions.from_user`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from onnxjit.errors import CompileError, OnnxJitError, UnsupportedError
from onnxjit.ir.graph import Model, clone_model
from onnxjit.ir.loops import Program
from onnxjit.ir.types import Sym
from onnxjit.options import CompileOptions
from onnxjit.passes import PassContext, get_pass
from onnxjit.signature import entry_type
from onnxjit.timings import timed

GRAPH_PIPELINE = ["inline-functions", "expand-contrib", "infer-shapes", "expand-ml",
                  "fold-constants", "simplify", "onehot-gather", "fold-batchnorm", "dce"]
SIGNATURE_PIPELINE = ["infer-shapes", "fold-constants", "simplify", "onehot-gather",
                      "fold-batchnorm", "flush-denormals",
                      "fold-transpose", "dce", "sink-reshape", "fuse-epilogue", "fuse",
                      "lower-to-loops", "prepack-weights", "plan-memory", "parametrize-kernels"]


def print_ir(ir: Any) -> tuple[str, str]:
    """(level, text) of a graph-level Model or a loop-level Program."""
    if isinstance(ir, Program):
        from onnxjit.ir.loop_printer import print_program

        return "loops", print_program(ir)
    from onnxjit.ir.printer import print_model

    return "graph", print_model(ir)


def verify_ir(ir: Any) -> None:
    if isinstance(ir, Program):
        from onnxjit.ir.loop_verify import verify_program

        verify_program(ir)
    else:
        from onnxjit.ir.verify import verify_model

        verify_model(ir)


class Dumper:
    """Writes `NN-<name>.<level>.txt` files into one folder, numbering them in order."""

    def __init__(self, folder: Path | None):
        self.folder = folder
        self.count = 0
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)

    def write(self, name: str, text: str) -> None:
        if self.folder is None:
            return
        (self.folder / f"{self.count:02d}-{name}").write_text(text)
        self.count += 1

    def ir(self, pass_name: str, ir: Any) -> None:
        if self.folder is not None:
            level, text = print_ir(ir)
            self.write(f"{pass_name}.{level}.txt", text)


class PassHook:
    """Runs between passes: verify (CompileError names the pass), dump, time. The IR is
    verified after every pass with `options.verify` True (the test suite's setting), once at
    the end of the pipeline (`end`) with None, the default: as LLVM does by default, a user's
    compile does not pay for checking every intermediate IR (a tenth of a CNN's compile
    time); never with False."""

    def __init__(self, options: CompileOptions, dumper: Dumper):
        self.options = options
        self.dumper = dumper
        self.timings: list[tuple[str, float]] = []

    def __call__(self, pass_name: str, ir: Any, seconds: float) -> None:
        self.timings.append((pass_name, seconds))
        if self.options.verify:
            self._verify(pass_name, ir)
        self.dumper.ir(pass_name, ir)

    def end(self, pass_name: str, ir: Any) -> None:
        """After the pipeline's last pass, `pass_name`."""
        if self.options.verify is None:
            self._verify(pass_name, ir)

    @staticmethod
    def _verify(pass_name: str, ir: Any) -> None:
        try:
            with timed("verify"):
                verify_ir(ir)
        except OnnxJitError as e:
            raise CompileError(f"IR invalid after pass '{pass_name}': {e}") from e


def run_passes(ir: Any, names: list[str], ctx: PassContext | None = None,
               hook: Callable[[str, Any, float], None] | None = None) -> Any:
    """Run a pipeline of pass names over `ir`; `hook(name, ir, seconds)` after each. Each
    pass is a stage `pass <name>` of the running compile's timings (`onnxjit.timings`)."""
    ctx = ctx or PassContext()
    passes = [get_pass(n) for n in names]  # unknown names fail before anything runs
    for p in passes:
        t0 = time.perf_counter()
        try:
            with timed(f"pass {p.name}"):
                ir = p.run(ir, ctx).ir
        except (OnnxJitError, MemoryError):  # a MemoryError is the sizes', not a pass bug
            raise
        except Exception as e:
            raise CompileError(f"pass '{p.name}' failed: {type(e).__name__}: {e}") from e
        if hook is not None:
            hook(p.name, ir, time.perf_counter() - t0)
    end = getattr(hook, "end", None)
    if end is not None and passes:
        end(passes[-1].name, ir)
    return ir


def import_model(source: Any, options: CompileOptions, dumper: Dumper | None = None) -> Model:
    """Import, verify and run the graph pipeline.

    The pipeline runs without the defaults of overridable inputs (`overridable_defaults`): a
    pass reading such an input's default as a constant (folding it, shaping from it) would
    bake it into every program, and a caller's own value would be ignored. They are set back
    afterwards, for the runtime to feed when a call omits the input."""
    from onnxjit.importer import load_model

    dumper = dumper or Dumper(None)
    with timed("import"):
        model = load_model(source, base_dir=options.base_dir)
        if options.verify is not False:
            verify_ir(model)
    dumper.ir("import", model)
    defaults = overridable_defaults(model)
    for k in defaults:
        model.graph.inputs[k].const = None
    model = run_passes(model, GRAPH_PIPELINE, PassContext(options), PassHook(options, dumper))
    for k, arr in defaults.items():
        model.graph.inputs[k].const = arr
    return model


def overridable_defaults(model: Model) -> dict[int, Any]:
    """Position -> default value of each main-graph input that also has an initializer, when
    that initializer is only a default the caller may override (IR version 4 and later, or
    unset). In IR <= 3 models every initializer must also be listed as an input, so such
    inputs are taken as the constants they almost always are (folded, as before)."""
    if 0 < model.ir_version <= 3:
        return {}
    return {k: v.const for k, v in enumerate(model.graph.inputs) if v.const is not None}


def bind_signature(model: Model, signature: tuple, options: CompileOptions,
                   dumper: Dumper | None = None) -> Model:
    """Bind the input shapes of `signature` ((DType, shape) per input) in a copy of the graph and
    run the graph part of the signature pipeline (shapes are then static unless they depend on
    data: see `onnxjit.staged`)."""
    dumper = dumper or Dumper(None)
    m = clone_model(model)
    for v, entry in zip(m.graph.inputs, signature):
        v.type = entry_type(entry)  # a tensor, or a sequence/optional with its contents' types
        if v.const is not None:  # an input with a default value is an input here
            v.const = None
    dumper.ir("bind-shapes", m)
    return specialize(m, options, dumper)


def specialize(m: Model, options: CompileOptions, dumper: Dumper | None = None) -> Model:
    """Run the graph part of the signature pipeline on a graph whose inputs are bound."""
    dumper = dumper or Dumper(None)
    graph_part = SIGNATURE_PIPELINE[:SIGNATURE_PIPELINE.index("lower-to-loops")]
    return run_passes(m, graph_part, PassContext(options), PassHook(options, dumper))


def lower_bound(m: Model, options: CompileOptions, dumper: Dumper | None = None) -> Program:
    """Lower a specialised graph (all shapes static) to the loop IR."""
    dumper = dumper or Dumper(None)
    rest = SIGNATURE_PIPELINE[SIGNATURE_PIPELINE.index("lower-to-loops"):]
    return run_passes(m, rest, PassContext(options), PassHook(options, dumper))


def lower_symbolic(model: Model, signature: tuple, hints: dict[str, int],
                   options: CompileOptions, dumper: Dumper | None = None) -> Program:
    """The program for every size of the symbolic dims of `signature` ((DType, shape) per
    input, shapes holding `Sym`s), with `hints` as the sizes performance choices assume
    (`ir.symbolic`). `NotSymbolic` names a node that needs concrete sizes."""
    from onnxjit.ir.symbolic import symbolic_session
    from onnxjit.passes.lower_to_loops import NotSymbolic
    from onnxjit.staged import first_dynamic

    dumper = dumper or Dumper(None)
    with symbolic_session(hints) as assumed:
        bound = bind_signature(model, signature, options, dumper)
        cut = first_dynamic(bound)
        if cut is not None:
            nodes = bound.graph.nodes
            if cut < len(nodes):
                raise NotSymbolic(nodes[cut], "its sizes depend on data, or it runs on the host")
            raise UnsupportedError("graph inputs or outputs that are not tensors need stages")
        _check_symbols(bound, {s for _, shape in signature for d in shape
                               if isinstance(d, Sym) for s in d.symbols()})
        loop_part = [p for p in SIGNATURE_PIPELINE[SIGNATURE_PIPELINE.index("lower-to-loops"):]
                     if p != "parametrize-kernels"]  # it runs after materialize-dims here
        program = run_passes(bound, loop_part + ["materialize-dims", "parametrize-kernels"],
                             PassContext(options), PassHook(options, dumper))
        program.assumptions = list(assumed)
    return program


def _check_symbols(model: Model, known: set[str]) -> None:
    """Every size of the graph is an expression of the input dims (NotSymbolic otherwise)."""
    from onnxjit.ir.types import TensorType
    from onnxjit.passes.lower_to_loops import NotSymbolic

    for n in model.graph.nodes:
        for v in n.outputs:
            t = v.type if v is not None else None
            if isinstance(t, TensorType) and t.shape is not None:
                for d in t.shape:
                    if isinstance(d, Sym) and not d.symbols() <= known:
                        raise NotSymbolic(n, f"its output {v.describe()} has size {d}, not "
                                             "an expression of the input dims")


def lower_signature(model: Model, signature: tuple, options: CompileOptions,
                    dumper: Dumper | None = None) -> tuple[Model, Program]:
    """`bind_signature` then `lower_bound`. Returns (final graph, program)."""
    m = bind_signature(model, signature, options, dumper)
    return m, lower_bound(m, options, dumper)


def ir_text(model: Model, sig: tuple, options: CompileOptions, stage: str, desc: str) -> str:
    """`CompiledModel.ir`: the text of a stage ("graph", "loops", "llvm", "llvm-opt", "asm")
    for signature `sig` (described as `desc` in errors)."""
    stages = ("graph", "loops", "llvm", "llvm-opt", "asm")
    if stage not in stages:
        raise OnnxJitError(f"unknown stage '{stage}'; stages are {stages}")
    from onnxjit.staged import first_dynamic

    final = bind_signature(model, sig, options)
    if stage == "graph":
        return print_ir(final)[1]
    if first_dynamic(final) is not None:
        raise OnnxJitError(f"the last signature ({desc}) runs in stages because shapes depend "
                           "on input values; its graph IR is available, and `dump_ir` writes "
                           "every stage")
    program = lower_bound(final, options)
    if stage == "loops":
        return print_ir(program)[1]
    from onnxjit.codegen import compile_program

    texts: dict[str, str] = {}
    compile_program(program, opt_level=options.opt_level,
                    dump=lambda name, text: texts.__setitem__(name, text))
    return texts[{"llvm": "llvm.ll", "llvm-opt": "llvm-opt.ll", "asm": "asm.s"}[stage]]
