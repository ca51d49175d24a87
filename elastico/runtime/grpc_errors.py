"""One mapping from domain exceptions to gRPC status codes (STYLE.md 8, DESIGN.md "Contracts
every service keeps").

Every ElastiCo server installs :class:`ErrorInterceptor`; servicers then raise the exceptions
of :mod:`elastico.errors` (or let the core raise them) and never build a status themselves:

==========================================  =======================  ========================
exception                                   status                   details sent to client
==========================================  =======================  ========================
:class:`~elastico.errors.InvalidArgument`   ``INVALID_ARGUMENT``     the message (field, value,
                                                                     what is allowed)
:class:`~elastico.errors.NotFound`          ``NOT_FOUND``            the message
:class:`~elastico.errors.Infeasible`        ``FAILED_PRECONDITION``  the message
:class:`~elastico.errors.Overloaded`        ``RESOURCE_EXHAUSTED``   the message
anything else                               ``INTERNAL``             a generic message with an
                                                                     error id; the traceback
                                                                     goes to the server log only
==========================================  =======================  ========================

A handler that already chose a status (``context.abort(...)``, e.g. ``DEADLINE_EXCEEDED``)
keeps it.  Unary-unary methods are wrapped; streaming methods (health ``Watch``, reflection)
pass through untouched.

Who calls it: the ``build_server`` function of each service (e.g.
:func:`elastico.pricing.server.build_server`).  Whom it calls: grpc, :mod:`elastico.errors`.
This is an adapter module: it is exempt from the no-grpc rule of tests/test_layers.py.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, Callable

import grpc

from elastico.errors import Infeasible, InvalidArgument, NotFound, Overloaded

__all__ = ["STATUS_OF", "status_for", "ErrorInterceptor", "UnaryInterceptor"]

_LOG = logging.getLogger(__name__)

#: Domain exception -> gRPC status code; the first matching row wins.
STATUS_OF: tuple[tuple[type[BaseException], grpc.StatusCode], ...] = (
    (InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (Infeasible, grpc.StatusCode.FAILED_PRECONDITION),
    (Overloaded, grpc.StatusCode.RESOURCE_EXHAUSTED),
)


def status_for(exc: BaseException) -> tuple[grpc.StatusCode, str] | None:
    """The status code and details for a domain exception; None for any other exception."""
    for cls, code in STATUS_OF:
        if isinstance(exc, cls):
            return code, str(exc)
    return None


class UnaryInterceptor(grpc.ServerInterceptor):
    """Base of the interceptors that wrap unary-unary handlers (streaming ones, e.g. health
    ``Watch`` and reflection, pass through untouched): subclasses implement :meth:`wrap`."""

    def wrap(self, method: str, behavior: Callable[[Any, grpc.ServicerContext], Any]
             ) -> Callable[[Any, grpc.ServicerContext], Any]:
        """The new handler for ``method`` (full gRPC method name) around ``behavior``."""
        raise NotImplementedError

    def intercept_service(self, continuation: Callable[[Any], Any],
                          handler_call_details: grpc.HandlerCallDetails) -> Any:
        handler = continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        return grpc.unary_unary_rpc_method_handler(
            self.wrap(handler_call_details.method, handler.unary_unary),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


class ErrorInterceptor(UnaryInterceptor):
    """Maps exceptions raised by unary-unary handlers to status codes (table above).

    It also decodes the request itself: grpc answers bytes that do not parse as the request
    message with ``INTERNAL`` ("Exception deserializing request!"), which reads as a server
    fault; here they are ``INVALID_ARGUMENT`` naming the field ``request``."""

    def intercept_service(self, continuation: Callable[[Any], Any],
                          handler_call_details: grpc.HandlerCallDetails) -> Any:
        handler = continuation(handler_call_details)
        if handler is None or handler.unary_unary is None or handler.request_deserializer is None:
            return handler
        parse, behavior = handler.request_deserializer, handler.unary_unary
        method = handler_call_details.method

        def decoded(raw: bytes, context: grpc.ServicerContext) -> Any:
            try:
                request = parse(raw)
            except Exception as exc:  # noqa: BLE001 -- protobuf's DecodeError and kin
                raise InvalidArgument("request", f"{len(raw)} bytes",
                                      f"a serialized request message of {method} "
                                      f"({type(exc).__name__}: {exc})") from None
            return behavior(request, context)

        # the outer interceptors see the raw bytes; none of them reads the request
        return grpc.unary_unary_rpc_method_handler(
            self.wrap(method, decoded), request_deserializer=None,
            response_serializer=handler.response_serializer)

    def wrap(self, method: str, behavior: Callable[[Any, grpc.ServicerContext], Any]
             ) -> Callable[[Any, grpc.ServicerContext], Any]:
        def guarded(request: Any, context: grpc.ServicerContext) -> Any:
            try:
                return behavior(request, context)
            except Exception as exc:  # noqa: BLE001 -- this is the one place that maps them
                chosen = context.code()
                if chosen is not None and chosen != grpc.StatusCode.OK:
                    raise  # the handler aborted with its own status (e.g. DEADLINE_EXCEEDED)
                mapped = status_for(exc)
                if mapped is not None:
                    _LOG.info("%s -> %s: %s", method, mapped[0].name, mapped[1])
                    context.abort(*mapped)
                error_id = uuid.uuid4().hex[:12]
                _LOG.exception("%s: internal error %s", method, error_id)
                context.abort(grpc.StatusCode.INTERNAL,
                              f"internal error in {method} (error id {error_id}; see the "
                              f"server log)")

        return guarded
