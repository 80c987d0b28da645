"""Errors services raise; the API maps them to JSON {"detail", "code"} with their status,
the dashboard shows them as form errors, the CLI prints them."""

import re

from django.core.exceptions import PermissionDenied
from django.http import Http404

# An absolute file path (two or more parts) not inside a URL or URI ("runs:/…", "http://…"),
# and not one of the platform's own URL paths (/api/…, /v2/…, which messages name on purpose).
_ABSOLUTE_PATH = re.compile(r"(?<![\w:/.~-])/(?!api/|v2/)(?:[\w.@+~-]+/)+([\w.@+~-]+)")


def scrub_paths(text: str) -> str:
    """Replace absolute server paths with their last part ("/srv/var/tmp/x.onnx" -> "x.onnx"):
    messages shown to users never reveal the server's layout."""
    return _ABSOLUTE_PATH.sub(lambda m: m.group(1), text) if text else text


class PlatformError(Exception):
    status = 400
    code = "invalid"

    def __init__(self, detail: str, *, code: str | None = None, field: str | None = None, status: int | None = None):
        detail = scrub_paths(detail)
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
