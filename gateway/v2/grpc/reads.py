"""The read RPCs of the gRPC service: ServerLive/Ready/Metadata, ModelReady, ModelMetadata,
ModelConfig, ModelStatistics — the HTTP surface's answers (gateway/v2/metadata.py: the variant
a request would reach, the key check, the renaming in replies.py) over gRPC, each read from a
replica of that variant through its gRPC port; and the trailing metadata and aborts every
RPC of the service answers with."""

from __future__ import annotations

import json
from time import perf_counter

import grpc
from google.protobuf import json_format
from tritonclient.grpc import service_pb2 as pb

from gateway.keys.tenants import release
from gateway.kserve.replies import public_config, public_stats
from gateway.v2.access import admit, missing
from gateway.v2.grpc.convert import grpc_code, metadata_dict
from gateway.v2.metadata import SERVER_METADATA, read_variant, readable_endpoints, unknown_version
from gateway.wire.faults import Problem
from gateway.wire.ids import request_id


class ReadRPCs:
    """Mixed into service.InferenceService (which has `gateway` and `channels`)."""

    async def ServerLive(self, request, context):
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request, context):
        gateway = self.gateway
        return pb.ServerReadyResponse(ready=gateway.table is not None and not gateway.stopping)

    async def ServerMetadata(self, request, context):
        return pb.ServerMetadataResponse(**SERVER_METADATA)

    async def _readable(self, context, name: str, version: str):
        """(endpoint, variant, rid) the caller may read, or aborts the RPC."""
        headers = metadata_dict(context.invocation_metadata())
        if type(headers) is Problem:
            await abort(context, headers[0], headers[2], new_trailers("none"))
        rid = request_id(headers)
        table = self.gateway.table
        ep = table.endpoints.get(name) if table is not None else None
        if ep is None:
            await abort_http(context, missing(table, name, headers, rid)[0], rid)
        key, response = admit(table, ep, headers, rid, perf_counter())
        if response is not None:
            await abort_http(context, response, rid)
        if key is not None:
            release(key)
        variant = read_variant(ep, version or None, headers.get(ep.sticky_key))
        if variant is None:
            await abort(context, 404, unknown_version(ep, version), trailers(rid, "none"))
        return ep, variant, rid

    async def ModelReady(self, request, context):
        """ready: false for an endpoint or version the table lacks, as Triton answers for a
        model it lacks, and alike for one the caller may not read (access.py)."""
        headers = metadata_dict(context.invocation_metadata())
        if type(headers) is Problem:
            await abort(context, headers[0], headers[2], new_trailers("none"))
        rid = request_id(headers)
        table = self.gateway.table
        ep = table.endpoints.get(request.name) if table is not None else None
        if ep is None:
            missing(table, request.name, headers, rid)  # the work a closed endpoint's refusal costs
            return pb.ModelReadyResponse(ready=False)
        key, response = admit(table, ep, headers, rid, perf_counter())
        if response is not None:
            if response[0] == 404:  # not the caller's to see: as if it were not there
                return pb.ModelReadyResponse(ready=False)
            await abort_http(context, response, rid)
        if key is not None:
            release(key)
        variant = read_variant(ep, request.version or None, headers.get(ep.sticky_key))
        if variant is None:
            return pb.ModelReadyResponse(ready=False)
        context.set_trailing_metadata(trailers(rid, variant.name))
        return pb.ModelReadyResponse(ready=variant.available)

    async def _replica_call(self, context, ep, variant, rid: str, method: str, message):
        """One read RPC on a replica of the variant (its Triton model named), or aborts."""
        entry = variant.pick() or (variant.replicas[0] if variant.replicas else None)
        stub = self.channels.stub(entry) if entry is not None else None
        if stub is None:
            detail = f"endpoint {ep.name!r}: variant {variant.name!r} has no ready replica with a gRPC port"
            await abort(context, 503, detail, trailers(rid, variant.name, retry_after=1))
        try:
            return await getattr(stub, method)(message, timeout=ep.timeout_s)
        except grpc.aio.AioRpcError as exc:
            details = (exc.details() or "").replace(variant.triton_model, ep.name)
            await context.abort(exc.code(), details, trailing_metadata=trailers(rid, variant.name))

    async def ModelMetadata(self, request, context):
        ep, variant, rid = await self._readable(context, request.name, request.version)
        message = pb.ModelMetadataRequest(name=variant.triton_model)
        reply = await self._replica_call(context, ep, variant, rid, "ModelMetadata", message)
        reply.name = ep.name
        del reply.versions[:]
        reply.versions.append(variant.model_version)
        context.set_trailing_metadata(trailers(rid, variant.name))
        return reply

    async def ModelConfig(self, request, context):
        ep, variant, rid = await self._readable(context, request.name, request.version)
        message = pb.ModelConfigRequest(name=variant.triton_model)
        reply = await self._replica_call(context, ep, variant, rid, "ModelConfig", message)
        # the HTTP path's renaming (replies.public_config) on the config's JSON form
        config = json_format.MessageToJson(reply.config, preserving_proto_field_name=True).encode()
        public = public_config(config, 200, ep.name, variant)
        out = pb.ModelConfigResponse()
        json_format.Parse(public, out.config)
        context.set_trailing_metadata(trailers(rid, variant.name))
        return out

    async def ModelStatistics(self, request, context):
        if not request.name:
            return await self._all_statistics(context)
        ep, variant, rid = await self._readable(context, request.name, request.version)
        stats = await self._variant_statistics(context, ep, variant, rid)
        context.set_trailing_metadata(trailers(rid, variant.name))
        return json_format.ParseDict({"model_stats": stats}, pb.ModelStatisticsResponse())

    async def _variant_statistics(self, context, ep, variant, rid: str) -> list:
        message = pb.ModelStatisticsRequest(name=variant.triton_model)
        entries = [entry for entry in variant.replicas if not entry[0].broken] or variant.replicas[:1]
        bodies = []
        for entry in entries:
            stub = self.channels.stub(entry)
            if stub is None:
                continue
            try:
                reply = await stub.ModelStatistics(message, timeout=ep.timeout_s)
            except grpc.aio.AioRpcError as exc:
                details = (exc.details() or "").replace(variant.triton_model, ep.name)
                await context.abort(exc.code(), details, trailing_metadata=trailers(rid, variant.name))
            as_dict = json_format.MessageToDict(reply, preserving_proto_field_name=True)
            bodies.append(json.dumps(as_dict).encode())
        return public_stats(bodies, ep.name, variant)

    async def _all_statistics(self, context):
        headers = metadata_dict(context.invocation_metadata())
        table = self.gateway.table
        if type(headers) is Problem or table is None:
            await abort(context, 503, "no route table loaded yet", new_trailers("none"))
        rid = request_id(headers)
        stats = []
        for ep in readable_endpoints(table, headers):
            stats += await self._variant_statistics(context, ep, ep.stable, rid)
        context.set_trailing_metadata(trailers(rid, "none"))
        return json_format.ParseDict({"model_stats": stats}, pb.ModelStatisticsResponse())

    # --- inference ----------------------------------------------------------------------


def new_trailers(variant: str) -> tuple:
    return trailers(request_id({}), variant)


def trailers(rid: str, variant: str, retry_after: float | None = None) -> tuple:
    out = (("x-request-id", rid), ("x-model-variant", variant))
    if retry_after is not None:
        seconds = max(1, int(-(-retry_after // 1)))
        out += (("retry-after", str(seconds)), ("grpc-retry-pushback-ms", str(int(retry_after * 1000))))
    return out


async def abort(context, status: int, detail: str, trailing: tuple):
    await context.abort(grpc_code(status), detail, trailing_metadata=trailing)


async def abort_http(context, response, rid: str):
    """The gateway's HTTP-shaped error (status, headers, KServe body) as a gRPC status."""
    status, headers, body = response
    try:
        detail = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        detail = "refused"
    wait = headers.get("Retry-After")
    trailing = trailers(rid, headers.get("X-Model-Variant", "none"), float(wait) if wait else None)
    await abort(context, status, detail, trailing)
