"""Immutable value records without `dataclasses`' import-time cost.

`dataclasses` writes each class's `__init__`, `__eq__`, `__hash__`, `__repr__`, ... as source
text and `exec`s it: about 0.4 ms a class when the module is imported. A process whose first
call is served from the disk cache imports a dozen such classes (dims, value types, options,
cache entries), which was a quarter of its time to the first result.

A `Record` subclass lists its fields in `__slots__` (in order) and optional defaults in
`_defaults`; the methods are generic and shared by all records, defined once here:
construction by position or keyword, equality and hashing by the tuple of field values (same
class only), a dataclass-style repr, `replace(**changes)`, and immutability (assignment raises
AttributeError, as a frozen dataclass does). Records pickle and copy by their field values.
"""

from __future__ import annotations

from typing import Any, ClassVar


class Record:
    __slots__ = ()
    #: field -> default value for fields that may be omitted (trailing fields only)
    _defaults: ClassVar[dict[str, Any]] = {}
    _fields: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields: list[str] = []
        for klass in reversed(cls.__mro__):
            fields += [s for s in klass.__dict__.get("__slots__", ()) if s not in fields]
        cls._fields = tuple(fields)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        fields = self._fields
        if len(args) > len(fields):
            raise TypeError(f"{type(self).__name__} takes {len(fields)} fields, "
                            f"got {len(args)}")
        for name, value in zip(fields, args):
            object.__setattr__(self, name, value)
        for name in fields[len(args):]:
            if name in kwargs:
                value = kwargs.pop(name)
            elif name in self._defaults:
                value = self._defaults[name]
            else:
                raise TypeError(f"{type(self).__name__} missing field {name!r}")
            object.__setattr__(self, name, value)
        if kwargs:
            raise TypeError(f"{type(self).__name__} got unexpected or repeated field(s) "
                            f"{', '.join(sorted(kwargs))}")

    def _values(self) -> tuple:
        return tuple(getattr(self, f) for f in self._fields)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        body = ", ".join(f"{f}={getattr(self, f)!r}" for f in self._fields)
        return f"{type(self).__name__}({body})"

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"cannot assign to field {name!r} of an immutable "
                             f"{type(self).__name__}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r} of an immutable "
                             f"{type(self).__name__}")

    def __reduce__(self) -> tuple:
        return (type(self), self._values())

    def replace(self, **changes: Any) -> Record:
        """A copy with some fields changed."""
        values = {f: getattr(self, f) for f in self._fields}
        unknown = set(changes) - set(values)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field(s) {', '.join(sorted(unknown))}")
        values.update(changes)
        return type(self)(**values)
