"""The CPython/numpy object layout and context block the fast-call trampoline relies on.

Plain constants (no imports), shared by the code generator (`pyentry`) and the runtime
(`onnxjit.fastcall`, which verifies every offset on live objects before using the trampoline).
"""

#: Word index of each field of the context block.
CTX_FIELDS = ("ndarray_type", "array_new", "tuple_new", "long_from", "decref", "save_thread",
              "restore_thread", "entry", "consts", "arena_slot", "n_in", "n_out", "release_gil",
              "in_desc", "out_desc", "needs_arena")
CTX = {name: k for k, name in enumerate(CTX_FIELDS)}

#: PyObject / PyArrayObject / PyArray_Descr / PyTupleObject byte offsets (64-bit CPython and
#: numpy's PyArrayObject_fields); `onnxjit.fastcall.layout_ok` verifies each at start-up.
OB_TYPE, AR_DATA, AR_ND, AR_DIMS, AR_DESCR, AR_FLAGS = 8, 16, 24, 32, 56, 64
DESCR_BYTEORDER, DESCR_TYPE_NUM = 26, 28
TUPLE_ITEMS = 24
CAPSULE_POINTER = 16
NPY_C_CONTIGUOUS, NPY_ALIGNED = 0x1, 0x100
MAX_ARRAYS = 64

