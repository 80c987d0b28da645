"""Every read of deployments the API, the dashboard, the admin, the tasks and monitoring
share: pools.py (serving pools) and rollouts.py (endpoints and rollouts)."""
