"""The endpoint page's rollout form and the steps both start forms take (rollout, release)."""

import re

from django import forms

from deployments.models import DeviceKind
from deployments.models.rollouts import ON_INCONCLUSIVE_CHOICES
from deployments.rollout_machine import DEFAULT_PLAN, Plan, StepsProblem
from deployments.selectors.rollouts import candidate_artifacts_for_pool
from kernel.errors import PlatformError

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
