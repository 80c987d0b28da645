"""With the embedded store (EXPERIMENT_STORE=chdb), `make run` supervises the one process that
owns it (manage.py run_experiment_data), and the web process, which never opens it, shows the
last analysis tick's results from the relational database."""

import pytest

from config.management.commands.run_platform import Command
from experiments.models import Experiment
from experiments.selectors import online as selectors


def test_make_run_supervises_the_store_owner_only_with_the_embedded_store(settings):
    settings.EXPERIMENT_STORE = "postgres"
    assert "experiment-data" not in Command().processes(8000)
    settings.EXPERIMENT_STORE = "chdb"
    processes = Command().processes(8000)
    assert processes["experiment-data"][-1] == "run_experiment_data"
    assert {"web", "worker", "beat", "gateway", "pools"} <= set(processes)


@pytest.mark.django_db
def test_the_web_process_reads_the_last_tick_where_it_may_not_read_the_store(served, monkeypatch):
    _, experiment = served
    monkeypatch.setattr(selectors, "store_readable_here", lambda: False)
    before = selectors.experiment_results(experiment=experiment)  # no tick yet: zeros, nothing opened
    assert all(arm["units"] == 0 for arm in before["arms"].values())
    arms = {a.name: {"units": 7, "exposures": 9, "clicks": 2} for a in experiment.arms.all()}
    Experiment.objects.filter(pk=experiment.pk).update(
        evidence={"arms": arms, "candidates": {}, "srm": {"flagged": False}, "feedback": {"attributed": 4}}
    )
    experiment.refresh_from_db()
    after = selectors.experiment_results(experiment=experiment)
    assert after["arms"] == arms and after["feedback"] == {"attributed": 4} and after["progress"]["have"] == 7


@pytest.mark.django_db
def test_the_api_feedback_door_never_opens_another_processs_store(served, deployer_api, monkeypatch, settings):
    """No log and a store the web process may not open: a clear 503, nothing stored here."""
    from experiments.models import Feedback
    from experiments.services import feedback

    endpoint, _ = served
    settings.EVENT_LOG_URL = ""
    monkeypatch.setattr(feedback, "store_readable_here", lambda: False)
    events = [{"event_id": "e1", "type": "click", "unit_key": "u1"}]
    reply = deployer_api.post("/api/v1/feedback/", {"endpoint": endpoint.name, "events": events}, format="json")
    assert reply.status_code == 503 and reply.json()["code"] == "feedback_log_unavailable", reply.content
    assert "POST /v2/feedback" in reply.json()["detail"] and not Feedback.objects.exists()


def test_the_embedded_columnar_store_is_the_default_and_make_run_says_so(settings):
    """EXPERIMENT_STORE unset: chdb, owned by make run's child experiment-data, said in its log."""
    from config import experiment_data
    from config.env import PLATFORM

    assert PLATFORM["EXPERIMENT_STORE"].default == "chdb"
    settings.EXPERIMENT_STORE, settings.EVENT_LOG_URL = "chdb", ""
    assert "experiment-data" in Command().processes(8000)
    said = experiment_data.experiment_data_said()
    assert "store chdb, in-process in the child experiment-data" in said and "log Redis Streams" in said


@pytest.mark.django_db
def test_the_store_owner_s_heartbeat_is_a_healthz_component(settings):
    """The loop's heartbeat is what /healthz's `experiment-data` reads; a stalled loop records none."""
    from config.health import _expected_checks
    from experiments.management.commands import run_experiment_data as owner

    settings.HEALTHZ_EXPECT = ["experiment-data"]
    check = _expected_checks()["experiment-data"]
    with pytest.raises(RuntimeError, match="no heartbeat yet"):
        check()
    beat = owner.LoopHeartbeat({"store": "chdb", "log": "Redis Streams"})
    beat.beat_once()
    assert check()["store"] == "chdb" and check()["log"] == "Redis Streams"
    from config.models import ComponentHeartbeat

    ComponentHeartbeat.objects.all().delete()
    stalled = owner.LoopHeartbeat({"store": "chdb"})
    stalled.last_round -= owner.LOOP_STALL_S + 1
    stalled.beat_once()
    with pytest.raises(RuntimeError, match="no heartbeat yet"):
        check()
