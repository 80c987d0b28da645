"""A Content-Security-Policy on every reply: the dashboard, the admin console, the API and
its docs run only the scripts this server serves (and an inline one only with the reply's
nonce), load nothing from anywhere else, and cannot be framed.

Style attributes stay allowed (`style-src-attr 'unsafe-inline'`): they run no script and
select nothing (the CSS exfiltration tricks need style elements, which need the nonce);
the templates use them for one-off layout. The API docs pages (Swagger UI, Redoc) inject
style elements of their own at run time, so their style-src also takes 'unsafe-inline';
their scripts still need the nonce or this server.

`request.csp_nonce` is fresh per request; a template marks an inline script or style
element with `nonce="{{ request.csp_nonce }}"`.
"""

import secrets

DOCS_PATHS = ("/api/docs/", "/api/redoc/")


def policy(nonce: str, *, docs: bool = False) -> str:
    styles = "'self' 'unsafe-inline'" if docs else f"'self' 'nonce-{nonce}'"
    return "; ".join(
        [
            "default-src 'self'",
            f"script-src 'self' 'nonce-{nonce}'",
            f"style-src {styles}",
            "style-src-attr 'unsafe-inline'",
            "img-src 'self' data: blob:",
            "font-src 'self' data:",
            "connect-src 'self'",
            "worker-src 'self' blob:",  # Redoc parses the schema in a worker it makes from a blob
            "object-src 'none'",
            "base-uri 'self'",
            "form-action 'self'",
            "frame-ancestors 'none'",
        ]
    )


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request.csp_nonce = secrets.token_urlsafe(18)
        response = self.get_response(request)
        if "Content-Security-Policy" not in response.headers:
            response.headers["Content-Security-Policy"] = policy(
                request.csp_nonce, docs=request.path.startswith(DOCS_PATHS)
            )
        return response
