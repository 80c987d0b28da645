"""Serializer fields that take JSON as the schema says.

DRF's CharField turns a number into a string (`{"description": 0}` is stored as "0"),
while the OpenAPI schema says `type: string`: a client sending a number has a bug, and
the API says so (400 "give a string") instead of storing its str(). Every API serializer
uses these (`StrictModelSerializer` maps the model's text fields to them).
"""

from django.db import models
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from kernel.errors import scrub_paths


class _StringOnly:
    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("not_a_string", kind=type(data).__name__.replace("NoneType", "null"))
        # maxLength is the schema's, on the string as sent: DRF checks it after trimming
        # whitespace, so "\f" + 2000 characters would pass a max_length of 2000
        max_length = getattr(self, "max_length", None)
        if max_length is not None and len(data) > max_length:
            self.fail("max_length", max_length=max_length)
        return super().to_internal_value(data)


class StrictCharField(_StringOnly, serializers.CharField):
    default_error_messages = {"not_a_string": "give a string, not a {kind}."}


class StrictSlugField(_StringOnly, serializers.SlugField):
    default_error_messages = {"not_a_string": "give a string, not a {kind}."}


class StrictURLField(_StringOnly, serializers.URLField):
    default_error_messages = {"not_a_string": "give a string, not a {kind}."}


class StrictEmailField(_StringOnly, serializers.EmailField):
    default_error_messages = {"not_a_string": "give a string, not a {kind}."}


class StrictModelSerializer(serializers.ModelSerializer):
    serializer_field_mapping = {
        **serializers.ModelSerializer.serializer_field_mapping,
        models.CharField: StrictCharField,
        models.TextField: StrictCharField,
        models.SlugField: StrictSlugField,
        models.URLField: StrictURLField,
        models.EmailField: StrictEmailField,
    }


class StrictRegexField(_StringOnly, serializers.RegexField):
    default_error_messages = {"not_a_string": "give a string, not a {kind}."}


class QuerySerializer(serializers.Serializer):
    """Query parameters. DRF reads an empty one (`?since=`) as not given and applies the
    default; here, as for the list filters (kernel.api.StrictFilterBackend), it is a 400
    naming it."""

    def to_internal_value(self, data):
        if hasattr(data, "getlist"):
            empty = [name for name in self.fields if name in data and not any(v.strip() for v in data.getlist(name))]
            if empty:
                raise serializers.ValidationError(
                    {name: ["give a value, or leave the parameter out."] for name in empty}, code="invalid_parameter"
                )
        return super().to_internal_value(data)


@extend_schema_field(
    {
        "oneOf": [
            {"type": "integer", "minimum": 1},
            {"type": "string", "maxLength": 200, "pattern": "^models:/", "example": "models:/ctr@champion"},
        ]
    }
)
class IdOrModelUriField(serializers.Field):
    """An id (integer), or a model URI (`models:/name@alias`, `models:/name/3`) passed on as
    a string for registry/selectors/aliases.py to resolve (and to say what is wrong with it)."""

    default_error_messages = {
        "invalid": "give an id (an integer) or a model URI such as models:/ctr@champion or models:/ctr/3.",
        "too_long": "a model URI has at most 200 characters.",
    }

    def to_internal_value(self, data):
        if isinstance(data, bool):
            self.fail("invalid")
        if isinstance(data, int):
            if not 1 <= data <= 2**63 - 1:
                self.fail("invalid")
            return data
        if isinstance(data, str):
            if data.isdigit() and len(data) < 19:
                return int(data)
            if data.startswith("models:"):
                if len(data) > 200:
                    self.fail("too_long")
                return data
        self.fail("invalid")

    def to_representation(self, value):
        return value


class ServerTextField(serializers.CharField):
    """Read-only text the server wrote (a reason, Triton's or the API server's message, a
    log tail): absolute server paths are cut to their last part (kernel.errors.scrub_paths),
    so a reply never shows the server's layout."""

    def __init__(self, **kwargs):
        kwargs["read_only"] = True
        super().__init__(**kwargs)

    def to_representation(self, value):
        return scrub_paths(super().to_representation(value))
