"""REST API v1 of the registry: the catalog (models, versions, teams, events) and the
factory's builds and artifacts; urls.py routes both."""
