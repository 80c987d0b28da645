"""Requests carrying NUL characters end at the door with a 400.

PostgreSQL text cannot hold U+0000: a NUL that reaches a query (a lookup by name, a
filter, a form field) ends in a DataError, i.e. a 500. DRF and Django forms refuse NUL in
the fields they validate, but not in lookups (`team`, `?endpoint=`) or the URL path, so
this is checked once for every request: path, query string and url-encoded form fields
here, JSON bodies in kernel.parsers.StrictJSONParser.
"""

from django.http import HttpResponse, JsonResponse

NUL = "\x00"


def nul_response(request, where: str):
    """A 400 naming where; for the URL path a 404 (no object's name holds a NUL, so like
    any other absurd id it "does not exist")."""
    message = f"{where}: NUL characters (U+0000) are not allowed."
    status, code = (404, "not_found") if where == "URL path" else (400, "nul_character")
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": message, "code": code}, status=status)
    return HttpResponse(message, status=status, content_type="text/plain; charset=utf-8")


class RejectNulMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        where = self._where(request)
        if where:
            return nul_response(request, where)
        return self.get_response(request)

    @staticmethod
    def _where(request) -> str:
        if NUL in request.path:
            return "URL path"
        for key, values in request.GET.lists():
            if NUL in key or any(NUL in v for v in values):
                return f"query parameter {key.replace(NUL, '')!r}"
        if request.method == "POST" and request.content_type == "application/x-www-form-urlencoded":
            for key, values in request.POST.lists():
                if NUL in key or any(NUL in v for v in values):
                    return f"form field {key.replace(NUL, '')!r}"
        return ""
