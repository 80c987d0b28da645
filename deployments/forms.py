"""Dashboard forms of deployments (the services validate again: a form only shapes input)."""

import re

from django import forms

from deployments.models import DeviceKind
from deployments.models.rollouts import DEFAULT_ON_INCONCLUSIVE, ON_INCONCLUSIVE_CHOICES
from deployments.rollout_machine import DEFAULT_PLAN, Plan, StepsProblem
from deployments.selectors.pools import pool_list
from deployments.selectors.rollouts import candidate_artifacts_for_pool, endpoint_list, one_per_variant
from deployments.services import keys as key_services
from kernel.errors import PlatformError
from registry.models import Role
from registry.selectors.builds import servable_artifacts
from registry.selectors.teams import team_list


class InferenceKeyCreateForm(forms.Form):
    team = forms.ChoiceField()  # checked against the choices in Python: hostile input never reaches a query
    name = forms.CharField(max_length=100, help_text="What the key is for, e.g. ads-ranker-prod.")
    endpoints = forms.MultipleChoiceField(
        required=False,
        widget=forms.SelectMultiple(attrs={"size": 4}),
        help_text="None selected: every endpoint of the team, also later ones.",
    )
    rate_per_s = forms.FloatField(
        required=False, initial=key_services.DEFAULT_RATE_PER_S, label="Rate (req/s)", help_text="Empty: no rate limit."
    )
    burst = forms.FloatField(
        required=False, initial=2 * key_services.DEFAULT_RATE_PER_S, help_text="Empty: twice the rate."
    )
    max_concurrency = forms.IntegerField(
        required=False,
        initial=key_services.DEFAULT_MAX_CONCURRENCY,
        label="Max in flight",
        help_text="Empty: no quota.",
    )
    tokens_per_minute = forms.IntegerField(
        required=False,
        min_value=1,
        label="LLM tokens per minute",
        help_text="Prompt + completion tokens of its LLM requests; empty: no token limit.",
    )
    max_streams = forms.IntegerField(
        required=False, min_value=1, label="LLM streams in flight", help_text="Empty: no limit."
    )

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.teams = {t.name: t for t in team_list(user=user, min_role=Role.DEPLOYER)}
        self.fields["team"].choices = [(name, name) for name in self.teams]
        self.fields["endpoints"].choices = [(e.name, f"{e.team.name} / {e.name}") for e in endpoint_list(user=user)]

    def service_arguments(self) -> dict:
        """What inference_key_create takes: an empty limit field is no limit (burst: the default)."""
        data = self.cleaned_data
        out = {
            "team": self.teams[data["team"]],
            "name": data["name"],
            "endpoints": data["endpoints"] or None,
            "rate_per_s": data["rate_per_s"],
            "max_concurrency": data["max_concurrency"],
            "tokens_per_minute": data["tokens_per_minute"],
            "max_streams": data["max_streams"],
        }
        if data["burst"] is not None:
            out["burst"] = data["burst"]
        return out


STEPS_EXAMPLE = "5, 25, 50, 100"
DEFAULT_STEPS = ", ".join(f"{s / 100:g}" for s in DEFAULT_PLAN.steps_bp)  # "10, 25, 50, 100"
MIN_SECONDS = f"{DEFAULT_PLAN.step_min_seconds:g}"
_SECONDS = forms.NumberInput(attrs={"step": "any"})  # the width is the form row's, like every input


