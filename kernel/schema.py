"""OpenAPI generation (drf-spectacular) that tells the truth about errors and nulls.

- Every operation lists the error responses it can really give, all with one body,
  `Error` ({"detail", "code", "errors"?}, what kernel.api.exception_handler writes):
  400 for a body or query parameters, 401 without credentials, 403 for a write (a role
  check) or a view with its own permission, 404 for a path with an id or name (another
  team's object is a 404 too), 409 for a write (name taken, stale generation), 413 for
  an upload, 415 for a body in a media type the operation does not read.
- A declared related field (e.g. `StringRelatedField` over `Event.actor`) is nullable
  when the model field behind it is: ModelSerializer does that for generated fields
  only.
"""

from django.core.exceptions import FieldDoesNotExist
from drf_spectacular.openapi import AutoSchema as SpectacularAutoSchema
from drf_spectacular.plumbing import force_instance
from rest_framework import permissions, serializers

SAFE = {"GET", "HEAD", "OPTIONS"}


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField(help_text="What is wrong, naming the field or parameter.")
    code = serializers.CharField(
        help_text="A stable machine-readable code, e.g. not_found, invalid, permission_denied."
    )
    errors = serializers.DictField(
        child=serializers.JSONField(),
        required=False,
        help_text="Per-field messages (validation errors only): a list of strings per field, nested like the input "
        "for nested fields.",
    )

    class Meta:
        ref_name = "Error"


ERROR_DESCRIPTIONS = {
    "400": "Invalid input: the detail names the field or query parameter.",
    "401": "No or invalid credentials (token or session).",
    "403": "Authenticated, but your role in the team does not allow this.",
    "404": "No such object in your teams (another team's object is a 404 too).",
    "409": "Conflict with the current state (name taken, stale generation, wrong state).",
    "413": "The upload is over the size limit.",
    "415": "The body's Content-Type is not one this operation reads (JSON; multipart for uploads).",
    "429": "Over a rate limit: Retry-After says when to try again.",
    "503": "A service the answer comes from did not answer (the metric source: Prometheus with PROMETHEUS_URL).",
}


def _model_field_nullable(field) -> bool:
    parent = getattr(field, "parent", None)
    model = getattr(getattr(parent, "Meta", None), "model", None)
    if model is None or not getattr(field, "source_attrs", None):
        return False
    for attr in field.source_attrs:
        try:
            model_field = model._meta.get_field(attr)
        except FieldDoesNotExist:
            return False
        if getattr(model_field, "null", False):
            return True
        model = getattr(model_field, "related_model", None)
        if model is None:
            return False
    return False


class AutoSchema(SpectacularAutoSchema):
    def get_tags(self) -> list[str]:
        """The area of the operation (settings.API_RESOURCE_TAGS): the tag of the last
        resource word of its path that has one, so nested paths go with what they act on."""
        from django.conf import settings

        tags = getattr(settings, "API_RESOURCE_TAGS", {})
        for segment in reversed(self._tokenize_path()):
            if segment in tags:
                return [tags[segment]]
        return super().get_tags()

    def _map_serializer_field(self, field, direction, bypass_extensions=False):
        meta = super()._map_serializer_field(field, direction, bypass_extensions)
        if (
            (isinstance(field, serializers.RelatedField) or "." in (getattr(field, "source", "") or ""))
            and isinstance(meta, dict)
            and "$ref" not in meta
            and _model_field_nullable(field)
        ):
            meta = {**meta, "nullable": True}
        return meta

    def _error_codes(self) -> list[str]:
        method = self.method.upper()
        codes = []
        has_query = any(p.get("in") == "query" for p in self._get_parameters())
        if method not in SAFE or has_query:
            codes.append("400")
        perms = [type(p) for p in self.view.get_permissions()] if hasattr(self.view, "get_permissions") else []
        if any(p is not permissions.AllowAny for p in perms):
            codes.append("401")
            if method not in SAFE or any(p not in (permissions.IsAuthenticated, permissions.AllowAny) for p in perms):
                codes.append("403")
        if "{" in self.path or self._get_pagination_parameters():  # a page past the end is a 404 too
            codes.append("404")
        if method not in SAFE:
            codes.append("409")
        if method in {"POST", "PUT", "PATCH"}:
            codes.append("415")
        if method in {"POST", "PUT", "PATCH"} and self._takes_a_file():
            codes.append("413")
        # A view that authenticates by itself (an inference key under AllowAny) names its own.
        codes += [code for code in getattr(self.view, "schema_error_codes", ()) if code not in codes]
        return sorted(codes)

    def _takes_a_file(self) -> bool:
        request = self.get_request_serializer()
        for serializer in request.values() if isinstance(request, dict) else [request]:
            fields = getattr(force_instance(serializer), "fields", None) or {}
            if any(isinstance(f, serializers.FileField) for f in fields.values()):
                return True
        return False

    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        if direction != "response":
            return responses
        for code in self._error_codes():
            if code not in responses:
                body = self._get_response_for_code(ErrorSerializer, code, direction=direction)
                responses[code] = {**body, "description": ERROR_DESCRIPTIONS[code]}
        return responses
