"""The silence form of the dashboard: what to match, for how long and why. The service
(monitoring.services.silences.silence_create) checks the rest, as for the API."""

from datetime import timedelta

from django import forms

from monitoring.models import Severity
from registry.models import Role
from registry.selectors.teams import team_list

DURATIONS = [
    ("3600", "1 hour"),
    ("7200", "2 hours"),
    ("14400", "4 hours"),
    ("86400", "1 day"),
    ("604800", "7 days"),
]


class SilenceForm(forms.Form):
    team = forms.ChoiceField(label="Team")
    endpoint = forms.CharField(label="Endpoint", required=False, max_length=64, help_text="Exact name; empty: any.")
    check = forms.CharField(
        label="Check",
        required=False,
        max_length=64,
        help_text="The alert's kind, e.g. rollout_rolled_back; empty: any.",
    )
    severity = forms.ChoiceField(label="Severity", required=False, choices=[("", "any"), *Severity.choices])
    duration_s = forms.ChoiceField(label="For", choices=DURATIONS, initial="7200")
    comment = forms.CharField(
        label="Why",
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "what is being done about it"}),
        error_messages={"required": "Say why (what is being done about it)."},
    )

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.teams = {str(t.pk): t for t in team_list(user=user, min_role=Role.DEVELOPER)}
        self.fields["team"].choices = [(pk, t.name) for pk, t in self.teams.items()]

    def service_arguments(self) -> dict:
        data = self.cleaned_data
        return {
            "team": self.teams[data["team"]],
            "endpoint": data["endpoint"],
            "kind": data["check"],
            "severity": data["severity"],
            "duration": timedelta(seconds=int(data["duration_s"])),
            "comment": data["comment"],
        }
