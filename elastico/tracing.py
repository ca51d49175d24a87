"""The tracing interface the scheduling code sees: spans by name with attributes, nothing else
(pure: no OpenTelemetry import here; :mod:`elastico.runtime.telemetry` adapts it to the OpenTelemetry
SDK).  Algorithm code takes a :class:`Tracer` argument and defaults to :data:`NOOP`, so it runs
the same with or without tracing and never needs the SDK.

Span names of one scheduling round (issue 6, DESIGN.md): ``elastico.round`` (root),
``shapes.generate``, ``pricing.solve`` (attributes ``pricing.iterations``, ``pricing.gap``,
``pricing.price.<resource>``), ``predictor.predict`` (``predictor.pairs``,
``predictor.model_version``), ``placer.place``, ``placer.bind``.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, ContextManager, Iterator, Protocol, runtime_checkable

__all__ = ["Span", "Tracer", "NoopTracer", "NOOP"]


@runtime_checkable
class Span(Protocol):
    def set_attribute(self, key: str, value: Any) -> None:
        """Attach ``key = value`` (str, bool, int, float or a sequence of one of them)."""
        ...


@runtime_checkable
class Tracer(Protocol):
    def span(self, name: str, attributes: dict[str, Any] | None = None) -> ContextManager[Span]:
        """A child span of the current one (a root when there is none), open for the
        ``with`` block; an exception leaving the block marks the span as failed."""
        ...


class _NoopSpan:
    def set_attribute(self, key: str, value: Any) -> None:
        pass


class NoopTracer:
    """Records nothing (the default)."""

    @contextmanager
    def span(self, name: str, attributes: dict[str, Any] | None = None) -> Iterator[Span]:
        yield _NoopSpan()


#: The shared do-nothing tracer (stateless, so one instance serves everybody).
NOOP = NoopTracer()
