"""KServe v2 over gRPC (`inference.GRPCInferenceService`, the protos tritonclient ships) on
the gateway's GATEWAY_GRPC_PORT, with the semantics of the HTTP surface: service.py (the
RPCs), convert.py (a ModelInferRequest as the `Parsed` the signature checks read, and the
gateway's HTTP-shaped answers as gRPC statuses), upstream.py (channels to the replicas'
gRPC ports)."""
