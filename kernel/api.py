"""Project-wide API settings: error format, pagination (no viewsets here: DRF imports
this module while building its settings)."""

from datetime import UTC, datetime

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from django_filters.rest_framework import BooleanFilter, DjangoFilterBackend, IsoDateTimeFilter
from rest_framework import exceptions, pagination, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from kernel.errors import PlatformError


class Pagination(pagination.PageNumberPagination):
    """Page-number pagination that says what is wrong with `page` or `page_size` (400
    naming the parameter) instead of ignoring a bad page size; a page past the end is a
    404 ("Invalid page.")."""

    page_size_query_param = "page_size"
    max_page_size = 500

    def _positive_int(self, request, name: str, maximum: int | None = None) -> int | None:
        raw = request.query_params.get(name)
        if raw is None:
            return None
        limit = f" from 1 to {maximum}" if maximum else " of 1 or more"
        try:
            value = int(raw)
        except ValueError:
            value = 0
        if value < 1 or (maximum and value > maximum) or str(value) != raw.strip():
            raise exceptions.ValidationError(
                {name: [f"give an integer{limit}, not {raw!r}."]}, code="invalid_parameter"
            )
        return value

    def get_page_size(self, request):
        size = self._positive_int(request, self.page_size_query_param, self.max_page_size)
        return size or self.page_size

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"] = {"type": "integer", "minimum": 1, "maximum": self.max_page_size}
            elif parameter["name"] == self.page_query_param:
                parameter["schema"] = {"type": "integer", "minimum": 1}
        return parameters

    def paginate_queryset(self, queryset, request, view=None):
        self._positive_int(request, self.page_query_param)
        return super().paginate_queryset(queryset, request, view)


def to_utc(value: datetime) -> datetime | None:
    """An aware time in UTC, or None when it cannot be one. Python takes UTC offsets up to
    ±23:59, PostgreSQL only up to ±15:59 (a 500 when such a time reached a query): a time
    given with any offset is compared and stored in UTC; one whose UTC falls past year
    9999 is invalid."""
    try:
        return value.astimezone(UTC)
    except (OverflowError, ValueError):
        return None


class UTCDateTimeFilter(IsoDateTimeFilter):
    """django-filter's ISO 8601 filter, comparing in UTC (see to_utc)."""

    def filter(self, qs, value):
        if value is not None:
            utc = to_utc(value)
            if utc is None:
                raise exceptions.ValidationError(
                    {self.field_name: ["give a time between years 1 and 9999 in UTC."]}, code="invalid_parameter"
                )
            value = utc
        return super().filter(qs, value)


class StrictFilterBackend(DjangoFilterBackend):
    """django-filter's backend, except that a filter given with an empty value
    (`?status=`) is a 400 naming it instead of silently meaning "no filter"."""

    def filter_queryset(self, request, queryset, view):
        filterset_class = self.get_filterset_class(view, queryset)
        if filterset_class is not None:
            empty = [
                name
                for name in filterset_class.base_filters
                if name in request.query_params and not any(v.strip() for v in request.query_params.getlist(name))
            ]
            if empty:
                raise exceptions.ValidationError(
                    {name: ["give a value, or leave the parameter out."] for name in empty}, code="invalid_parameter"
                )
            # django-filter reads "null"/"unknown" for a boolean as "no filter": say so instead
            booleans = [
                name
                for name, f in filterset_class.base_filters.items()
                if isinstance(f, BooleanFilter)
                and any(v.lower() not in {"true", "false", "1", "0"} for v in request.query_params.getlist(name))
            ]
            if booleans:
                raise exceptions.ValidationError(
                    {name: ["give true or false."] for name in booleans}, code="invalid_parameter"
                )
        return super().filter_queryset(request, queryset, view)


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


def _is_api(request) -> bool:
    return request.path.startswith("/api/")


def not_found(request, exception=None):
    """handler404: JSON {"detail", "code"} under /api/ (no route matched), the site's 404
    page elsewhere."""
    from django.http import JsonResponse
    from django.views.defaults import page_not_found

    if _is_api(request):
        return JsonResponse(
            {"detail": f"No API route for {request.method} {request.path}.", "code": "not_found"}, status=404
        )
    return page_not_found(request, exception)


def server_error(request):
    """handler500: JSON under /api/, the site's 500 page elsewhere."""
    from django.http import JsonResponse
    from django.views.defaults import server_error as page_server_error

    if _is_api(request):
        return JsonResponse(
            {"detail": "Internal server error; it has been logged.", "code": "server_error"}, status=500
        )
    return page_server_error(request)
