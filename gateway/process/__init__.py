"""The gateway process: the server (dispatch, route-table install, start and stop), the worker
supervisor, the one settings reader, and what operators read (health, /metrics, /status).
"""
