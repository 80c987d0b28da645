"""`grpc.health.v1.Health` (Check, Watch) and server reflection on the gateway's gRPC port,
from grpcio's maintained packages (grpcio-health-checking, grpcio-reflection), so
`grpc_health_probe`, Kubernetes' `grpc:` probes and `grpcurl` work as against Triton.

Health follows what ServerReady answers: SERVING once a route table is loaded and while the
worker is not stopping, else NOT_SERVING, for the server ("") and for
`inference.GRPCInferenceService`; other service names are NOT_FOUND (Check) or
SERVICE_UNKNOWN (Watch). Check answers from the state now; a Watch stream is told of a
change within FOLLOW_S. Reflection lists the inference service, health and reflection
itself: the public Triton protos, nothing about the endpoints. Both need no key. Watch and
reflection are streams: each counts as a call in progress against its client's cap
(transport.CallCaps.guard_stream).
"""

from __future__ import annotations

import asyncio

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_reflection.v1alpha._async import ReflectionServicer
from tritonclient.grpc import service_pb2

# every service the gRPC port serves (the adversarial registry lists each of their methods)
SERVICES = (
    service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"],
    health_pb2.DESCRIPTOR.services_by_name["Health"],
    reflection_pb2.DESCRIPTOR.services_by_name["ServerReflection"],
)
INFERENCE, HEALTH, REFLECTION = (service.full_name for service in SERVICES)
FOLLOW_S = 1.0  # a wake-up a second while idle: next to nothing
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class Health(HealthServicer):
    def __init__(self, gateway):
        super().__init__()
        self.gateway = gateway
        self._server_status = {"": NOT_SERVING, INFERENCE: NOT_SERVING}
        self.task: asyncio.Task | None = None

    def ready(self) -> bool:
        gateway = self.gateway
        return gateway.table is not None and not gateway.stopping

    async def Check(self, request, context):
        """Live (no FOLLOW_S lag): what ServerReady would answer now."""
        if request.service in ("", INFERENCE):
            return health_pb2.HealthCheckResponse(status=SERVING if self.ready() else NOT_SERVING)
        await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service[:100]!r}")

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._follow())

    async def _follow(self) -> None:
        last = None
        while True:
            status = SERVING if self.ready() else NOT_SERVING
            if status != last:
                for service in ("", INFERENCE):
                    await self.set(service, status)
                last = status
            await asyncio.sleep(FOLLOW_S)

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        await self.enter_graceful_shutdown()


def add_health_and_reflection(taker, gateway) -> Health:
    """Register both services' method handlers on `taker` (handlers.Handlers, which guards
    them); the Health servicer, to start and close with the server."""
    health = Health(gateway)
    health_pb2_grpc.add_HealthServicer_to_server(health, taker)
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(
        ReflectionServicer((INFERENCE, HEALTH, REFLECTION)), taker
    )
    return health
