"""`inference.GRPCInferenceService` on GATEWAY_GRPC_PORT: ModelInfer, ModelStreamInfer
(stream.py), ServerLive/Ready, ServerMetadata, ModelReady, ModelMetadata, ModelConfig and
ModelStatistics; the other RPCs (repository, shared memory, trace, logging) answer
UNIMPLEMENTED, as does any method of no service here (grpc core's answer), without a log
line. Beside it `grpc.health.v1.Health` and server reflection (health.py). A request message
that does not parse is INVALID_ARGUMENT (transport.tolerant).

Same semantics as HTTP, through the same code: the key from the `authorization` (Bearer)
or `x-api-key` metadata (access.admit), the request's tensors as `tensors.Parsed`
(convert.parse_infer) checked by the variant's `Signature`, the variant chosen, tried and
failed over by `Inference.route` (failover.py's decisions), shadows, exposures, sampled
scores and `metrics.HotPath` under the HTTP status the outcome would have had (so the
collector and the judge read both protocols alike; 499 for a client that cancelled).
The sticky key is the metadata of the endpoint's sticky header (lower-case), the request id
`x-request-id` (kept when printable, else a new one), the deadline the client's gRPC
deadline (shortening the endpoint's, never lengthening it). Every answer carries
`x-request-id` and `x-model-variant` in its trailing metadata, and a 429/503 `retry-after`
(seconds) and `grpc-retry-pushback-ms`. Errors are gRPC statuses with the HTTP path's
messages (convert.grpc_code: 400 INVALID_ARGUMENT, 401 UNAUTHENTICATED, 403
PERMISSION_DENIED, 404 NOT_FOUND, 429 RESOURCE_EXHAUSTED, 503 UNAVAILABLE, 504
DEADLINE_EXCEEDED, …); Triton's own are passed on with the endpoint's name in place of the
internal model's.
"""

from __future__ import annotations

import asyncio
import json
import random
from array import array
from time import perf_counter

import grpc
from tritonclient.grpc import service_pb2_grpc

from gateway.contracts.feedback_rules import endpoint_token
from gateway.keys.tenants import release
from gateway.telemetry.metrics import GRPC_REFUSALS
from gateway.v2.access import admit, missing
from gateway.v2.failover import UNAVAILABLE_STATUSES, FailureReason, failure_detail
from gateway.v2.grpc.convert import http_status, metadata_dict, parse_infer
from gateway.v2.grpc.handlers import add_guarded
from gateway.v2.grpc.reads import ReadRPCs, abort, abort_http, new_trailers, trailers
from gateway.v2.grpc.sockets import ConnectionCap
from gateway.v2.grpc.stream import StreamRPC
from gateway.v2.grpc.transport import CallCaps, server_options
from gateway.v2.grpc.upstream import Channels, failure_reason
from gateway.v2.infer import UpstreamFailure
from gateway.v2.metadata import unknown_version
from gateway.wire.faults import BACKEND, CLIENT, OK, Problem
from gateway.wire.ids import exposure_id, request_id
from gateway.wire.peers import ClientKeys

UNKNOWN = "(unknown)"


class GrpcError:
    """Triton's own error answer to one attempt, passed on to the client."""

    __slots__ = ("status", "code", "details")

    def __init__(self, status: int, code, details: str):
        self.status, self.code, self.details = status, code, details


_ARRAYS = {"FP32": "f", "FP64": "d", "INT32": "i", "INT64": "q", "UINT8": "B", "INT8": "b"}


