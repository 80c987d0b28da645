"""What the gateway tells the platform: metrics, sampled scores, exposures and feedback relayed
onto the durable log.
"""
