"""The keys page's form: an inference key of a team, with its limits."""

from django import forms

from deployments.selectors.rollouts import endpoint_list
from deployments.services import keys as key_services
from registry.models import Role
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
    token_budgets = forms.CharField(
        required=False,
        max_length=200,
        label="LLM token budgets",
        help_text="tokens/window, comma-separated, a second to a month (e.g. 100000/1h, 5000000/30d); empty: none.",
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
            "token_budgets": key_services.token_budgets_from_text(data["token_budgets"]),
        }
        if data["burst"] is not None:
            out["burst"] = data["burst"]
        return out
