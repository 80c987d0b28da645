"""A multipart parser that refuses file names with path parts instead of silently
stripping them (Django's parser keeps only the base name)."""

from django.http.multipartparser import MultiPartParser as DjangoMultiPartParser
from django.http.multipartparser import MultiPartParserError
from rest_framework import parsers


class _StrictDjangoParser(DjangoMultiPartParser):
    def sanitize_file_name(self, file_name):
        raw = file_name or ""
        if "/" in raw or "\\" in raw or raw in {".", ".."} or "\x00" in raw:
            raise MultiPartParserError(f"file name {raw!r} has path parts; send a bare name such as model.onnx")
        return super().sanitize_file_name(file_name)


class StrictMultiPartParser(parsers.MultiPartParser):
    def parse(self, stream, media_type=None, parser_context=None):
        parser_context = parser_context or {}
        request = parser_context["request"]
        meta = request.META.copy()
        meta["CONTENT_TYPE"] = media_type
        try:
            parser = _StrictDjangoParser(meta, stream, request.upload_handlers, parser_context.get("encoding") or "utf-8")
            data, files = parser.parse()
            return parsers.DataAndFiles(data, files)
        except MultiPartParserError as exc:
            from rest_framework.exceptions import ParseError

            raise ParseError(f"Multipart form parse error - {exc}") from exc
