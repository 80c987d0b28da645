# ruff: noqa: F811  (the fixtures imported from tests/experiments are arguments of the test)
"""`modelplane datasets build | list | get` against a live server, over a small real run of
captured requests and clicks in a chdb store: the build prints its id and figures, list and get
show it, a bad window is exit 4 naming what is wrong (nothing written), another team sees nothing."""

from datetime import UTC, datetime, timedelta

import pytest

from experiments.models import Dataset
from modelplane_cli import exits
from tests.experiments.captured import column_store, served, traffic  # noqa: F401  (fixtures)
from tests.experiments.conftest import empty_mlflow_db, mlflow_store  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def test_datasets_build_list_get(cli_as, column_store, served, deployer, bob, mlflow_store, tmp_path, settings):
    settings.VAR_DIR = tmp_path
    endpoint, experiment = served
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=3)
    traffic(column_store, endpoint, experiment, start, n=60)
    cli = cli_as(deployer)
    end = (start + timedelta(hours=1)).isoformat()
    built = cli(
        "datasets", "build", endpoint.name, "ctr", "--start", start.isoformat(), "--end", end,
        "--experiment", experiment.public_id, "--field", "id",
    )  # fmt: skip
    assert built.code == 0, built
    dataset_id = built.out.strip()
    assert Dataset.objects.get(public_id=dataset_id).statistics["rows"] == 60

    listed = cli("datasets", "list")
    assert listed.code == 0 and dataset_id in listed.out and "ctr" in listed.out, listed
    shown = cli("dataset", "get", dataset_id)
    assert shown.code == 0 and "60 (" in shown.out and "no version yet" in shown.out, shown
    assert cli("datasets", "show", dataset_id).out == shown.out

    late = cli("datasets", "build", endpoint.name, "ctr", "--start", "-2h", "--end", "-1m")
    assert late.code == exits.API and "attribution_open" in late.err and "end" in late.err, late
    typo = cli("datasets", "build", endpoint.name, "ctr", "--start", "yesterday", "--end", "-1h")
    assert typo.code == exits.USAGE and "ISO time" in typo.err, typo
    assert Dataset.objects.count() == 1

    other = cli_as(bob)
    assert "No datasets." in other("datasets", "list").out
    assert other("datasets", "get", dataset_id).code == exits.API
