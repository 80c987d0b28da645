from django.apps import AppConfig


class DeploymentsConfig(AppConfig):
    name = "deployments"
