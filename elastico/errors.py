"""Domain exceptions, one module (STYLE.md 8).  Services map them to gRPC status codes in one
interceptor; the CLI maps them to exit status 2 with the message.

Every message names the field (a dotted path where nested), the bad value, and what is
allowed, e.g. ``capacity[2]: -1.0 is not allowed (must be finite and >= 0)``.
"""

from __future__ import annotations

from typing import Any


class ElasticoError(Exception):
    """Base class of ElastiCo's domain errors."""


class InvalidArgument(ElasticoError, ValueError):
    """Bad input: ``field`` holds ``value``, which is not ``allowed``.  -> INVALID_ARGUMENT."""

    def __init__(self, field: str, value: Any, allowed: str):
        self.field, self.value, self.allowed = field, value, allowed
        if value is True and field.startswith("--"):  # an on/off flag given: no value to quote
            super().__init__(f"{field} is not allowed ({allowed})")
        else:
            super().__init__(f"{field}: {value!r} is not allowed ({allowed})")

    def __reduce__(self):
        # picklable across processes (evaluate's workers), subclasses with other
        # constructors included: rebuilt from the three fields, not from the message
        return (_rebuild_invalid, (type(self), self.field, self.value, self.allowed))


def _rebuild_invalid(cls: type, field: str, value: Any, allowed: str) -> "InvalidArgument":
    e = cls.__new__(cls)
    InvalidArgument.__init__(e, field, value, allowed)
    return e


class NotFound(ElasticoError, LookupError):
    """An unknown job, node or file.  -> NOT_FOUND."""


class Infeasible(ElasticoError):
    """No feasible choice exists (e.g. an MMKP instance whose every group lacks a zero-demand
    item and cannot fit).  -> FAILED_PRECONDITION."""


class Overloaded(ElasticoError):
    """Too much concurrent work.  -> RESOURCE_EXHAUSTED."""
