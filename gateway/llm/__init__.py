"""The OpenAI request path of LLM endpoints: handler, request bodies, backends, routing, failover,
quotas, errors, metrics.
"""
