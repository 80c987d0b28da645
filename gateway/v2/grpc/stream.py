"""`ModelStreamInfer`: Triton's bidirectional inference stream (tritonclient's
`start_stream`/`async_stream_infer`, the aio client's `stream_infer`, perf_analyzer
`--streaming`), each message served as a unary `ModelInfer` is — the same keys, rate limits
and quotas per message, the same signature checks, split, failover, exposures and metrics —
and answered in the stream as Triton answers: a `ModelStreamInferResponse` holding the
`infer_response` (its `id` the request's), or an `error_message` (the unary path's words)
with the request's `id`, the stream going on.

What a unary call carries in its trailing metadata, a message's answer carries in its
`infer_response.parameters`: `x-request-id`, `x-model-variant` (and `x-exposure-token` where
the endpoint issues one). The stream's metadata (key, sticky key, deadline) holds for every
message; a client `x-request-id` in it is not reused (each message gets an id of its own, so
exposures and logs never share one).

Bounds, so a stream costs what one unary call in progress costs: the stream counts as one
call against its client's GATEWAY_GRPC_MAX_CALLS_PER_CLIENT while it is open
(transport.CallCaps.guard_stream); its messages are served one at a time in order (as Triton
answers a non-decoupled model's stream); its first message must come within
GATEWAY_GRPC_FIRST_MESSAGE_TIMEOUT_S and each next one within GATEWAY_IDLE_TIMEOUT_S, else
the stream ends with DEADLINE_EXCEEDED; a stream that never ends is closed with its
connection at GATEWAY_GRPC_MAX_CONNECTION_AGE_S (transport.py). A message that does not parse
ends the stream with INVALID_ARGUMENT.
"""

from __future__ import annotations

import asyncio

import grpc
from tritonclient.grpc import service_pb2 as pb

from gateway.v2.grpc.transport import Malformed

ID_PARAMETERS = ("x-request-id", "x-model-variant", "x-exposure-token")


class Refused(Exception):
    """One message's refusal: its answer in the stream, not the stream's end."""

    def __init__(self, code, details: str, trailing):
        self.code, self.details, self.trailing = code, details, trailing


class MessageContext:
    """The stream's context as one message's `ModelInfer` sees it: `abort` refuses that
    message only, trailing metadata is kept for the message's answer."""

    __slots__ = ("context", "metadata", "trailing")

    def __init__(self, context, metadata: tuple):
        self.context, self.metadata, self.trailing = context, metadata, ()

    def invocation_metadata(self):
        return self.metadata

    def time_remaining(self):
        return self.context.time_remaining()

    def peer(self):
        return self.context.peer()

    def set_trailing_metadata(self, trailing) -> None:
        self.trailing = trailing

    async def abort(self, code, details="", trailing_metadata=()):
        raise Refused(code, details, trailing_metadata)


def _tagged(response: pb.ModelInferResponse, trailing) -> pb.ModelInferResponse:
    for key, value in trailing:
        if key in ID_PARAMETERS:
            response.parameters[key].string_param = value
    return response


class StreamRPC:
    """Mixed into service.InferenceService (which has `gateway` and `ModelInfer`)."""

    async def ModelStreamInfer(self, requests, context):
        settings = self.gateway.settings
        metadata = tuple((key, value) for key, value in context.invocation_metadata() or () if key != "x-request-id")
        wait = settings.grpc_first_message_timeout_s
        while True:
            try:
                async with asyncio.timeout(wait):
                    request = await context.read()
            except TimeoutError:
                await context.abort(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"no request message on this stream within {wait:g} s",
                )
            if request is grpc.aio.EOF:
                return
            if type(request) is Malformed:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.detail)
            wait = settings.idle_timeout_s
            await context.write(await self._stream_message(request, context, metadata))

    async def _stream_message(self, request, context, metadata: tuple) -> pb.ModelStreamInferResponse:
        message_id, name = request.id, request.model_name  # (attempts rename the request to the Triton model)
        scoped = MessageContext(context, metadata)
        try:
            served = await self.ModelInfer(request, scoped)
        except Refused as refused:
            response = _tagged(pb.ModelInferResponse(id=message_id, model_name=name), refused.trailing)
            return pb.ModelStreamInferResponse(error_message=refused.details, infer_response=response)
        served.id = message_id
        return pb.ModelStreamInferResponse(infer_response=_tagged(served, scoped.trailing))