def response_scores(response, limit: int = 256) -> list:
    """The first output's first values (for the score sampler and exposures)."""
    if not response.outputs:
        return []
    output = response.outputs[0]
    if response.raw_output_contents:
        kind = _ARRAYS.get(output.datatype)
        if kind is None:
            return []
        values = array(kind)
        raw = response.raw_output_contents[0]
        values.frombytes(raw[: (len(raw) // values.itemsize) * values.itemsize][: limit * values.itemsize])
        return values.tolist()
    contents = output.contents
    for field in ("fp32_contents", "fp64_contents", "int_contents", "int64_contents"):
        values = getattr(contents, field)
        if values:
            return list(values[:limit])
    return []


class InferenceService(ReadRPCs, StreamRPC, service_pb2_grpc.GRPCInferenceServiceServicer):
    def __init__(self, gateway):
        self.gateway = gateway
        self.inference = gateway.inference
        self.hot = gateway.hot
        self.breakers = gateway.breakers
        self.channels = Channels(gateway.settings.max_body_bytes)
        self.connection_cap = None  # sockets.ConnectionCap, once serving
        self.health = None  # health.Health, once serving

    async def close(self) -> None:
        await self.channels.close()
        if self.connection_cap is not None:
            await self.connection_cap.close()
        if self.health is not None:
            await self.health.close()

    # --- health and metadata ------------------------------------------------------------
    async def ModelInfer(self, request, context):
        t0 = perf_counter()
        counted = []  # the status once the outcome is counted
        name = request.model_name  # (attempts rename the request to the Triton model)
        try:
            return await self._infer(request, context, t0, counted)
        except asyncio.CancelledError:  # the client cancelled or went away: its doing
            if not counted:
                table = self.gateway.table
                name = name if table is not None and name in table.endpoints else UNKNOWN
                remaining = context.time_remaining()
                status = 504 if remaining is not None and remaining <= 0 else 499  # its deadline, or it went away
                self.hot.done(name, "none", status, perf_counter() - t0, CLIENT)
            raise

    async def _infer(self, request, context, t0: float, counted: list):
        headers = metadata_dict(context.invocation_metadata())
        if type(headers) is Problem:
            return await self._refuse(context, counted, t0, UNKNOWN, headers, new_trailers("none"), None)
        rid = request_id(headers)
        name = request.model_name
        table = self.gateway.table
        ep = table.endpoints.get(name) if table is not None else None
        if ep is None:
            response, ours = missing(table, name, headers, rid)
            label = name if ours and table is not None else UNKNOWN
            counted.append(response[0])
            self.hot.done(label, "none", response[0], perf_counter() - t0, BACKEND if ours else CLIENT)
            await abort_http(context, response, rid)
        key, response = admit(table, ep, headers, rid, t0)
        if response is not None:
            counted.append(response[0])
            self.hot.done(name, "none", response[0], perf_counter() - t0, CLIENT, key)
            await abort_http(context, response, rid)
        if not request.model_version:  # in an experiment, an exposure: recorded under an id of the gateway's (ids.py)
            rid = exposure_id(headers, rid, ep.experiment)
        in_flight = self.hot.in_flight
        in_flight[name] = in_flight.get(name, 0) + 1
        try:
            return await self._serve(request, context, ep, headers, rid, t0, key, counted)
        finally:
            in_flight[name] -= 1
            if key is not None:
                release(key)

    async def _refuse(self, context, counted, t0, ep_name, problem, trailing, tenant, fault=CLIENT, variant="none"):
        status, _, detail = problem
        counted.append(status)
        self.hot.done(ep_name, variant, status, perf_counter() - t0, fault, tenant)
        await abort(context, status, detail, trailing)

    async def _serve(self, request, context, ep, headers, rid: str, t0: float, tenant, counted: list):
        name = ep.name
        pinned = None
        if request.model_version:
            pinned = ep.versions.get(request.model_version)
            if pinned is None:
                problem = Problem(404, "unknown_version", unknown_version(ep, request.model_version))
                return await self._refuse(context, counted, t0, name, problem, trailers(rid, "none"), tenant)
        timeout = ep.timeout_s
        remaining = context.time_remaining()
        if remaining is not None and remaining < timeout:
            timeout = max(remaining, 0.0)
        parsed = parse_infer(request)
        if type(parsed) is Problem:
            return await self._refuse(context, counted, t0, name, parsed, trailers(rid, "none"), tenant)
        routed = await self.inference.route(
            ep, parsed, headers.get(ep.sticky_key), timeout, self.attempt, request, t0, pinned
        )
        if type(routed) is Problem:
            return await self._refuse(context, counted, t0, name, routed, trailers(rid, "none"), tenant)
        variant, served, failed = routed
        if failed is not None:
            outcome, failure = failed
            detail = failure_detail(outcome, failure, ep, variant, timeout)
            wait = self.breakers.retry_wait(variant) if outcome.retry_later else None
            problem = Problem(outcome.status, outcome.code, detail)
            trailing = trailers(rid, variant.name, retry_after=wait)
            return await self._refuse(
                context, counted, t0, name, problem, trailing, tenant, outcome.fault, variant.name
            )
        if type(served) is GrpcError:  # Triton's own answer: its 4xx the client's, its 5xx the variant's
            fault = CLIENT if served.status < 500 else BACKEND
            counted.append(served.status)
            self.hot.done(name, variant.name, served.status, perf_counter() - t0, fault, tenant)
            details = served.details.replace(variant.triton_model, name)
            await context.abort(served.code, details, trailing_metadata=trailers(rid, variant.name))
        served.model_name = name
        served.model_version = variant.model_version
        counted.append(200)
        self.hot.done(name, variant.name, 200, perf_counter() - t0, OK, tenant)
        trailing = trailers(rid, variant.name)
        if ep.exposure_token_key and pinned is None:  # as X-Exposure-Token over HTTP (feedback_rules.py)
            token = endpoint_token(ep, variant.name, rid, headers.get(ep.sticky_key))
            trailing += (("x-exposure-token", token),)
        context.set_trailing_metadata(trailing)
        self._after(ep, variant, served, parsed, request, headers, rid, pinned)
        return served

    def _after(self, ep, variant, served, parsed, request, headers, rid: str, pinned) -> None:
        """Off the reply's latency: sampled scores, the exposure, a shadow copy."""
        gateway = self.gateway
        candidate = variant is not ep.stable
        if gateway.scores.sampled(candidate=candidate, at_least=ep.stable_score_rate):
            gateway.scores.observe_values(ep.name, variant.name, response_scores(served))
        if pinned is not None:
            return
        if ep.experiment:
            scores = response_scores(served, 1)
            body = json.dumps({"outputs": [{"data": scores}]}).encode() if scores else None
            gateway.exposures.record(rid, ep.experiment, ep.name, variant.name, headers.get(ep.sticky_key), body)
        if ep.shadows and ep.shadow_sample_rate > 0.0 and random.random() < ep.shadow_sample_rate:
            gateway.shadows.offer(ep, request, parsed, self.shadow_send)

    async def attempt(self, entry, request, timeout: float, ep_name: str, variant_name: str, client_bound=False):
        """One gRPC attempt on a replica: the response, Triton's own client error
        (GrpcError), or UpstreamFailure for failover.py."""
        state = entry[0]
        stub = self.channels.stub(entry)
        if stub is None:  # the route table gives this replica no gRPC port
            raise UpstreamFailure(FailureReason.UNAVAILABLE)
        request.model_name = state.model
        request.model_version = ""
        state.outstanding += 1
        t0 = perf_counter()
        try:
            response = await stub.ModelInfer(request, timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
            reason = failure_reason(code)
            status = http_status(code)
            details = exc.details() or ""
            if reason is None:
                state.failures = 0
                self.hot.observe_upstream(ep_name, variant_name, perf_counter() - t0)
                return GrpcError(status, code, details)
            if reason is FailureReason.TIMEOUT and client_bound:
                raise UpstreamFailure(FailureReason.CLIENT_DEADLINE) from None
            if reason is not FailureReason.UPSTREAM_5XX or status in UNAVAILABLE_STATUSES:
                self.breakers.failed(state, refused=reason is FailureReason.CONNECT)
            body = json.dumps({"error": details}).encode()
            raise UpstreamFailure(reason, status, None, body, served=GrpcError(status, code, details)) from None
        finally:
            state.outstanding -= 1
        self.hot.observe_upstream(ep_name, variant_name, perf_counter() - t0)
        state.failures = 0
        return response

    async def shadow_send(self, ep_name: str, shadow, entry, request, timeout: float) -> str:
        """A shadow copy over gRPC (shadow.Shadows' worker): the result label."""
        state = entry[0]
        stub = self.channels.stub(entry)
        if stub is None:
            return "unavailable"
        request.model_name = state.model
        state.outstanding += 1
        try:
            response = await stub.ModelInfer(request, timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            status = http_status(exc.code())
            if status in UNAVAILABLE_STATUSES or status >= 500:
                self.breakers.failed(state)
            return "timeout" if status == 504 else str(status)
        finally:
            state.outstanding -= 1
        state.failures = 0
        if self.gateway.scores.sampled(candidate=True):
            self.gateway.scores.observe_values(ep_name, shadow.name, response_scores(response))
        return "200"


async def start(gateway, settings):
    """The gRPC server of this worker on settings.grpc_port (SO_REUSEPORT: every worker binds
    it), with the transport limits of transport.py."""
    server = grpc.aio.server(options=server_options(settings), maximum_concurrent_rpcs=settings.grpc_max_rpcs)
    service = InferenceService(gateway)
    client_keys = ClientKeys(settings.client_cap_exempt)
    cap = ConnectionCap(
        settings.grpc_port,
        settings.grpc_max_connections_per_client,
        client_keys,
        lambda code, n: GRPC_REFUSALS.labels(code).inc(n),
    )
    caps = CallCaps(settings, client_keys, lambda code: GRPC_REFUSALS.labels(code).inc(), cap.close_peer)
    service.health = add_guarded(server, service, caps, gateway)
    port = server.add_insecure_port(f"{settings.host}:{settings.grpc_port}")
    await server.start()
    gateway.grpc_service = service
    service.connection_cap = cap
    cap.start()
    service.health.start()
    return server, port
