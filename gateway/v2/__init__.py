"""The KServe v2 request path over HTTP (infer, metadata, feedback, access, failover, shadow);
grpc/ is the same over gRPC.
"""
