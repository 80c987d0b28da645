"""Errors services raise; the API maps them to JSON {"detail", "code"} with their status,
the dashboard shows them as form errors, the CLI prints them."""

from django.core.exceptions import PermissionDenied
from django.http import Http404


class PlatformError(Exception):
    status = 400
    code = "invalid"

    def __init__(self, detail: str, *, code: str | None = None, field: str | None = None, status: int | None = None):
        super().__init__(detail)
        self.detail = detail
        self.field = field
        if code:
            self.code = code
        if status:
            self.status = status


class InvalidInput(PlatformError):
    status = 400
    code = "invalid"


class NotFound(PlatformError, Http404):  # a dashboard view turns it into a 404 page
    status = 404
    code = "not_found"


class Forbidden(PlatformError, PermissionDenied):
    status = 403
    code = "permission_denied"


class Conflict(PlatformError):
    status = 409
    code = "conflict"


class TooLarge(PlatformError):
    status = 413
    code = "too_large"
