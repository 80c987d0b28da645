"""The endpoint form (new and edit), with each kind's defaults and settings."""

import re

from django import forms

from deployments.models import Endpoint
from deployments.models.rollouts import ON_INCONCLUSIVE_CHOICES
from deployments.selectors.pools import pool_list
from deployments.selectors.rollouts import one_per_variant
from deployments.services.llm_endpoints import LLM_DEFAULTS
from kernel.errors import PlatformError
from registry.models import Role
from registry.names import LLM_VARIANTS
from registry.selectors.builds import servable_artifacts
from registry.selectors.teams import team_list


def _model_default(field: str):
    """A tensor endpoint's default of `field`: the model's own (deployments/models/rollouts.py)."""
    return Endpoint._meta.get_field(field).default


def kind_defaults(kind: str) -> dict:
    """The values a new endpoint of `kind` starts with: the model's defaults, and for an LLM
    endpoint the service's LLM defaults over them (deployments/services/llm_endpoints.py):
    the form pre-fills these, never copies of them."""
    defaults = {field: _model_default(field) for field in KIND_DEFAULT_FIELDS}
    return {**defaults, **LLM_DEFAULTS} if kind == "llm" else defaults


class EndpointForm(forms.Form):
    """Create an endpoint (name, kind, pool, stable) or edit its SLOs, access, policy and, for
    an LLM endpoint, its LLM settings. The fields of the other kind are left out of an edit
    and marked on a new one (shown by the kind chosen; static/js/endpoint_form.js); a new
    endpoint starts with its kind's defaults. The form only shapes input;
    `endpoint_create`/`endpoint_update` decide (the same rules as the API) and their
    refusals come back on the field they name."""

    name = forms.CharField(max_length=64, help_text="Part of its URLs: /v2/models/{name}/infer.")
    kind = forms.ChoiceField(
        choices=[("tensor", "tensor (KServe v2)"), ("llm", "LLM (OpenAI API)")], initial="tensor", required=False
    )
    pool = forms.ChoiceField(help_text="A serving pool of a team where you are a deployer; the endpoint is its team's.")
    stable_artifact = forms.ChoiceField(
        label="Stable", required=False, help_text="A servable artifact of the pool's team; empty: no stable yet."
    )
    slo_p99_ms = forms.FloatField(label="SLO p99 (ms)")
    slo_error_rate = forms.FloatField(label="SLO error rate", help_text="A fraction: 0.01 = 1 %.")
    ttft_slo_ms = forms.FloatField(
        label="SLO time to first token p99 (ms)", required=False, help_text="Empty: not checked."
    )
    itl_slo_ms = forms.FloatField(
        label="SLO inter-token latency p99 (ms)", required=False, help_text="Empty: not checked."
    )
    psi_threshold = forms.FloatField(label="PSI threshold", help_text="Prediction drift guardrail.")
    latency_margin = forms.FloatField(
        required=False,
        help_text="The candidate's latency may exceed the control's by this fraction (0.2 = 20 %); "
        "empty: derived from the p99 SLO's headroom (10-30 %).",
    )
    on_inconclusive = forms.ChoiceField(label="If a step stays inconclusive", choices=ON_INCONCLUSIVE_CHOICES)
    timeout_ms = forms.IntegerField(label="Timeout (ms)", help_text="A request's whole time at the gateway.")
    sticky_header = forms.CharField(max_length=100, help_text="Pins a caller to one A/B arm.")
    first_token_timeout_ms = forms.IntegerField(
        label="First token within (ms)", required=False, help_text="Else the attempt fails over to the next backend."
    )
    context_length = forms.IntegerField(
        label="Context length (tokens)", required=False, help_text="Prompt + max_tokens; empty: the stable version's."
    )
    max_tokens_default = forms.IntegerField(
        label="Max tokens", required=False, help_text="A request's max_tokens when it gives none."
    )
    prefix_affinity_chars = forms.IntegerField(
        label="Prefix affinity (characters)",
        required=False,
        help_text="Prompts sharing this many leading characters go to one replica (0: off).",
    )
    llm_fallbacks = forms.CharField(
        label="Fallbacks",
        required=False,
        max_length=400,
        help_text="Ids of the team's LLM artifacts tried in this order after the chosen variant's backends, e.g. 12, 15.",
    )
    public = forms.TypedChoiceField(
        label="Access",
        choices=[("false", "keys only (the team's inference keys)"), ("true", "public (no key needed)")],
        coerce=lambda value: value == "true",
        initial="false",
        widget=forms.RadioSelect,
    )

    CREATE_ONLY = ("name", "kind", "pool", "stable_artifact")

    def __init__(self, *args, user, endpoint=None, kind: str | None = None, **kwargs):
        if "initial" not in kwargs:
            kwargs["initial"] = _initial(endpoint, kind)
        super().__init__(*args, **kwargs)
        self.endpoint = endpoint
        # a new endpoint's fields of one kind only (the page shows them by the kind chosen)
        self.llm_only = FIELDS_OF_OTHER_KIND["tensor"] if endpoint is None else ()
        self.tensor_only = FIELDS_OF_OTHER_KIND["llm"] if endpoint is None else ()
        for field in self.fields.values():
            if isinstance(field, forms.FloatField):
                field.widget.attrs["step"] = "any"  # 0.01 is a valid error rate, not a step-1 mistake
        if endpoint is not None:  # name, pool and stable are fixed (the stable changes by rollout)
            for name in (*self.CREATE_ONLY, *FIELDS_OF_OTHER_KIND[endpoint.kind]):
                del self.fields[name]
            self._fallback_help(user, endpoint.team_id)
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
        self._fallback_help(user, None)

    def _fallback_help(self, user, team_id) -> None:
        """The fallbacks' help names the LLM artifacts one may list."""
        if "llm_fallbacks" not in self.fields:
            return
        found = list(
            servable_artifacts(user=user, team_id=team_id)
            .filter(variant__in=LLM_VARIANTS)
            .select_related("version__model")[:12]
        )
        if found:
            self.fields["llm_fallbacks"].help_text += " Servable: " + ", ".join(
                f"#{a.pk} {a.version.model.name} v{a.version.version} {a.variant}" for a in found
            )

    def clean_llm_fallbacks(self) -> list[int] | None:
        raw = (self.cleaned_data.get("llm_fallbacks") or "").strip()
        if not raw:
            return None if self.endpoint is None or not self.endpoint.llm_fallbacks else []
        parts = [p for p in re.split(r"[,\s;]+", raw.replace("#", " ")) if p]
        bad = next((p for p in parts if not p.isdigit()), None)
        if bad is not None:
            raise forms.ValidationError(
                f"{bad[:20]!r} is not an artifact id: give ids separated by commas, e.g. 12, 15."
            )
        return [int(p) for p in parts]

    def service_arguments(self) -> dict:
        """What endpoint_create / endpoint_update take; an empty optional field is left unset.
        A new endpoint's untouched fields are left out too, so the service gives it its
        kind's defaults (an LLM endpoint created without JavaScript gets 120 s, not 1 s)."""
        data = dict(self.cleaned_data)
        out = {key: data[key] for key in EDITABLE_FIELDS if key in data and data[key] not in (None, "")}
        if self.endpoint is not None:  # an edit records what changed, not every field shown
            out = {key: value for key, value in out.items() if key in self.changed_data}
            if "llm_fallbacks" in self.changed_data and data.get("llm_fallbacks") == []:
                out["llm_fallbacks"] = []  # emptied: no fallbacks any more
            if "latency_margin" in self.changed_data and data.get("latency_margin") is None:
                out["latency_margin"] = None  # emptied: derived from the SLO's headroom again
            return out
        kind = data.get("kind") or "tensor"
        out = {key: value for key, value in out.items() if key in self.changed_data or key not in KIND_DEFAULT_FIELDS}
        if kind != "llm":
            out = {key: value for key, value in out.items() if key not in FIELDS_OF_OTHER_KIND["tensor"]}
        out["name"] = data["name"]
        out["kind"] = kind
        out["pool"] = self.pools[data["pool"]]
        out["stable_artifact"] = self.artifacts.get(data.get("stable_artifact") or "")
        return out

    def add_service_error(self, exc: PlatformError) -> None:
        """A refusal of the service, under the field it names (without the field's name twice)."""
        field = exc.field if exc.field in self.fields else None
        self.add_error(field, exc.detail.removeprefix(f"{field}: ") if field else exc.detail)


