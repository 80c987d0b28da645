"""Every read of deployments the API, the dashboard, the admin, the tasks and monitoring
share: pools.py (serving pools), rollouts.py (endpoints and rollouts) and keys.py
(inference keys)."""
