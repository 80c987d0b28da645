"""The KServe v2 wire codec: requests checked against a signature (tensors, contents) and the
replies the gateway rewrites.
"""
