"""The API's JSON parser: DRF's, refusing NUL characters anywhere in the document (keys or
strings) with a 400 that says where; PostgreSQL text cannot store them
(kernel/middleware.py has the why)."""

from rest_framework import parsers
from rest_framework.exceptions import ParseError

NUL = "\x00"
MAX_DEPTH = 64


def _find_nul(value, path: str, depth: int = 0) -> str | None:
    if depth > MAX_DEPTH:
        raise ParseError(f"JSON parse error - nested deeper than {MAX_DEPTH} levels.")
    if isinstance(value, str):
        return path if NUL in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if NUL in key:
                return where.replace(NUL, "\\u0000")
            found = _find_nul(item, where, depth + 1)
            if found:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = _find_nul(item, f"{path}[{i}]", depth + 1)
            if found:
                return found
    return None


class StrictJSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(f"JSON parse error - nested deeper than {MAX_DEPTH} levels.") from None
        where = _find_nul(data, "")
        if where is not None:
            raise ParseError(f"{where or 'body'}: NUL characters (U+0000) are not allowed.")
        return data
