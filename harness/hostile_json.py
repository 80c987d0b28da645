"""Every place of a JSON document a client chooses, and each kind of value a hostile client can
put there: for the tests that hold a parser to "a 400 naming it, or a request, never an
exception" (tests/gateway/test_tensors.py, tests/gateway/test_llm_requests.py)."""

from __future__ import annotations

import json

HOSTILE_VALUES = ([], {}, None, 1.5, True, -1, "x" * 300, [1, [2]], {"a": {"b": []}}, "\x00", 2**70)


def places(document, path: tuple = ()):
    """The path of every value inside `document` (the document itself first)."""
    yield path
    if type(document) is dict:
        for key, inner in document.items():
            yield from places(inner, (*path, key))
    elif type(document) is list:
        for index, inner in enumerate(document):
            yield from places(inner, (*path, index))


def replaced(document, path: tuple, value) -> bytes:
    """`document` as JSON bytes with the value at `path` replaced by `value`."""
    copy = json.loads(json.dumps(document))
    target = copy
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return json.dumps(copy).encode()


def variants(document):
    """(path, value, body) for every place of `document` but the whole and every hostile value."""
    for path in list(places(document))[1:]:
        for value in HOSTILE_VALUES:
            yield path, value, replaced(document, path, value)
