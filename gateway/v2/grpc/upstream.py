"""Channels to the replicas' gRPC ports: one grpc.aio channel per replica address in each
worker (HTTP/2 multiplexes every request over it), made on first use and closed when the
route table no longer names the address."""

from __future__ import annotations

import grpc
from tritonclient.grpc import service_pb2_grpc

from gateway.v2.failover import FailureReason


class Channels:
    def __init__(self, max_message_bytes: int):
        self.options = [
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.enable_retries", 0),  # the gateway's failover decides about retries
        ]
        self.by_target: dict[str, tuple] = {}

    def stub(self, entry):
        """The stub for this replica entry's gRPC address, or None when the route table gives none."""
        target = entry[3]
        found = self.by_target.get(target)
        if found is None:
            if not target:
                return None
            channel = grpc.aio.insecure_channel(target, options=self.options)
            found = self.by_target[target] = (channel, service_pb2_grpc.GRPCInferenceServiceStub(channel))
        return found[1]

    async def retain(self, targets: set[str]) -> None:
        """Close the channels of addresses no route names any more."""
        for target in list(self.by_target):
            if target not in targets:
                channel, _ = self.by_target.pop(target)
                await channel.close()

    async def close(self) -> None:
        await self.retain(set())


def failure_reason(code: grpc.StatusCode) -> FailureReason | None:
    """Why a gRPC attempt failed, for failover.py; None: Triton's answer to pass on."""
    if code is grpc.StatusCode.UNAVAILABLE:
        return FailureReason.CONNECT
    if code is grpc.StatusCode.DEADLINE_EXCEEDED:
        return FailureReason.TIMEOUT
    if code is grpc.StatusCode.NOT_FOUND:
        return FailureReason.NOT_LOADED
    if code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.RESOURCE_EXHAUSTED):
        return FailureReason.UPSTREAM_5XX
    return None
