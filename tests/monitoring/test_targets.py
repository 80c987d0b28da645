"""Where the collector's targets come from: MONITORING_TARGETS plus any source function."""

import pytest

from monitoring.collection import targets
from monitoring.collection.targets import ScrapeTarget

EXTRA = [ScrapeTarget(kind="triton", url="http://10.0.0.5:8002/metrics", cost_per_replica_hour=0.4)]


def extra_source():
    return EXTRA + [ScrapeTarget(kind="gateway", url="http://gw:8080/metrics")]  # duplicate of the settings one


def test_sources_are_combined_and_deduplicated(settings):
    settings.MONITORING_TARGETS = [
        {"kind": "gateway", "url": "http://gw:8080/metrics", "endpoint_teams": {"ctr": "3"}},
        {
            "kind": "triton",
            "url": "http://10.0.0.4:8002/metrics",
            "models": {"ctr__v1__onnx-fp32": {"endpoint": "ctr", "variant": "v1", "instances": 2}},
        },
    ]
    settings.MONITORING_TARGET_SOURCES = [
        "monitoring.collection.targets.targets_from_settings",
        "tests.monitoring.test_targets.extra_source",
    ]
    found = targets.scrape_targets()
    assert [t.key for t in found] == [
        "gateway:http://gw:8080/metrics",
        "triton:http://10.0.0.4:8002/metrics",
        "triton:http://10.0.0.5:8002/metrics",
    ]
    assert found[0].endpoint_teams == {"ctr": 3}
    assert (
        found[1].models["ctr__v1__onnx-fp32"].instances == 2 and found[1].models["ctr__v1__onnx-fp32"].variant == "v1"
    )


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"kind": "prometheus", "url": "http://x/metrics"}, "kind"),
        ({"kind": "gateway", "url": "file:///etc/passwd"}, "url"),
        ({"kind": "gateway"}, "url"),
    ],
)
def test_bad_target_entries_say_what_is_wrong(entry, message):
    with pytest.raises(ValueError, match=message):
        ScrapeTarget.from_dict(entry)


def test_targets_from_the_environment(monkeypatch, settings):
    del settings.MONITORING_TARGETS
    monkeypatch.setenv("MONITORING_TARGETS", '[{"kind": "gateway", "url": "http://127.0.0.1:8080/metrics"}]')
    assert [t.url for t in targets.targets_from_settings()] == ["http://127.0.0.1:8080/metrics"]
    monkeypatch.delenv("MONITORING_TARGETS")
    assert targets.targets_from_settings() == []
