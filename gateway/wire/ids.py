"""Request ids: the gateway's own are 128 bits from the operating system's CSPRNG
(`os.urandom`), so nobody can predict the next one from the ones they saw; a client's
X-Request-Id is kept for tracing (echoed back) when it is 1-128 printable ASCII
characters, and replaced otherwise. A request served in an online experiment is the
exception (`exposure_id`): its exposure is recorded under its request id, and feedback finds
it by that id, so there the id is always the gateway's own, and the reply's X-Request-Id
says which one it is. A client's id could collide with another client's (by chance or on
purpose: an id chosen to claim someone else's exposure), and whether it does is known only
to the store, long after the reply; two requests with one client id are two exposures.

The random bytes are read 4 KiB at a time (256 ids per getrandom() call: ~0.1 µs per id
instead of a syscall per request); each byte is used once, and a forked worker starts
with an empty buffer so two processes never hand out the same ids.
"""

from __future__ import annotations

import os

MAX_REQUEST_ID = 128
_ID_BYTES = 16
_BATCH = 4096

_buffer = b""
_offset = _BATCH


def _forget_buffer() -> None:
    global _buffer, _offset
    _buffer, _offset = b"", _BATCH


os.register_at_fork(after_in_child=_forget_buffer)


def new_id() -> str:
    """128 random bits from os.urandom, as 32 hex characters."""
    global _buffer, _offset
    if _offset >= _BATCH:
        _buffer, _offset = os.urandom(_BATCH), 0
    start = _offset
    _offset = start + _ID_BYTES
    return _buffer[start : start + _ID_BYTES].hex()


def request_id(headers: dict) -> str:
    """The client's X-Request-Id when it is 1-128 printable ASCII characters (it is echoed
    in a response header), else a new one."""
    rid = headers.get("x-request-id")
    if rid and len(rid) <= MAX_REQUEST_ID and rid.isascii() and rid.isprintable():
        return rid
    return new_id()


def exposure_id(headers: dict, rid: str, experiment: str) -> str:
    """The id a request is answered under: in an experiment (its exposure is recorded under
    it) `rid` when the gateway made it, a fresh one when `rid` is the client's X-Request-Id."""
    return new_id() if experiment and rid == headers.get("x-request-id") else rid
