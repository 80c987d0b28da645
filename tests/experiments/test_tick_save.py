"""The tick's one-statement save of its readings (experiments/services/ticks.save_readings):
each field written as Django writes it, and a row stopped meanwhile left as it is."""

import pytest
from django.utils import timezone

from experiments.models import Experiment
from experiments.services import online as services
from experiments.services.ticks import save_readings
from harness import factories


@pytest.mark.django_db
def test_readings_are_written_as_the_fields_write_them_and_a_stopped_row_is_left(team_a, deployer, artifact_factory):
    pool = factories.pool(team_a, ready_replicas=1)
    running = []
    for i in range(3):
        endpoint = factories.endpoint(pool, artifact_factory(team_a), name=f"save-{i}")
        exp = services.experiment_create(
            user=deployer, endpoint=endpoint, name=f"s{i}", candidates=[artifact_factory(team_a)]
        )
        services.experiment_start(user=deployer, experiment=exp)
        running.append(Experiment.objects.get(pk=exp.pk))
    now = timezone.now()
    odd = {"quote": 'it\'s "x" \\ ü 🙂', "nested": [1, 2.5, None, {"a": [True, False]}], "small": 1.5e-7}
    for i, exp in enumerate(running):
        exp.history = exp.history + [{"t": now.isoformat(), "i": i, **odd}]
        exp.evidence = {"arms": {"control": {"units": i}}, **odd}
        exp.analyzed_at, exp.analysis_error = now, ""
    Experiment.objects.filter(pk=running[2].pk).update(state="stopped")  # stopped while the tick judged it
    assert save_readings(running) == 2
    assert save_readings([]) == 0
    for exp in running[:2]:
        fresh = Experiment.objects.get(pk=exp.pk)
        assert fresh.history == exp.history and fresh.evidence == exp.evidence
        assert fresh.analyzed_at == now and fresh.analysis_error == "" and fresh.state == "running"
    left = Experiment.objects.get(pk=running[2].pk)
    assert left.state == "stopped" and left.analyzed_at is None and left.evidence != running[2].evidence