class RolloutStartForm(forms.Form):
    """Start a canary rollout from the endpoint page. The candidates are what fits: servable
    artifacts of this endpoint's model, in variants its pool can run (no GPU variant on a
    CPU pool); messages say what to type, and a bound form keeps what was typed."""

    candidate_artifact = forms.ChoiceField(
        label="Candidate",
        error_messages={
            "required": "Choose the candidate artifact.",
            "invalid_choice": "Choose one of the listed candidates.",
        },
    )
    steps_pct = forms.CharField(
        label="Steps %",
        initial=DEFAULT_STEPS,
        max_length=200,
        help_text=f"Percent of traffic to the candidate per step, increasing, e.g. {STEPS_EXAMPLE}.",
        error_messages={"required": f"Give the steps, e.g. {STEPS_EXAMPLE}."},
    )
    step_min_seconds = forms.FloatField(
        label="Min s/step",
        initial=MIN_SECONDS,
        min_value=0,
        max_value=86_400,
        widget=_SECONDS,
        error_messages={
            "required": f"Give the minimum seconds per step, e.g. {MIN_SECONDS}.",
            "invalid": f"Minimum seconds per step must be a number, e.g. {MIN_SECONDS}.",
            "min_value": "Minimum seconds per step cannot be negative.",
            "max_value": "Minimum seconds per step: at most a day (86400).",
        },
    )
    shadow_seconds = forms.FloatField(
        label="Shadow s",
        initial=f"{DEFAULT_PLAN.shadow_seconds:g}",
        min_value=0,
        max_value=86_400,
        required=False,
        widget=_SECONDS,
        error_messages={
            "invalid": "Shadow seconds must be a number, e.g. 0 for no shadow phase.",
            "min_value": "Shadow seconds cannot be negative.",
            "max_value": "Shadow seconds: at most a day (86400).",
        },
    )

    on_inconclusive = forms.ChoiceField(
        label="If a step stays inconclusive",
        choices=ON_INCONCLUSIVE_CHOICES,
        required=False,
        error_messages={
            "invalid_choice": "Choose what to do when a step stays inconclusive: roll back, pause and alert, or promote."
        },
    )
    fair_baseline = forms.BooleanField(
        label="Fair baseline",
        required=False,
        initial=True,
        help_text="Judge the candidate against a fresh copy of the stable given the same share of traffic.",
    )

    def __init__(self, *args, user, endpoint, **kwargs):
        super().__init__(*args, **kwargs)
        self.endpoint = endpoint
        self.fields["on_inconclusive"].initial = endpoint.on_inconclusive
        self.candidates, self.hidden_for_device = candidate_artifacts_for_pool(user=user, endpoint=endpoint)
        self.fields["candidate_artifact"].choices = [
            (str(a.pk), f"{a.version.model.name} v{a.version.version} · {a.variant} (#{a.pk})") for a in self.candidates
        ]
        model = endpoint.stable_artifact.version.model.name if endpoint.stable_artifact_id else None
        device = DeviceKind(endpoint.pool.device_kind).label
        hidden = (
            f"; {self.hidden_for_device} GPU variant{'s' if self.hidden_for_device != 1 else ''} hidden"
            if self.hidden_for_device
            else ""
        )
        self.fields["candidate_artifact"].help_text = (
            f"Servable artifacts of model {model} that pool {endpoint.pool.name} ({device}) can serve{hidden}."
            if model
            else ""
        )

    def clean_steps_pct(self) -> list[int]:
        return steps_pct_to_bp(self.cleaned_data["steps_pct"])

    def service_arguments(self) -> dict:
        data = self.cleaned_data
        candidate = next(a for a in self.candidates if str(a.pk) == data["candidate_artifact"])
        return {
            "endpoint": self.endpoint,
            "candidate": candidate,
            "steps_bp": data["steps_pct"],
            "step_min_seconds": data["step_min_seconds"],
            "shadow_seconds": data["shadow_seconds"] or 0.0,
            "on_inconclusive": data.get("on_inconclusive") or None,  # none given: the endpoint's policy
            # a form post without the checkbox's hidden twin (an old page, a script) keeps the default: on
            "fair_baseline": data["fair_baseline"] if "fair_baseline_present" in self.data else True,
        }

    def add_service_error(self, exc: PlatformError) -> None:
        """A refusal of the service, on the field it names when the form has one."""
        field = {"candidate": "candidate_artifact", "steps_bp": "steps_pct"}.get(
            getattr(exc, "field", None) or "", None
        )
        self.add_error(field if field in self.fields else None, exc.detail)


