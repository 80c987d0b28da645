"""The migration that brought inference keys keeps existing clients working: endpoints
that existed before it (which the gateway treated as public) stay public; endpoints made
after it are closed by default."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("deployments", "0004_replica_retiring_since")]
AFTER = [("deployments", "0005_inference_keys")]


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def test_existing_endpoints_stay_public_new_ones_are_closed():
    old = migrate(BEFORE)
    try:
        team = old.get_model("auth", "Group").objects.create(name="legacy")
        pool = old.get_model("deployments", "ServingPool").objects.create(name="legacy-pool", team=team)
        old.get_model("deployments", "Endpoint").objects.create(name="legacy-ep", team=team, pool=pool)
    finally:
        new = migrate(AFTER)
        leaf = MigrationExecutor(connection).loader.graph.leaf_nodes()
        MigrationExecutor(connection).migrate(leaf)
    Endpoint = new.get_model("deployments", "Endpoint")
    assert Endpoint.objects.get(name="legacy-ep").public is True
    fresh = Endpoint.objects.create(
        name="fresh-ep", team_id=Endpoint.objects.get().team_id, pool_id=Endpoint.objects.get().pool_id
    )
    assert fresh.public is False
