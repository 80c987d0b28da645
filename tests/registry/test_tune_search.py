"""The tune stage's pure parts, table-tested: the climb (state in, decision out), the space,
the request checked at the door, the config knobs written with Triton's protobuf, and the
report the build page draws."""

import pytest

from registry import triton_config
from registry.factory.tune import request, search, space
from registry.factory.tune.search import Limits, SearchState, decide, record
from registry.selectors.tuning import pareto, tune_prediction, tune_report

LIMITS = Limits(budget_s=100, max_trials=50)


def climb(objective, sizes, start, limits=LIMITS):
    """Run the search against an objective function; returns (measured order, stop reason, state)."""
    state = SearchState(sizes=sizes, home=start)
    order = []
    while True:
        decision = decide(state, limits)
        if decision.action == "stop":
            return order, decision.reason, state
        order.append(decision.coord)
        record(state, decision.coord, objective(decision.coord), min_gain=limits.min_gain)


@pytest.mark.parametrize(
    "state,expected",
    [
        (SearchState(sizes=(3, 3), home=(1, 1)), ("measure", (1, 1))),  # the home first
        (SearchState(sizes=(3, 3), home=(1, 1), measured={(1, 1): 5.0}), ("measure", (2, 1))),  # then +1 on dim 0
        (
            SearchState(sizes=(3, 3), home=(1, 1), measured={(1, 1): 5.0, (2, 1): 4.0}),
            ("measure", (0, 1)),  # then -1 on dim 0
        ),
        (
            SearchState(sizes=(3, 3), home=(1, 1), measured={(1, 1): 5.0}, direction=(0, 1)),
            ("measure", (1, 2)),  # the line search goes on in the direction that last paid off
        ),
        (
            SearchState(sizes=(3,), home=(1,), measured={(0,): 1.0, (1,): 5.0, (2,): 4.0}),
            ("stop", "space exhausted"),
        ),
        (SearchState(sizes=(9,), home=(4,), measured={(4,): 5.0, (5,): 5.1, (3,): 5.2}), ("stop", "converged")),
        (SearchState(sizes=(9,), home=(4,), measured={(4,): 0.0, (5,): 0.0, (3,): 0.0}), ("stop", "no config met")),
        (SearchState(sizes=(9,), home=(4,), trials=50), ("stop", "trial budget")),
        (SearchState(sizes=(9,), home=(4,), elapsed_s=101), ("stop", "time budget")),
    ],
)
def test_decide(state, expected):
    decision = decide(state, LIMITS)
    assert decision.action == expected[0]
    if decision.action == "measure":
        assert decision.coord == expected[1]
    else:
        assert decision.reason.startswith(expected[1]), decision.reason


def test_record_moves_home_only_past_the_noise_margin():
    state = SearchState(sizes=(5,), home=(2,))
    record(state, (2,), 100.0)
    record(state, (3,), 104.0)  # +4 %: within the 5 % noise margin, the home stays
    assert state.home == (2,)
    record(state, (1,), 120.0)
    assert state.home == (1,) and state.direction == (-1,) and state.path == [(2,), (1,)]


def test_an_infeasible_home_moves_to_any_feasible_neighbour():
    state = SearchState(sizes=(5,), home=(2,))
    record(state, (2,), 0.0)
    record(state, (3,), 1.0)
    assert state.home == (3,)


def test_the_climb_finds_the_peak_of_a_hill_without_brute_force():
    peak = (6, 1, 5, 3)

    def hill(coord):
        return 1000.0 / (1 + sum((c - p) ** 2 for c, p in zip(coord, peak)))

    sizes = (8, 2, 8, 7)
    order, reason, state = climb(hill, sizes, start=(0, 0, 3, 2))
    assert search.best(state)[0] == peak
    assert reason.startswith("converged")
    assert len(order) < 0.1 * (8 * 2 * 8 * 7)  # measured a path, not the grid
    assert len(set(order)) == len(order)  # nothing measured twice


