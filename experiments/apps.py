from django.apps import AppConfig


class ExperimentsConfig(AppConfig):
    name = "experiments"

    def ready(self):
        from deployments.route_overlays import register_route_overlay
        from experiments.selectors.online import running_overlays

        register_route_overlay(running_overlays)