def _initial(endpoint, kind: str | None) -> dict:
    if endpoint is None:
        initial = {**kind_defaults(kind or "tensor"), "kind": kind or "tensor", "public": "false"}
        return {**initial, **{f: _model_default(f) for f in LLM_SETTINGS if f != "llm_fallbacks"}}
    initial = {f: getattr(endpoint, f) for f in EDITABLE_FIELDS}
    initial["public"] = "true" if endpoint.public else "false"
    initial["llm_fallbacks"] = ", ".join(str(pk) for pk in endpoint.llm_fallbacks or [])
    return initial


# A new endpoint's fields whose defaults depend on its kind (LLM_DEFAULTS overrides some of them).
KIND_DEFAULT_FIELDS = (
    "slo_p99_ms",
    "slo_error_rate",
    "psi_threshold",
    "latency_margin",
    "on_inconclusive",
    "timeout_ms",
    "sticky_header",
)
LLM_SETTINGS = (
    "first_token_timeout_ms",
    "context_length",
    "max_tokens_default",
    "prefix_affinity_chars",
    "llm_fallbacks",
)
# What an endpoint of each kind does not use: left out of its edit form, hidden on a new one.
FIELDS_OF_OTHER_KIND = {
    "tensor": ("ttft_slo_ms", "itl_slo_ms", *LLM_SETTINGS),
    "llm": ("slo_p99_ms", "psi_threshold"),  # an LLM canary is judged on TTFT and ITL; a reply has no score
}
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
    *LLM_SETTINGS,
    "public",
)
