"""The inputs of a command-line run: `-i name=file.npy`, `--shape name=AxB`, `--random`.

Algorithm of `feeds`: 1) every `-i` names an input of the model and a readable `.npy` (or an
`.npz` holding an array of that name, or a single array); 2) every input without a value and
without a default in the model is missing: an error naming it, unless `random` asks for random
values (then its shape is the `--shape` given, else its declared shape, which must be
concrete). Nothing is invented silently: a run's outputs come from the user's values or from
values the user asked to be random. Each mistake is an `InputError` saying what was expected.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from onnxjit.errors import InputError

SHAPE_HELP = "name=AxBxC, e.g. x=1x3x224x224 (a scalar: x=)"


def parse_shapes(specs: Sequence[str], names: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """`--shape` values -> {input name: shape}."""
    out = {}
    for spec in specs:
        name, eq, dims = spec.partition("=")
        parts = dims.split("x") if dims else []
        if not eq or not name or not all(p.isdigit() for p in parts):
            raise InputError(f"--shape takes {SHAPE_HELP}; got '{spec}'")
        out[_known(name, names, "--shape")] = tuple(int(p) for p in parts)
    return out


def _known(name: str, names: Sequence[str], flag: str) -> str:
    if name not in names:
        raise InputError(f"{flag} names '{name}', which is not an input of the model; its "
                         f"inputs are {list(names)}")
    return name


def read_inputs(specs: Sequence[str], names: Sequence[str]) -> dict[str, Any]:
    """`-i name=file.npy` values -> {input name: array}."""
    out: dict[str, Any] = {}
    for spec in specs:
        name, eq, path = spec.partition("=")
        if not eq or not name or not path:
            raise InputError(f"-i takes name=file.npy; got '{spec}'")
        out[_known(name, names, "-i")] = _load(name, path)
    return out


def _load(name: str, path: str) -> Any:
    try:
        data = np.load(path, allow_pickle=False)
    except OSError as e:
        raise InputError(f"cannot read the file '{path}' given for input '{name}': "
                         f"{e.strerror or e}") from None
    except ValueError as e:
        raise InputError(f"the file '{path}' given for input '{name}' is not a .npy or "
                         f".npz array file ({e})") from None
    if isinstance(data, np.lib.npyio.NpzFile):
        with data:
            keys = list(data.files)
            if name in keys:
                return data[name]
            if len(keys) == 1:
                return data[keys[0]]
        raise InputError(f"the archive '{path}' holds {keys}, none named '{name}'")
    return data


def feeds(fn: Any, files: Sequence[str], shape_specs: Sequence[str], random: bool,
          required: Sequence[str]) -> dict[str, Any]:
    """The values of a run (see the module docstring); `required` are the inputs without a
    default in the model."""
    names = fn.input_names
    given = read_inputs(files, names)
    shapes = parse_shapes(shape_specs, names)
    if shapes and not random:
        raise InputError("--shape sizes the random values of --random; give the inputs "
                         "with -i name=file.npy, or add --random")
    missing = [n for n in required if n not in given]
    if missing and not random:
        raise InputError(f"missing input(s) {missing}: give each with -i name=file.npy, or "
                         "ask for random values with --random (and --shape name=AxB for "
                         "symbolic dims)")
    rng = np.random.default_rng(0)
    for name, dtype, dims in fn._declared:
        if name in missing or (random and name in shapes and name not in given):
            given[name] = _random(rng, name, dtype, shapes.get(name, dims))
    return given


def _random(rng: np.random.Generator, name: str, dtype: Any, dims: Any) -> np.ndarray:
    if dims is None or not all(isinstance(d, int) for d in dims):
        raise InputError(f"input '{name}' has dims {dims}, not all known: give --shape "
                         f"{name}=AxB... (or -i {name}=file.npy)")
    np_dtype = getattr(dtype, "numpy", None)
    if np_dtype is None:
        raise InputError(f"input '{name}' is a {dtype}, which --random cannot make: give it "
                         "with -i")
    if dtype.is_float:
        return rng.standard_normal(tuple(dims)).astype(np_dtype)
    return rng.integers(0, 2, tuple(dims)).astype(np_dtype)


def zeros(fn: Any, shape_specs: Sequence[str]) -> list[np.ndarray]:
    """Arrays of the declared (or `--shape`) shapes: a signature to compile, never run."""
    shapes = parse_shapes(shape_specs, fn.input_names)
    out = []
    for name, dtype, dims in fn._declared:
        dims = shapes.get(name, dims)
        if dims is None or not all(isinstance(d, int) for d in dims):
            raise InputError(f"input '{name}' has dims {dims}, not all known: give --shape "
                             f"{name}=AxB...")
        if getattr(dtype, "numpy", None) is None:
            raise InputError(f"input '{name}' is a {dtype}: --timings compiles tensor "
                             "inputs only")
        out.append(np.zeros(tuple(dims), dtype.numpy))
    return out
