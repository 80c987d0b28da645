"""The tune's headline and its table agree, in a real browser (Debian's Chromium via
Playwright): each headline figure (the default's, the best's) is the table's row, or the
mean of the rows it names (its run and its closing run, side by side after the search);
a default that scored 0 says why in the headline and in its row, the same words; the
release card's prediction says it too instead of an infinite gain. The evidence has the
shape the tune stage writes (registry/factory/tune/stage.py; the stage's own figures are
checked against its rows in tests/registry/test_tune_integration.py)."""

import pytest

from harness import factories
from registry.models import Artifact, ArtifactStatus, BuildStatus
from tests.browser import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WHY = (
    "no open-loop window met p99 <= 50 ms with every request answered: at 1,974 req/s 3 of 2369 requests not "
    "answered (503 ×3); at 1,382 req/s 2 of 1658 requests not answered (503 ×2)"
)


def _row(trial, label, rps, **more):
    return {"trial": trial, "label": label, "knobs": {"instances": trial + 1}, "throughput_rps": rps, "p50_ms": 1.5,
            "p99_ms": 20.7, "cpu_util": 0.3, "capacity_rps": 2193.0, "seconds": 6.0, **more}  # fmt: skip


def _evidence(default_zero: bool) -> dict:
    if default_zero:  # the default met no rate: judged on one run each
        trials = [_row(0, "default", 0.0, why_zero=WHY), _row(1, "", 702.4), _row(2, "", 655.0)]
        default, best, judged = {**trials[0]}, {**trials[1]}, "one run each"
        gain = None
    else:  # the closing runs: each figure is the mean of two rows
        trials = [_row(0, "default", 600.0), _row(1, "", 900.0), _row(2, "default, again", 640.0),
                  _row(3, "best (#1), again", 860.0)]  # fmt: skip
        default, best, judged = {**trials[0], "throughput_rps": 620.0}, {**trials[1], "throughput_rps": 880.0}, "two"
        gain = 880.0 / 620.0
    return {
        "tuned_from": "onnx-int8", "slo_p99_ms": 50.0, "objective": "throughput within the SLO", "trials": trials,
        "default": default, "best": best, "gain": gain, "judged_on": judged, "stop_reason": "converged",
        "measured": len(trials), "elapsed_s": 58.0, "budget_s": 60.0, "search_budget_s": 40.0,
        "space": {"size": 448, "dimensions": {}}, "machine": {"cores": 2, "load_avg_start": 3.2, "load_avg_end": 3.4},
        "gpu": "skipped: no GPU on this worker",
    }  # fmt: skip


READ = """(variant) => {
  const head = (key) => {
    const dd = document.getElementById(`tune-${key}-${variant}`);
    const runs = Array.from(dd.innerText.matchAll(/#(\\d+): ([\\d,]+)/g)).map(m => [m[1], Number(m[2].replace(/,/g, ''))]);
    const single = dd.innerText.match(/\\(#(\\d+)\\)/);
    return {rps: Number(dd.querySelector('.headline-rps').innerText.replace(/,/g, '')), runs,
            single: single ? single[1] : null, why: dd.querySelector('.why-zero')?.innerText || null};
  };
  const rows = Object.fromEntries(Array.from(document.querySelectorAll('.tune-trials tbody tr')).map(
    r => [r.dataset.trial, {rps: Number(r.querySelector('.row-rps').innerText.replace(/,/g, '')),
                            why: r.querySelector('.why-zero')?.innerText || null}]));
  return {default: head('default'), best: head('best'), rows};
}"""


@pytest.mark.parametrize("default_zero", [True, False])
def test_the_tune_headline_is_its_table(live_server, browser_page, alice, team_a, onnx_path, tmp_path, default_zero):
    base = factories.artifact(team_a, onnx_path, tmp_path, variant="onnx-int8")
    build = base.build
    build.tune, build.status = {"slo_p99_ms": 50.0}, BuildStatus.SUCCEEDED
    build.save()
    Artifact.objects.create(
        version=base.version,
        build=build,
        variant="onnx-int8-tuned",
        status=ArtifactStatus.SERVABLE,
        benchmark={"tune": _evidence(default_zero)},
    )
    page = browser_page
    login(page, live_server.url, alice.username)
    page.goto(f"{live_server.url}/models/builds/{build.pk}/")
    seen = page.evaluate(READ, "onnx-int8-tuned")
    rows = seen["rows"]
    for key in ("default", "best"):
        head = seen[key]
        if head["runs"]:  # the mean of the rows it names, each figure as the table prints it
            assert [rows[trial]["rps"] for trial, _ in head["runs"]] == [rps for _, rps in head["runs"]], seen
            assert head["rps"] == round(sum(rps for _, rps in head["runs"]) / len(head["runs"])), seen
        else:
            assert head["rps"] == rows[head["single"]]["rps"], seen
    if default_zero:
        assert seen["default"]["rps"] == 0 and seen["default"]["why"] == f"0 because {WHY}"
        assert rows["0"]["why"] == WHY  # the row says the same
        assert "1.42×" not in page.inner_text("#tune-best-onnx-int8-tuned")  # no gain over a 0
    else:
        assert seen["default"]["why"] is None and seen["default"]["runs"] == [["0", 600], ["2", 640]]
        assert "1.42×" in page.inner_text("#tune-best-onnx-int8-tuned")
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
