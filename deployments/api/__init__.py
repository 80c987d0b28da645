"""REST API v1 of deployments: serving pools (pools.py), endpoints, rollouts and the
gateway's route table (rollouts.py), inference keys (keys.py); urls.py routes them."""
