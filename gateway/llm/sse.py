"""A backend's server-sent events, read for the LLM path (backends.py).

SSE framing: httpx2's EventSource (httpx2 is the maintained successor of httpx, its SSE support
derived from httpx-sse) over aiohttp's body, through httpx2's public Response with a streamed
body: it checks the content type (a 200 that is not `text/event-stream`, say a server that
ignored `stream: true` and sent JSON, is the backend's failure: the request falls back), splits
lines as the WHATWG rules say (LF, CR, CRLF), joins `data:` lines, skips comments and other
fields, and bounds an event (with its pending line) at MAX_EVENT bytes.
"""

from __future__ import annotations

import aiohttp
import httpx2

from gateway.llm.failover import BackendFailure, FailureReason

MAX_EVENT = 1024 * 1024  # bytes of one event, its unfinished line included
# the request httpx2's Response is made with (it reads nothing of it but names it in errors): one
# for every reply, not a URL parsed per attempt
REQUEST = httpx2.Request("POST", "http://llm-backend/")


async def sse_events(resp: aiohttp.ClientResponse):
    """The data of each server-sent event of `resp` (str), bounded; BackendFailure(FailureReason.PROTOCOL)
    for a reply that is not an event stream or an event past MAX_EVENT."""
    response = httpx2.Response(
        resp.status,
        headers={"content-type": resp.headers.get("Content-Type", "")},  # aiohttp has decoded the body
        content=_chunks(resp.content),
        request=REQUEST,
    )
    try:
        async for event in httpx2.EventSource(response, max_event_size=MAX_EVENT):
            if event.data:  # an event of other fields only (a named ping) carries nothing to read
                yield event.data
    except httpx2.SSEError as exc:
        raise BackendFailure(
            FailureReason.PROTOCOL, f"the backend's reply is not a readable event stream: {exc}"[:300]
        ) from None
    except UnicodeDecodeError:
        raise BackendFailure(FailureReason.PROTOCOL, "the backend's event stream is not UTF-8") from None


async def _chunks(content: aiohttp.StreamReader):
    """The body as it arrives (aiohttp pauses the socket past its high-water mark: backpressure)."""
    async for chunk in content.iter_any():
        yield chunk
