"""Reads of online experiments shared by the API, the pages and the admin (team-scoped)."""

from django.db.models import QuerySet
from django.urls import reverse

from deployments.rollout_machine import FULL_BP, WAITING_FOR_TRAFFIC
from deployments.route_overlays import Overlay
from deployments.selectors.rollouts import rollout_outcomes
from experiments import analysis
from experiments.models import DeadLetter, Experiment, ExperimentState
from experiments.services.guardrails import stored_guardrails
from experiments.store import default_store, store_readable_here
from kernel.errors import NotFound
from registry.selectors.events import event_list
from registry.selectors.teams import team_scoped

RULE = (
    "ship when the lift's always-valid lower bound is above 0 (the MDE's side) and no guardrail fails; stop for "
    "harm when the upper bound is below 0 or a guardrail fails on an arm (errors, latency, p99 SLO, prediction PSI "
    "against the control); a flagged SRM blocks the lift's decisions."
)


def online_experiment_list(*, user, endpoint: str | None = None, state: str | None = None) -> QuerySet:
    qs = team_scoped(
        Experiment.objects.select_related("endpoint__team", "winner").prefetch_related("arms"),
        user,
        "endpoint__team_id",
    )
    if endpoint:
        qs = qs.filter(endpoint__name=endpoint)
    if state:
        qs = qs.filter(state=state)
    return qs


def online_experiment_get(*, user, experiment_id) -> Experiment:
    try:
        pk = int(str(experiment_id).removeprefix("exp-"))
    except ValueError:
        pk = None
    experiment = online_experiment_list(user=user).filter(pk=pk).first() if pk is not None else None
    if experiment is None:
        raise NotFound(f"No experiment {experiment_id!r}.", code="experiment_not_found")
    return experiment


def experiment_results(*, experiment: Experiment, store=None) -> dict:
    """The analysis now (read-only: ticks that move the state are the service's), plus
    the plan's progress, the chart's history and each candidate arm's guardrails as the
    last analysis tick judged them (the sustained checks count breaches tick by tick)."""
    arms = list(experiment.arms.all())
    guards = stored_guardrails(experiment)
    evidence = experiment.evidence or {}
    if store is None and not store_readable_here() and "arms" in evidence:
        # the embedded store lives in the experiment-data process: the last tick's analysis
        result = {k: v for k, v in evidence.items() if k not in ("ship", "plan", "guardrails_ok", "guardrails")}
        counts = result.pop("feedback", {})
    else:
        result, counts = _analysis_now(experiment, arms, guards, store)
    have = min((r["units"] for r in result["arms"].values()), default=0)
    need = experiment.planned_units_per_arm
    result.update(
        {
            "experiment": experiment.public_id,
            "state": experiment.state,
            "decision": experiment.decision or None,
            "winner": experiment.winner.name if experiment.winner_id else None,
            "progress": {"have": have, "need": need, "unit": "units per arm"},
            "feedback": counts,
            "history": experiment.history,
            "guardrails": guards,
            "rule": RULE,
            "ship": ship_status(experiment),
        }
    )
    return result


def ship_status(experiment: Experiment) -> dict | None:
    """The ship's rollout as the experiment page, the results API and `experiment watch` show it:
    {rollout, state, reason} as the analysis tick last saved it, and while it ships `waiting`,
    read from the rollout now (its reason while its step waits for traffic: "waiting for traffic:
    ...", else ""), so a ship that waits says so within a poll, not at the next analysis tick."""
    ship = (experiment.evidence or {}).get("ship")
    if ship is None:
        return None
    ship = dict(ship)
    if experiment.state == ExperimentState.SHIPPING and experiment.rollout_id:
        _, reason = rollout_outcomes(rollout_ids=[experiment.rollout_id]).get(experiment.rollout_id, ("", ""))
        ship["waiting"] = reason if reason.startswith(WAITING_FOR_TRAFFIC) else ""
    else:
        ship.pop("waiting", None)
    return ship


