"""The REST API over HTTP (requests): token auth, the platform's JSON errors
{"detail", "code"} turned into CliError with an exit code, retries of reads on a
dropped connection or a 502/503/504.

The token goes only to the configured base URL's origin (scheme, host, port): a page's
`next` link or a redirect naming another origin is refused before anything is sent there
(requests would follow a redirect itself, and keeps the header on an http→https move of
the same host), so redirects are followed here, same origin only."""

from __future__ import annotations

from urllib.parse import urljoin, urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from modelplane_cli import __version__, exits
from modelplane_cli.config import API_PREFIX
from modelplane_cli.exits import CliError


def _detail_of(response: requests.Response) -> tuple[str, str | None, dict]:
    """(detail, code, field errors) of an error reply; tolerant of non-JSON bodies."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and "detail" in body:
        errors = body.get("errors") if isinstance(body.get("errors"), dict) else {}
        return str(body["detail"]), (str(body["code"]) if body.get("code") else None), errors
    if isinstance(body, dict) and "error" in body:  # KServe-shaped errors
        return str(body["error"]), None, {}
    kind = response.headers.get("Content-Type", "").split(";")[0] or "no content type"
    return (
        (
            f"HTTP {response.status_code} {response.reason or ''} from {response.url} ({kind}, not the API's JSON error; "
            "is --url the modelplane server?)"
        ).replace("  ", " "),
        None,
        {},
    )


MAX_REDIRECTS = 5


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) with the scheme's default port filled in."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = -1  # an unparseable port matches no origin
    default = {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), port if port is not None else default


class Api:
    def __init__(self, url: str, token: str, *, timeout: float = 30.0, retries: int = 2):
        self.base = url.rstrip("/") + API_PREFIX
        self.origin = origin(self.base)
        self.token = token
        self.timeout = timeout
        self.session = requests.Session()
        self.session.headers.update({"Accept": "application/json", "User-Agent": f"modelplane-cli/{__version__}"})
        if token:
            self.session.headers["Authorization"] = f"Token {token}"
        # Reads only: a POST is never sent twice behind the user's back.
        retry = Retry(
            total=retries,
            connect=retries,
            read=retries,
            status=retries,
            backoff_factor=0.5,
            status_forcelist=(502, 503, 504),
            allowed_methods=frozenset({"GET"}),
            raise_on_status=False,
        )
        adapter = HTTPAdapter(max_retries=retry)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)

    def url(self, path: str) -> str:
        return path if path.startswith(("http://", "https://")) else f"{self.base}/{path.lstrip('/')}"

    def same_origin(self, url: str, why: str) -> str:
        """`url` if it is on the configured server's origin, else a CliError (the token
        never leaves for another scheme, host or port)."""
        if origin(url) != self.origin:
            scheme, host, port = self.origin
            raise CliError(
                exits.ERROR,
                f"{why} points to {_shown(url)}, not to the configured server {scheme}://{host}:{port}; "
                "refusing to send the token there (if the server sits behind a proxy, check that it passes "
                "the original Host and scheme, or log in with the URL the server names)",
            )
        return url

    def request(self, method: str, path: str, *, params=None, json=None, data=None, headers=None) -> dict | list | None:
        return self._answer(self.send(method, path, params=params, json=json, data=data, headers=headers))

    def send(self, method: str, path: str, *, params=None, json=None, data=None, headers=None) -> requests.Response:
        """One request to the server, following same-origin redirects of reads; the raw response."""
        if not self.token:
            raise CliError(exits.AUTH, "no token: run `modelplane login` or set MODELPLANE_TOKEN.")
        url = self.same_origin(self.url(path), "the link")
        params = _clean(params)
        for _ in range(MAX_REDIRECTS + 1):
            response = self._send(method, url, params=params, json=json, data=data, headers=headers)
            if not response.is_redirect:
                return response
            target = urljoin(response.url, response.headers.get("Location", ""))
            self.same_origin(target, f"the server's redirect ({response.status_code}) from {_shown(response.url)}")
            if method not in ("GET", "HEAD"):
                raise CliError(
                    exits.ERROR,
                    f"the server redirected a {method} from {_shown(response.url)} to {_shown(target)} "
                    "(a POST is never sent twice): is --url the server's address?",
                )
            url, params = target, None  # the Location carries the query
        raise CliError(exits.ERROR, f"more than {MAX_REDIRECTS} redirects from {_shown(url)}")

    def _send(self, method, url, *, params, json, data, headers) -> requests.Response:
        try:
            return self.session.request(
                method,
                url,
                params=params,
                json=json,
                data=data,
                headers=headers,
                timeout=(min(10.0, self.timeout), self.timeout),
                allow_redirects=False,
            )
        except requests.exceptions.Timeout:
            raise CliError(exits.NETWORK, f"no answer from {url} within {self.timeout:g}s") from None
        except requests.exceptions.RetryError as exc:
            raise CliError(exits.NETWORK, f"{url}: the server kept failing ({_reason(exc)})") from None
        except requests.exceptions.ConnectionError as exc:
            raise CliError(exits.NETWORK, f"cannot reach {url}: {_reason(exc)}") from None
        except requests.exceptions.RequestException as exc:
            raise CliError(exits.NETWORK, f"{url}: {_reason(exc)}") from None

    def _answer(self, response: requests.Response):
        status = response.status_code
        if status >= 400:
            detail, code, errors = _detail_of(response)
            if status in (401, 403):
                hint = " (check the token: `modelplane login`)" if status == 401 else ""
                raise CliError(exits.AUTH, detail + hint, api_code=code, status=status, errors=errors)
            if status >= 500:
                raise CliError(exits.NETWORK, f"server error: {detail}", api_code=code, status=status)
            raise CliError(exits.API, detail, api_code=code, status=status, errors=errors)
        if status == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            raise CliError(
                exits.ERROR,
                f"{response.url} answered {status} with {response.headers.get('Content-Type', 'no content type')}, "
                "not JSON: is --url the modelplane server?",
            ) from None

    def get(self, path: str, **params):
        return self.request("GET", path, params=params)

    def poll(self, path: str, etag: str | None = None) -> tuple[dict | list | None, str | None]:
        """A conditional GET: (body, its ETag), or (None, etag) when the server answers 304
        to If-None-Match (nothing changed since)."""
        response = self.send("GET", path, headers={"If-None-Match": etag} if etag else None)
        if response.status_code == 304:
            return None, etag
        return self._answer(response), response.headers.get("ETag")

    def post(self, path: str, body: dict | None = None, *, headers=None):
        return self.request("POST", path, json=body if body is not None else {}, headers=headers)

    def page(self, path: str, *, everything: bool = False, **params) -> dict:
        """One page of a list ({count, next, previous, results}), or with `everything` all
        of them merged into that shape."""
        first = self.get(path, **params)
        if not isinstance(first, dict) or "results" not in first:
            raise CliError(exits.ERROR, f"{self.url(path)} did not answer a page of results")
        if not everything:
            return first
        results, nxt = list(first["results"]), first.get("next")
        while nxt:
            more = self.get(self.same_origin(str(nxt), "the next page's link"))
            results += more.get("results", [])
            nxt = more.get("next")
        return {"count": first.get("count", len(results)), "next": None, "previous": None, "results": results}


def _shown(url: str) -> str:
    """A URL for a message: scheme, host, port and path (no query, no credentials)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"


def _clean(params: dict | None) -> dict | None:
    return {k: v for k, v in params.items() if v is not None and v != ""} if params else None


def _reason(exc: Exception) -> str:
    """The innermost reason of a requests/urllib3 error, without the object reprs."""
    reason = exc
    while True:
        inner = getattr(reason, "reason", None) or (
            reason.args[0] if getattr(reason, "args", None) and isinstance(reason.args[0], Exception) else None
        )
        if inner is None or inner is reason:
            break
        reason = inner
    text = str(reason)
    if "Connection refused" in text:
        return "connection refused"
    if (
        "Name or service not known" in text
        or "nodename nor servname" in text
        or "Temporary failure in name resolution" in text
    ):
        return "unknown host"
    return text.split("): ")[-1] if "): " in text else text
