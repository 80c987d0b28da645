"""Redirects to a `next=` the client sent go only to this site."""

from django.shortcuts import redirect
from django.utils.http import url_has_allowed_host_and_scheme


def redirect_next(request, fallback: str, *args, **kwargs):
    """Redirect to the request's `next` (POST, else GET) when it is a path or URL of this
    site (same host, https when the request is secure); otherwise to `fallback`."""
    target = request.POST.get("next") or request.GET.get("next") or ""
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return redirect(target)
    return redirect(fallback, *args, **kwargs)
