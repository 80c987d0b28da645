"""What both request paths say when a request does not get its reply, one owner for each:

- `Problem`: (status, code, detail) of a request the gateway refuses, whatever protocol
  carries it (a KServe v2 error body, a gRPC status, an OpenAI error object);
- the fault label of `gateway_requests_total` and `gateway_llm_requests_total`, whose fault
  a request's outcome is: none, the client's or the backend's (the judge and the breakers
  count only the backend's). Dashboards and the collector read these values: they do not
  change.
"""

from __future__ import annotations

# fault label of the request counters
OK, CLIENT, BACKEND = "none", "client", "backend"


class Problem(tuple):
    """(status, code, detail) of a request the gateway refuses."""

    __slots__ = ()

    def __new__(cls, status: int, code: str, detail: str):
        return super().__new__(cls, (status, code, detail))