def steps_pct_to_bp(raw: str) -> list[int]:
    """'5, 25, 50, 100' → [500, 2500, 5000, 10000] (basis points), refused in words people use:
    the rollout form's and the release form's steps."""
    parts = [p for p in re.split(r"[,\s;]+", raw.replace("%", " ")) if p]
    try:
        steps = [float(p) for p in parts]
    except ValueError:
        bad = next(p for p in parts if not _is_number(p))
        raise forms.ValidationError(
            f"{bad!r} is not a number: give percentages separated by commas, e.g. {STEPS_EXAMPLE}."
        ) from None
    problem = Plan.steps_problem([s * 100 for s in steps])  # the plan's rule, in basis points
    if problem == StepsProblem.EMPTY:
        raise forms.ValidationError(f"Give at least one step, e.g. {STEPS_EXAMPLE}.")
    if problem == StepsProblem.OUT_OF_RANGE:
        raise forms.ValidationError(f"Each step is a percentage above 0 and at most 100, e.g. {STEPS_EXAMPLE}.")
    if problem == StepsProblem.NOT_INCREASING:
        raise forms.ValidationError(f"Steps must increase, e.g. {STEPS_EXAMPLE}.")
    if any(round(s * 100) != s * 100 for s in steps):
        raise forms.ValidationError("Steps can have at most two decimals, e.g. 0.5, 5, 50, 100.")
    return [round(s * 100) for s in steps]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class EndpointForm(forms.Form):
    """Create an endpoint (name, kind, pool, stable) or edit its SLOs, access and policy. The
    form only shapes input; `endpoint_create`/`endpoint_update` decide (the same rules as
    the API) and their refusals come back on the field they name."""

    name = forms.CharField(max_length=64, help_text="Part of its URLs: /v2/models/{name}/infer.")
    kind = forms.ChoiceField(
        choices=[("tensor", "tensor (KServe v2)"), ("llm", "LLM (OpenAI API)")], initial="tensor", required=False
    )
    pool = forms.ChoiceField(help_text="A serving pool of a team where you are a deployer; the endpoint is its team's.")
    stable_artifact = forms.ChoiceField(
        label="Stable", required=False, help_text="A servable artifact of the pool's team; empty: no stable yet."
    )
    slo_p99_ms = forms.FloatField(label="SLO p99 (ms)", initial=50.0)
    slo_error_rate = forms.FloatField(label="SLO error rate", initial=0.01, help_text="A fraction: 0.01 = 1 %.")
    ttft_slo_ms = forms.FloatField(
        label="SLO time to first token p99 (ms)", required=False, help_text="LLM endpoints; empty: not checked."
    )
    itl_slo_ms = forms.FloatField(
        label="SLO inter-token latency p99 (ms)", required=False, help_text="LLM endpoints; empty: not checked."
    )
    psi_threshold = forms.FloatField(label="PSI threshold", initial=0.25, help_text="Prediction drift guardrail.")
    latency_margin = forms.FloatField(
        initial=0.2, help_text="The candidate's latency may exceed the stable's by this fraction (0.2 = 20 %)."
    )
    on_inconclusive = forms.ChoiceField(label="If a step stays inconclusive", choices=ON_INCONCLUSIVE_CHOICES)
    timeout_ms = forms.IntegerField(label="Timeout (ms)", initial=1000)
    sticky_header = forms.CharField(max_length=100, initial="X-User-Id", help_text="Pins a caller to one A/B arm.")
    public = forms.TypedChoiceField(
        label="Access",
        choices=[("false", "keys only (the team's inference keys)"), ("true", "public (no key needed)")],
        coerce=lambda value: value == "true",
        initial="false",
        widget=forms.RadioSelect,
    )

    CREATE_ONLY = ("name", "kind", "pool", "stable_artifact")

    def __init__(self, *args, user, endpoint=None, **kwargs):
        if endpoint is not None and "initial" not in kwargs:
            kwargs["initial"] = {f: getattr(endpoint, f) for f in EDITABLE_FIELDS}
            kwargs["initial"]["public"] = "true" if endpoint.public else "false"
        super().__init__(*args, **kwargs)
        self.endpoint = endpoint
        for field in self.fields.values():
            if isinstance(field, forms.FloatField):
                field.widget.attrs["step"] = "any"  # 0.01 is a valid error rate, not a step-1 mistake
        if endpoint is not None:  # name, pool and stable are fixed (the stable changes by rollout)
            for name in self.CREATE_ONLY:
                del self.fields[name]
            return
        deployer_teams = team_list(user=user, min_role=Role.DEPLOYER)
        self.pools = {p.name: p for p in pool_list(user=user).filter(team__in=deployer_teams).order_by("name")}
        self.fields["pool"].choices = [(n, f"{p.team.name} / {n} ({p.device_kind})") for n, p in self.pools.items()]
        self.artifacts = {  # the newest build of each version and variant, once
            str(a.pk): a
            for a in one_per_variant(
                servable_artifacts(user=user)
                .filter(version__model__team__in=deployer_teams)
                .select_related("version__model")[:300]
            )
        }
        self.fields["stable_artifact"].choices = [("", "— none yet —")] + [
            (pk, f"{a.version.model.name} v{a.version.version} · {a.variant} (#{pk})")
            for pk, a in self.artifacts.items()
        ]
        self.fields["on_inconclusive"].initial = DEFAULT_ON_INCONCLUSIVE

    def service_arguments(self) -> dict:
        """What endpoint_create / endpoint_update take; an empty optional SLO is left unset."""
        data = dict(self.cleaned_data)
        out = {key: data[key] for key in EDITABLE_FIELDS if key in data and data[key] not in (None, "")}
        if self.endpoint is not None:  # an edit records what changed, not every field shown
            out = {key: value for key, value in out.items() if key in self.changed_data}
        if self.endpoint is None:
            out["name"] = data["name"]
            out["kind"] = data.get("kind") or "tensor"
            out["pool"] = self.pools[data["pool"]]
            out["stable_artifact"] = self.artifacts.get(data.get("stable_artifact") or "")
        return out

    def add_service_error(self, exc: PlatformError) -> None:
        """A refusal of the service, under the field it names (without the field's name twice)."""
        field = exc.field if exc.field in self.fields else None
        self.add_error(field, exc.detail.removeprefix(f"{field}: ") if field else exc.detail)


EDITABLE_FIELDS = (
    "slo_p99_ms",
    "slo_error_rate",
    "ttft_slo_ms",
    "itl_slo_ms",
    "psi_threshold",
    "latency_margin",
    "on_inconclusive",
    "timeout_ms",
    "sticky_header",
    "public",
)
