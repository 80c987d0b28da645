"""Project-wide API settings: error format, pagination (no viewsets here: DRF imports
this module while building its settings)."""

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import exceptions, pagination, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from config.errors import PlatformError


class Pagination(pagination.PageNumberPagination):
    page_size_query_param = "page_size"
    max_page_size = 500


def _first_message(errors, prefix=""):
    """The first (field path, message) of a DRF error structure."""
    if isinstance(errors, dict):
        for key, value in errors.items():
            field = key if key != "non_field_errors" else ""
            return _first_message(value, f"{prefix}.{field}" if prefix and field else (field or prefix))
    if isinstance(errors, list) and errors:
        return _first_message(errors[0], prefix)
    return prefix, str(errors)


def exception_handler(exc, context):
    """Every error is JSON {"detail": str, "code": str[, "errors": {...}]} with a 4xx."""
    if isinstance(exc, PlatformError):
        body = {"detail": exc.detail, "code": exc.code}
        if exc.field:
            body["errors"] = {exc.field: [exc.detail]}
        return Response(body, status=exc.status)
    if isinstance(exc, DjangoValidationError):
        exc = exceptions.ValidationError(exc.message_dict if hasattr(exc, "error_dict") else exc.messages)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    if isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()

    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        field, message = _first_message(exc.detail)
        codes = exc.get_codes()
        _, code = _first_message(codes)
        response.data = {
            "detail": f"{field}: {message}" if field else message,
            "code": code or "invalid",
            "errors": exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail},
        }
    else:
        detail = response.data.get("detail", str(exc)) if isinstance(response.data, dict) else str(exc)
        code = getattr(detail, "code", None) or getattr(exc, "default_code", "error")
        response.data = {"detail": str(detail), "code": code}
    return response


def created(data) -> Response:
    return Response(data, status=status.HTTP_201_CREATED)
