"""Dashboard forms of deployments (the services validate again: a form only shapes input)."""

from deployments.forms.endpoints import EndpointForm, kind_defaults
from deployments.forms.keys import InferenceKeyCreateForm
from deployments.forms.rollouts import RolloutStartForm, steps_pct_to_bp

__all__ = ["EndpointForm", "InferenceKeyCreateForm", "RolloutStartForm", "kind_defaults", "steps_pct_to_bp"]