def test_a_plateau_stops_at_once_and_budgets_bound_the_search():
    order, reason, _ = climb(lambda c: 10.0, (4, 4), start=(0, 0))
    assert reason.startswith("converged") and len(order) == 3  # the home and its two neighbours
    order, reason, _ = climb(lambda c: float(sum(c)) + 1, (9, 9), start=(0, 0), limits=Limits(100, max_trials=4))
    assert reason.startswith("trial budget") and len(order) == 4


def test_cpu_space_knobs_and_nearest():
    grid = space.cpu_space(batched=True, max_batch_size=64, cores=2)
    names = [d.name for d in grid.dimensions]
    assert names == ["instances", "intra_op_threads", "preferred_batch_size", "max_queue_delay_us"]
    assert dict(zip(names, [d.values for d in grid.dimensions]))["preferred_batch_size"] == (1, 2, 4, 8, 16, 32, 64)
    default = {"instances": 1, "intra_op_threads": 1, "preferred_batch_sizes": [8, 32, 128], "max_queue_delay_us": 200}
    coord = grid.nearest(default)
    assert grid.knobs(coord) == {
        "instances": 1,
        "intra_op_threads": 1,
        "preferred_batch_sizes": [8],
        "max_queue_delay_us": 200,
    }
    unbatched = space.cpu_space(batched=False, max_batch_size=0, cores=4)
    assert [d.name for d in unbatched.dimensions] == ["instances", "intra_op_threads"] and unbatched.size == 8 * 4
    narrowed = space.cpu_space(batched=True, max_batch_size=64, cores=2, overrides={"instances": [2, 3]})
    assert narrowed.dimensions[0].values == (2, 3)
    gpu = space.gpu_space(batched=True, max_batch_size=4096, tensorrt=True)
    assert [d.name for d in gpu.dimensions][-1] == "trt_precision" and gpu.kind == "gpu"


@pytest.mark.parametrize(
    "raw,field",
    [
        ("fast", "tune"),
        ({"budget_s": 30}, "tune.slo_p99_ms"),
        ({"slo_p99_ms": "25"}, "tune.slo_p99_ms"),  # a string is not a number
        ({"slo_p99_ms": True}, "tune.slo_p99_ms"),
        ({"slo_p99_ms": 0}, "tune.slo_p99_ms"),
        ({"slo_p99_ms": 1e12}, "tune.slo_p99_ms"),
        ({"slo_p99_ms": 25, "budget_s": 1e9}, "tune.budget_s"),
        ({"slo_p99_ms": 25, "max_trials": 2.5}, "tune.max_trials"),
        ({"slo_p99_ms": 25, "variants": ["onnx-int8"]}, "tune.variants"),  # not a target of this build
        ({"slo_p99_ms": 25, "variants": ["x" * 10_000]}, "tune.variants"),
        ({"slo_p99_ms": 25, "search_space": {"instances": [0]}}, "tune.search_space"),
        ({"slo_p99_ms": 25, "search_space": {"gpu_memory": [1]}}, "tune.search_space"),
        ({"slo_p99_ms": 25, "search_space": {"instances": list(range(1, 40))}}, "tune.search_space"),
        ({"slo_p99_ms": 25, "max_queue_size": -1}, "tune.max_queue_size"),
        ({"slo_p99_ms": 25, "shell": "rm -rf /"}, "tune.shell"),
    ],
)
def test_tune_requests_are_bounded_at_the_door(raw, field):
    with pytest.raises(request.TuneRequestError) as failure:
        request.clean(raw, targets=["onnx-fp32"])
    assert failure.value.field == field


def test_a_good_tune_request_is_kept_as_asked():
    assert request.clean(None, targets=["onnx-fp32"]) == {}
    clean = request.clean(
        {"slo_p99_ms": 25, "variants": ["onnx-fp32"], "budget_s": 60, "search_space": {"instances": [2, 1, 2]}},
        targets=["onnx-fp32", "onnx-int8"],
    )
    assert clean == {
        "slo_p99_ms": 25.0,
        "variants": ["onnx-fp32"],
        "budget_s": 60.0,
        "search_space": {"instances": [1, 2]},
    }


