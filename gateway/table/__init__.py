"""The route table: compiled entries (tensor and LLM), their checks, where the table comes from,
the traffic split, breakers and affinity.
"""
