"""Cost estimates of loop-IR statements, for choosing what runs in parallel and how.

`body_cost(body)` estimates the scalar operations of one execution of a body: a loop is its
trip count (`trip_count`: a constant one, or with size hints the usual one of a loop up to a
run-time size, else `_UNKNOWN_TRIP`) times its body plus one, a Matmul its multiply-adds (few
rows count as GEMV_ROWS rows: bound by streaming B), an op its `_OP_COST` (polynomials cost
more), anything else one. A size defined in the body as `min(c, ...)` (a block of a run-time
extent: a symbolic conv's block of positions) counts as c, the usual full block.
"""

from __future__ import annotations

from onnxjit.ir.loops import Const, Loop, Matmul, Op, Stmt

#: minimum work per chunk handed to a thread (the pool runs loops of less than two serially)
CHUNK_OPS = 1 << 18
#: `body_cost` of a product of fewer rows: it takes about as long as one of this many rows
GEMV_ROWS = 16
#: rough cost of the scalar ops expanded to polynomials or guarded sequences
_OP_COST = {"exp": 8, "expm1": 8, "log": 8, "tanh": 10, "erf": 10, "sigmoid": 8, "pow": 20,
            "div": 4, "rem": 4, "sin": 40, "cos": 40, "tan": 44}
#: trip count assumed for a loop whose bounds are variables (in our lowerings: blocks of a
#: tiled loop, some tens of iterations)
_UNKNOWN_TRIP = 64


def trip_count(loop: Loop, hints: dict | None = None) -> int | None:
    """The loop's trip count when its bounds are constants (or, with `hints`, the usual one
    of a loop up to a run-time size: `Kernel.size_hints`)."""
    if isinstance(loop.start, Const) and isinstance(loop.stop, Const):
        return max(0, -(-(int(loop.stop.value) - int(loop.start.value)) // loop.step))
    if hints and isinstance(loop.start, Const) and loop.stop in hints:
        return max(0, -(-(hints[loop.stop] - int(loop.start.value)) // loop.step))
    return None


#: integer ops `derive_hints` evaluates on usual sizes
_ARITH = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
          "div": lambda x, y: x // y if y else None, "min": min, "max": max}


def _usual(args: tuple, hints: dict | None) -> list[int | None]:
    """Each integer operand's usual value: a constant's, a hinted variable's, else None."""
    return [int(a.value) if isinstance(a, Const) else (hints or {}).get(a) for a in args]


def derive_hints(body: list[Stmt], hints: dict) -> None:
    """Add to `hints` the usual value of each integer Op of `body` (top level) whose
    arguments all have one (constants, hinted sizes): a symbolic kernel's block sizes
    computed from its dims before its loops, so their work counts as usual, not as
    `_UNKNOWN_TRIP`. A variable assigned again takes its last value."""
    derived: set = set()
    for s in body:
        if not isinstance(s, Op) or s.dst.dtype.is_float or \
                (s.dst in hints and s.dst not in derived):
            continue
        # integer arithmetic only: a comparison's bool may come from float args (inf, NaN)
        arith = s.op in _ARITH and len(s.args) == 2 and \
            not any(a.dtype.is_float for a in s.args)
        known = _usual(s.args, hints) if arith else []
        v = _ARITH[s.op](*known) if arith and None not in known else None
        if v is not None:
            hints[s.dst] = v
            derived.add(s.dst)
        elif s.dst in derived:
            del hints[s.dst]


def hinted(x: object, hints: dict | None) -> int:
    """A Matmul size as a number: itself, its hint, or a guess."""
    if isinstance(x, int):
        return x
    return (hints or {}).get(x, _UNKNOWN_TRIP)


def body_cost(body: list[Stmt], hints: dict | None = None) -> int:
    """Estimated scalar operations of one execution of `body`."""
    total = 0
    own = False  # `hints` is the caller's until this body defines a block extent
    for s in body:
        if isinstance(s, Op) and s.op in ("min", "max") and not s.dst.dtype.is_float:
            # a block's extent: at most the constant or the usual size (a float min is data:
            # -inf, NaN), and a max with 0 of one (the last block's, clamped) is that extent
            known = _usual(s.args, hints)
            bound = [x for x in known if x is not None]
            if bound and (s.op == "min" or None not in known):
                if not own:
                    hints, own = dict(hints or {}), True
                hints[s.dst] = (min if s.op == "min" else max)(bound)
        if isinstance(s, Loop):
            t = trip_count(s, hints)
            total += (_UNKNOWN_TRIP if t is None else t) * (body_cost(s.body, hints) + 1)
        elif isinstance(s, Matmul):  # few rows: bound by streaming B, as GEMV_ROWS rows
            total += (max(hinted(s.m, hints), GEMV_ROWS) * hinted(s.n, hints)
                      * hinted(s.k, hints))
        elif isinstance(s, Op):
            total += _OP_COST.get(s.op, 1)
        else:
            total += 1
    return max(1, total)


