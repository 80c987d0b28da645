"""A multipart parser that refuses file names with path parts instead of silently
stripping them (Django's parser keeps only the base name)."""

from django.http.multipartparser import MultiPartParser as DjangoMultiPartParser
from django.http.multipartparser import MultiPartParserError
from django.utils.datastructures import ImmutableList
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
            parser = _StrictDjangoParser(
                meta, stream, request.upload_handlers, parser_context.get("encoding") or "utf-8"
            )
            data, files = parser.parse()
            return parsers.DataAndFiles(data, files)
        except MultiPartParserError as exc:
            from rest_framework.exceptions import ParseError

            raise ParseError(f"Multipart form parse error - {exc}") from exc


class _RecordingDjangoParser(DjangoMultiPartParser):
    """Django's parser, noting each file name it would strip to its base name."""

    def __init__(self, *args, refused: dict, **kwargs):
        super().__init__(*args, **kwargs)
        self._refused = refused

    def sanitize_file_name(self, file_name):
        raw = file_name or ""
        cleaned = super().sanitize_file_name(file_name)
        if cleaned and cleaned != raw and ("/" in raw or "\\" in raw):
            self._refused[cleaned] = raw
        return cleaned


class UploadNamesMiddleware:
    """Dashboard forms see the file name as sent: Django's own parsing keeps only the base
    name ("../../evil.onnx" -> "evil.onnx"), so this records the names it shortened in
    `request.upload_raw_names` ({base name: name as sent}); views pass the raw name to the
    same service check the API applies (registry.services.catalog refuses path parts)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request.upload_raw_names = {}

        def parse_file_upload(meta, post_data):
            request.upload_handlers = ImmutableList(
                request.upload_handlers, warning="You cannot alter upload handlers after the upload has been processed."
            )
            parser = _RecordingDjangoParser(
                meta, post_data, request.upload_handlers, request.encoding, refused=request.upload_raw_names
            )
            return parser.parse()

        request.parse_file_upload = parse_file_upload
        return self.get_response(request)
