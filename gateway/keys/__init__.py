"""Inference keys (who may call an endpoint, how fast, how many at once) and the limits every
worker of a host shares.
"""
