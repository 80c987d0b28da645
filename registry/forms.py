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

    def clean(self):
        data = super().clean()
        if bool(data.get("file")) == bool(data.get("source_uri")):
            raise forms.ValidationError("Give exactly one: an ONNX file or an MLflow model URI.")
        return data