def _analysis_now(experiment, arms, guards, store) -> tuple[dict, dict]:
    """(the analysis of the store's sums now, feedback counts); zeros where this process may
    not read the store and no tick has run yet."""
    if store is None and not store_readable_here():
        sums = {a.pk: {k: 0.0 for k in analysis.SUMS} for a in arms}
        extras, counts = {}, {}
    else:
        sums, extras, counts = (store or default_store()).arm_sums(experiment)
    return arms_analysis(experiment, arms, sums, extras, guards), counts


def arms_analysis(experiment, arms, sums: dict, extras: dict, guards: dict) -> dict:
    """analysis.analyze on an experiment's arms (sums and extras by arm pk, guardrails by arm
    name): the one call the analysis tick (services/online.py) and the page's reading now make."""
    control = next(a for a in arms if a.is_control)
    return analysis.analyze(
        {a.name: sums[a.pk] for a in arms},
        control=control.name,
        allocation={a.name: a.allocation_bp / FULL_BP for a in arms},
        alpha=experiment.alpha,
        mde=experiment.mde,
        srm_alpha=experiment.srm_alpha,
        guardrails={n: g["status"] for n, g in guards.items()},
        extras={a.name: extras.get(a.pk, {}) for a in arms},
    )


def experiments_watched() -> bool:
    """Whether any experiment is running (its guardrails read the collector's samples)."""
    return Experiment.objects.filter(state=ExperimentState.RUNNING).exists()


def running_overlays(endpoints) -> dict:
    """The route-overlay provider (deployments.route_overlays): running experiments' arms."""
    ids = [e.pk for e in endpoints]
    out = {}
    qs = Experiment.objects.filter(endpoint_id__in=ids, state=ExperimentState.RUNNING).prefetch_related(
        "arms__artifact__version"
    )
    for experiment in qs:
        arms = list(experiment.arms.all())
        arms.sort(key=lambda a: not a.is_control)
        out[experiment.endpoint_id] = Overlay(
            name=experiment.public_id,
            salt=experiment.salt,
            arms=tuple((a.artifact, a.allocation_bp) for a in arms),
            url=reverse("experiments:online-detail", args=[experiment.pk]),
            token_key=experiment.token_key if experiment.feedback_tokens else "",
            token_ttl_s=experiment.attribution_window_s,
        )
    return out


def experiment_events(*, user, experiment: Experiment, limit: int = 20) -> list:
    return list(event_list(user=user, object_type=experiment._meta.label_lower, object_id=experiment.pk)[:limit])


LIVE_STATES = (ExperimentState.DRAFT, ExperimentState.RUNNING, ExperimentState.SHIPPING)


def experiment_page(*, experiment: Experiment) -> dict:
    """What the experiment page shows, from one analysis row: the last tick's evidence (the
    same row the chart's last point is), or the analysis now when no tick ran yet. Plus
    what the counts mean, the ship's outcome, the last analysis error and the dead letters
    of the endpoint's streams."""
    evidence = experiment.evidence or {}
    if "arms" in evidence and experiment.analyzed_at is not None:
        results = dict(evidence)
        results.setdefault("progress", _progress(experiment, results))
        results["guardrails"] = stored_guardrails(experiment)
        results["rule"] = RULE
        source = "tick"
    else:
        results = experiment_results(experiment=experiment)
        source = "now"
    results.setdefault("feedback", {"attributed": 0, "late": 0, "unknown": 0, "refused": 0})
    return {
        "results": results,
        "source": source,
        "ship": ship_status(experiment),
        "dead_letters": DeadLetter.objects.filter(endpoint_name=experiment.endpoint.name).count(),
        "live": experiment.state in LIVE_STATES,
    }


def _progress(experiment, results) -> dict:
    have = min((r["units"] for r in results["arms"].values()), default=0)
    return {"have": have, "need": experiment.planned_units_per_arm, "unit": "units per arm"}
