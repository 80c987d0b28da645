"""Every write to deployments, one module per concern: pools.py (pool requests),
reconcile.py (the driver work tasks and the supervisor do), endpoints.py, rollouts.py,
keys.py (inference keys) and route_changes.py (what marks the route table changed).
Services take keyword arguments and the acting user, check the user's role, and write
their audit Event in the same transaction as the change."""
