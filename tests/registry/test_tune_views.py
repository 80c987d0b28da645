"""The build page of a build that tuned: the summary, the Pareto chart's data and the table of
configs tried; another team's build stays a 404."""

import json
import re

from django.urls import reverse

from harness import factories
from registry.models import Artifact, ArtifactStatus, BuildStatus


def _evidence():
    trials = [
        {
            "trial": 0,
            "label": "default",
            "knobs": {"instances": 1, "preferred_batch_sizes": [8, 32, 128]},
            "throughput_rps": 650.0,
            "p50_ms": 3.1,
            "p99_ms": 41.0,
            "cpu_util": 0.2,
            "capacity_rps": 4000.0,
            "seconds": 9.1,
        },
        {
            "trial": 1,
            "label": "",
            "knobs": {"instances": 2, "preferred_batch_sizes": [8]},
            "throughput_rps": 1900.0,
            "p50_ms": 1.2,
            "p99_ms": 12.0,
            "cpu_util": 0.5,
            "capacity_rps": 5000.0,
            "seconds": 8.0,
        },
        {
            "trial": 2,
            "label": "",
            "knobs": {"instances": 3, "preferred_batch_sizes": [1]},
            "error": "the config did not load: x",
            "throughput_rps": 0.0,
            "seconds": 2.0,
        },
    ]
    return {
        "tuned_from": "onnx-int8", "slo_p99_ms": 50.0, "objective": "throughput within the SLO", "trials": trials,
        "default": {**trials[0]}, "best": {**trials[1]}, "gain": 2.92, "judged_on": "the mean of two runs",
        "stop_reason": "converged: none of the 8 neighbours of the best config improves it by more than 5%",
        "measured": 3, "elapsed_s": 40.0, "budget_s": 120.0, "space": {"size": 448, "dimensions": {}},
        "machine": {"cores": 2, "load_avg_start": 3.2, "load_avg_end": 3.4}, "gpu": "skipped: no GPU on this worker",
    }  # fmt: skip


def test_the_build_page_shows_the_tune_table_and_chart(client, alice, team_a, bob, onnx_path, tmp_path):
    base = factories.artifact(team_a, onnx_path, tmp_path, variant="onnx-int8")
    build = base.build
    build.tune = {"slo_p99_ms": 50.0}
    build.status = BuildStatus.SUCCEEDED
    build.save()
    Artifact.objects.create(
        version=base.version,
        build=build,
        variant="onnx-int8-tuned",
        status=ArtifactStatus.SERVABLE,
        benchmark={"tune": _evidence()},
    )
    client.force_login(alice)
    page = client.get(reverse("registry:build-detail", args=[build.pk])).content.decode()
    assert "Tune: onnx-int8" in page and "2.92×" in page and "converged" in page and "load average 3.2" in page
    assert "tune_charts.js" in page and "chart.umd.min.js" in page  # vendored, no CDN
    chart = json.loads(re.search(r'<script id="tune-chart-\d+" type="application/json">(.*?)</script>', page, re.S)[1])
    assert chart["slo_p99_ms"] == 50.0 and [p["trial"] for p in chart["points"]] == [0, 1]
    assert [p["best"] for p in chart["points"]] == [False, True] and chart["points"][1]["pareto"]
    table = page[page.index('class="tune-trials"') :]
    assert "instances 2, batch 8" in table and "the config did not load" in table and "best" in table
    client.force_login(bob)  # another team
    assert client.get(reverse("registry:build-detail", args=[build.pk])).status_code == 404