SIGNATURE = {
    "inputs": [{"name": "x", "dtype": "float32", "shape": [-1, 4]}],
    "outputs": [{"name": "y", "dtype": "float32", "shape": [-1, 1]}],
}


def test_knobs_are_written_with_tritons_protobuf_and_keep_the_request_contract():
    config = triton_config.build_config(name="m__v1__onnx-int8", signature=SIGNATURE, variant="onnx-int8")
    assert triton_config.knobs_of(config) == {
        "instances": 1,
        "preferred_batch_sizes": [8, 32, 128],
        "max_queue_delay_us": 200,
        "intra_op_threads": 1,
    }
    knobs = {"instances": 3, "preferred_batch_sizes": [16, 4096], "max_queue_delay_us": 1000, "intra_op_threads": 2}
    tuned = triton_config.with_knobs(config, knobs)
    assert triton_config.parse(triton_config.to_text(tuned)) == tuned
    assert tuned.instance_group[0].count == 3 and list(tuned.dynamic_batching.preferred_batch_size) == [16]
    assert tuned.max_batch_size == config.max_batch_size  # the gateway's request contract is unchanged
    assert triton_config.kserve_signature(tuned) == triton_config.kserve_signature(config)
    assert config.instance_group[0].count == 1  # a copy: the default is untouched


def test_pool_limits_of_zero_install_no_queue_policy():
    text = triton_config.to_text(triton_config.build_config(name="m", signature=SIGNATURE, variant="onnx-fp32"))
    none = triton_config.with_pool_limits(triton_config.parse(text), name="n", max_queue_size=0, queue_timeout_ms=0)
    assert not none.dynamic_batching.HasField("default_queue_policy") and none.name == "n"
    bounded = triton_config.with_pool_limits(triton_config.parse(text), name="n", max_queue_size=8, queue_timeout_ms=0)
    assert bounded.dynamic_batching.default_queue_policy.max_queue_size == 8


def test_pareto_front():
    assert pareto([(1.0, 100.0), (2.0, 90.0), (0.5, 50.0), (3.0, 200.0), (3.0, 150.0)]) == [
        True,
        False,
        True,
        True,
        False,
    ]


class _Artifact:
    pk, variant = 7, "onnx-int8-tuned"

    def __init__(self, benchmark):
        self.benchmark = benchmark


def test_tune_report_marks_the_best_and_the_front_and_ignores_errors():
    trials = [
        {"trial": 0, "label": "default", "knobs": {"instances": 1}, "throughput_rps": 100.0, "p50_ms": 1, "p99_ms": 9},
        {"trial": 1, "label": "", "knobs": {"instances": 2}, "throughput_rps": 300.0, "p50_ms": 1, "p99_ms": 8},
        {"trial": 2, "label": "", "knobs": {"instances": 3}, "error": "did not load", "throughput_rps": 0.0},
        {"trial": 3, "label": "", "knobs": {"preferred_batch_sizes": [1]}, "throughput_rps": 0.0, "p99_ms": 90.0},
    ]
    evidence = {"trials": trials, "slo_p99_ms": 20, "best": {**trials[1]}, "default": trials[0], "gain": 3.0}
    report = tune_report(_Artifact({"tune": evidence}))
    rows = {r["trial"]: r for r in report["rows"]}
    assert rows[1]["is_best"] and rows[1]["pareto"] and not rows[0]["pareto"] and not rows[3]["pareto"]
    assert rows[3]["config"] == "batch off"
    assert [p["trial"] for p in report["chart"]["points"]] == [0, 1, 3]  # the failed load has no point
    assert tune_prediction(_Artifact({"tune": evidence}))["gain"] == 3.0
    assert tune_report(_Artifact({})) is None
