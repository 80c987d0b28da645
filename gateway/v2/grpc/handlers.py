"""The gateway's gRPC methods as grpcio serves them: the generated handlers of the inference
service (tritonclient's), health and reflection (health.py) taken from their `add_*_to_server`
functions and each guarded before the server gets it (transport.CallCaps: unary methods behind
the per-client call cap and the first-message deadline, streaming ones behind the call cap;
every request deserializer tolerant of bytes that do not parse), and the inference methods
the gateway does not serve answering UNIMPLEMENTED without grpcio's ERROR log line."""

from __future__ import annotations

import grpc
from tritonclient.grpc import service_pb2_grpc

from gateway.v2.grpc.health import INFERENCE, add_health_and_reflection
from gateway.v2.grpc.transport import CallCaps


class Handlers:
    """Stands in for the server to take the generated method handlers (tritonclient's
    `add_GRPCInferenceServiceServicer_to_server`, health's, reflection's) so each can be
    guarded first."""

    def __init__(self):
        self.services: dict[str, dict] = {}

    def add_generic_rpc_handlers(self, handlers) -> None:
        pass

    def add_registered_method_handlers(self, service: str, handlers: dict) -> None:
        self.services[service] = handlers


def unimplemented(service: str, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """A handler answering UNIMPLEMENTED at the call's HEADERS (the generated base class's
    answer, without its NotImplementedError: grpcio logs that as an ERROR with a traceback).
    Served as client-streaming, the same bytes on the wire, so it answers without waiting for
    a request message (a unary handler would hold the call until one came)."""
    message = f"the gateway does not serve {service}/{method}"

    async def refuse(requests, context):
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, message)

    kind = "stream_stream" if handler.response_streaming else "stream_unary"
    return getattr(grpc, f"{kind}_rpc_method_handler")(
        refuse, request_deserializer=None, response_serializer=handler.response_serializer
    )


def add_guarded(server, service, caps: CallCaps, gateway=None):
    """The service's methods (and health's and reflection's where `gateway` is given) on
    `server`: every unary one behind the per-client call cap and the first-message deadline,
    every streaming one behind the call cap (transport.py), the ones the gateway does not
    serve answering UNIMPLEMENTED; the Health servicer or None."""
    taken = Handlers()
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(service, taken)
    base = service_pb2_grpc.GRPCInferenceServiceServicer
    health = add_health_and_reflection(taken, gateway) if gateway is not None else None
    for name, methods in taken.services.items():
        handlers = {}
        for method, h in methods.items():
            if name == INFERENCE and getattr(type(service), method) is getattr(base, method):
                handlers[method] = unimplemented(name, method, h)
            elif h.request_streaming or h.response_streaming:
                handlers[method] = caps.guard_stream(h)
            else:
                handlers[method] = caps.guard(h)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(name, handlers),))
        server.add_registered_method_handlers(name, handlers)
    return health
