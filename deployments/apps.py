from django.apps import AppConfig


class DeploymentsConfig(AppConfig):
    name = "deployments"

    def ready(self):
        from deployments.services import route_changes

        route_changes.connect()  # the route table is rebuilt once per change (deployments/routes.py)
