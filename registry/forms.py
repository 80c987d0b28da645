import json

from django import forms

from registry.models import Role, Task
from registry.selectors.teams import team_list


class ModelCreateForm(forms.Form):
    name = forms.SlugField(max_length=64, help_text="Lower-case letters, digits, - and _.")
    team = forms.ModelChoiceField(queryset=None, to_field_name="name")
    task = forms.ChoiceField(choices=Task.choices, initial=Task.CTR)
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False)

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = team_list(user=user, min_role=Role.DEVELOPER)


class VersionCreateForm(forms.Form):
    file = forms.FileField(required=False, help_text="An ONNX model file.")
    source_uri = forms.CharField(
        required=False, max_length=1024, help_text="…or an MLflow model URI (runs:/… or models:/…)."
    )

    metrics = forms.CharField(
        required=False,
        max_length=20_000,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": '{"auc": 0.78, "logloss": 0.41}'}),
        help_text="Training metrics: a JSON object of name -> number.",
    )
    validation_data = forms.FileField(
        required=False,
        help_text="A labelled validation set (NPZ, Parquet or JSON lines keyed by input name, plus the label): "
        "builds score every artifact on it.",
    )
    label = forms.CharField(
        required=False, max_length=128, initial="label", help_text="The label column/array in the validation set."
    )

    def clean_metrics(self):
        """Text to a JSON value; whether it is an object of numbers is the service's rule (catalog.metrics_checked)."""
        raw = self.cleaned_data["metrics"].strip()
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise forms.ValidationError(
                f'Not JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); e.g. {{"auc": 0.78}}.'
            ) from None

    def clean(self):
        data = super().clean()
        if bool(data.get("file")) == bool(data.get("source_uri")):
            raise forms.ValidationError("Give exactly one: an ONNX file or an MLflow model URI.")
        return data
