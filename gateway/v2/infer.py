"""POST /v2/models/{endpoint}/infer: the gateway's hot path.

Look the endpoint up in the current table, check the caller's key (access.py), parse the
request once (orjson) and check its tensors (tensors.py), choose the variant (sticky or
weighted) and check the request against that variant's signature, pick the replica with the
fewest outstanding requests, forward the original bytes, fail over once when an attempt
fails for the backend's reasons (the decisions are failover.py's), queue a shadow copy,
reply with the upstream's status, body and tensor headers plus X-Request-Id and
X-Model-Variant. Each outcome is counted as the variant's (served, or a backend failure) or
the client's (4xx, a deadline below the endpoint's floor, a disconnect, a Triton 500 that
says it cannot read the body: failover.blames_request): only the former feed the judge and
the breakers.

`Inference.route` (choice, signature, replica, the protocol's `send`, failover) is shared
with gRPC (gateway/v2/grpc/); a versioned request is pinned to the variant serving that
registry version: no split, no failover to another version.
"""

from __future__ import annotations

import random
from time import perf_counter

from gateway.contracts.feedback_rules import endpoint_token, max_unit_key
from gateway.keys.tenants import release
from gateway.kserve.replies import public_reply, rename_error
from gateway.kserve.tensors import inflate, parse_request
from gateway.table.affinity import affinity_key, replica_for
from gateway.telemetry import metrics
from gateway.v2.access import admit, missing
from gateway.v2.failover import (
    UNAVAILABLE_STATUSES,
    FailureReason,
    Kind,
    blames_request,
    counts_as_upstream_error,
    failure_detail,
    failure_outcome,
    retry_on_stable,
)
from gateway.v2.metadata import unknown_version
from gateway.wire.faults import BACKEND, CLIENT, OK, Problem
from gateway.wire.headers import deadline_s, forwarded_headers, reply_headers
from gateway.wire.ids import exposure_id, request_id
from gateway.wire.responses import IHCL, error, unavailable
from gateway.wire.upstream import UpstreamError

MAX_UNIT_KEY = max_unit_key()
MIN_RETRY_S = 0.0005  # no retry with less of the deadline left than this


class UpstreamFailure(Exception):
    """Why one attempt did not serve; `served`: what a PASS_THROUGH passes on (HTTP: Triton's
    (status, headers, body); gRPC: its status); `body`: Triton's error as JSON."""

    def __init__(self, reason: FailureReason, status: int = 0, headers=None, body: bytes = b"", served=None):
        self.reason, self.status, self.headers, self.body = reason, status, headers, body
        self.served = (status, headers, body) if served is None else served


NO_REPLICA = failure_outcome(FailureReason.UNAVAILABLE, deadline_passed=False, retried=False)


class Inference:
    """The infer handler of one gateway (its table, breakers, metrics, shadows, exposures)."""

    def __init__(self, gateway):
        self.gateway = gateway
        self.hot = gateway.hot
        self.breakers = gateway.breakers
        self.max_body_bytes = gateway.settings.max_body_bytes

    async def infer(self, request, name: str, version: str | None = None):
        t0 = perf_counter()
        headers = request.headers
        rid = request_id(headers)
        table = self.gateway.table
        ep = table.endpoints.get(name) if table is not None else None
        if ep is None:
            response, ours = missing(table, name, headers, rid)
            # a refused entry counts on its endpoint (a name of the table); anything else in one
            # "(unknown)" bucket, never the client's string: metric cardinality stays bounded
            label = name if ours and table is not None else metrics.UNKNOWN_ENDPOINT
            return self._done(request, response, t0, label, "none", BACKEND if ours else CLIENT)
        key, response = admit(table, ep, headers, rid, t0)
        if response is not None:
            return self._done(request, response, t0, name, "none", CLIENT, key)
        if version is None:  # in an experiment, an exposure: recorded under an id of the gateway's (ids.py)
            rid = exposure_id(headers, rid, ep.experiment)
        in_flight = self.hot.in_flight
        in_flight[name] = in_flight.get(name, 0) + 1
        try:
            return await self._serve(request, ep, headers, rid, t0, key, version)
        finally:
            in_flight[name] -= 1
            if key is not None:
                release(key)

    def _done(self, request, response, t0: float, ep_name: str, variant: str, fault: str, tenant=None):
        status = response[0]
        conn = request.conn
        if conn is not None and conn.lost and fault is not BACKEND:
            status, fault = 499, CLIENT  # nobody got the reply (nginx's "client closed request")
        self.hot.done(ep_name, variant, status, perf_counter() - t0, fault, tenant)
        return response

    def _client_error(self, request, problem, rid: str, t0: float, name: str, tenant):
        status, code, detail = problem
        return self._done(request, error(status, code, detail, rid), t0, name, "none", CLIENT, tenant)

    @staticmethod
    def choose(ep, sticky: str | None, parsed, pinned=None):
        """(variant, failure or None) for this request, or the client's Problem. A request the
        stable takes and the chosen candidate's signature refuses (a breaking signature
        change) is the candidate's failure, served by the stable. A `pinned` variant (a
        versioned request) is checked against its own signature only. A sticky key longer than
        a unit key may be is refused (it is the unit of every exposure: bounded at the door)."""
        if sticky is not None and len(sticky) > MAX_UNIT_KEY:
            return Problem(400, "invalid_header", f"{ep.sticky_header} is longer than {MAX_UNIT_KEY} characters")
        variant = pinned if pinned is not None else ep.choose(sticky)
        signature = variant.signature
        if signature is None:
            return variant, None
        problem = signature.check(parsed)
        if problem is None:
            return variant, None
        stable = ep.stable
        if (
            pinned is not None
            or variant is stable
            or (stable.signature is not None and stable.signature.check(parsed) is not None)
        ):
            return problem
        return variant, UpstreamFailure(FailureReason.INCOMPATIBLE)

    # --- one request --------------------------------------------------------------------
    async def _serve(self, request, ep, headers, rid: str, t0: float, tenant, version: str | None = None):
        name = ep.name
        pinned = None
        if version is not None:
            pinned = ep.versions.get(version)
            if pinned is None:
                response = error(404, "unknown_version", unknown_version(ep, version), rid)
                return self._done(request, response, t0, name, "none", CLIENT, tenant)
        timeout = deadline_s(headers, ep.timeout_s)
        if type(timeout) is Problem:
            return self._client_error(request, timeout, rid, t0, name, tenant)
        forwarded = forwarded_headers(headers)
        if type(forwarded) is Problem:
            return self._client_error(request, forwarded, rid, t0, name, tenant)
        up_headers, encoding = forwarded
        # One parse of the request (orjson) and its model-independent checks, then the
        # chosen variant's signature: a request that does not fit never reaches Triton.
        body = request.body  # the HTTP server enforces the size limit (413) while reading
        plain = body if encoding is None else inflate(body, encoding, request.body_limit or self.max_body_bytes)
        if type(plain) is Problem:
            return self._client_error(request, plain, rid, t0, name, tenant)
        parsed = parse_request(plain, headers.get("inference-header-content-length"))
        if type(parsed) is Problem:
            return self._client_error(request, parsed, rid, t0, name, tenant)
        routed = await self.route(
            ep, parsed, headers.get(ep.sticky_key), timeout, self.attempt, (body, up_headers), t0, pinned
        )
        if type(routed) is Problem:
            return self._client_error(request, routed, rid, t0, name, tenant)
        variant, served, failed = routed
        if failed is not None:
            outcome, failure = failed
            status, out, data, fault = self._failure_response(outcome, failure, ep, variant, rid, timeout)
            return self._done(request, (status, out, data), t0, name, variant.name, fault, tenant)
        if pinned is None and ep.shadows and ep.shadow_sample_rate > 0.0 and random.random() < ep.shadow_sample_rate:
            self.gateway.shadows.offer(ep, (body, up_headers), parsed)
        capture = None
        if pinned is None and ep.capture_share > 0.0 and random.random() < ep.capture_share:
            capture = self.gateway.exposures.capture_of(ep, variant, plain, headers)
        return self._reply(request, ep, variant, served, headers, rid, t0, tenant, pinned, capture)

    async def route(self, ep, parsed, sticky, timeout: float, send, payload, t0: float, pinned=None):
        """Choose, attempt and fail over, for either protocol. `send(entry, payload,
        timeout, endpoint, variant, client_bound)` is the protocol's one upstream attempt
        (raises UpstreamFailure). Returns the client's Problem, or (variant, served, None),
        or (variant, None, (failover.Outcome, UpstreamFailure)) when nothing served."""
        chosen = self.choose(ep, sticky, parsed, pinned)
        if type(chosen) is Problem:
            return chosen
        variant, failure = chosen
        stable = ep.stable if pinned is None else pinned
        key = affinity_key(ep, parsed, sticky) if ep.affinity_input else None
        entry = None
        if failure is None:
            entry = replica_for(ep, variant, key)
            if entry is None and variant is stable:
                entry = stable.pick_panic()  # every stable replica ejected: try a live one rather than refuse all
            if entry is None:
                if variant is stable:
                    return variant, None, (NO_REPLICA, UpstreamFailure(FailureReason.UNAVAILABLE))
                failure = UpstreamFailure(FailureReason.UNAVAILABLE)
        client_limited = timeout < ep.min_timeout_s
        if entry is not None:
            attempt_timeout = timeout if variant.attempt_timeout_s is None else min(timeout, variant.attempt_timeout_s)
            client_bound = client_limited and attempt_timeout == timeout
            try:
                served = await send(entry, payload, attempt_timeout, ep.name, variant.name, client_bound)
                return variant, served, None
            except UpstreamFailure as exc:
                failure = exc
        return await self._recover(
            failure, ep, stable, variant, entry, parsed, send, payload, t0 + timeout, client_limited, key
        )

    async def _recover(self, failure, ep, stable, variant, entry, parsed, send, payload, deadline, client_limited, key):
        """After a failed first attempt: at most one retry (failover.retry_on_stable), then
        the answer failover.failure_outcome gives. `stable` is where a retry may go (the
        pinned variant itself for a versioned request). Returns (variant, served, None)
        when the retry served or Triton's own 5xx is passed on, else (variant, None,
        (outcome, failure)). `key`: the user's affinity key (affinity.py), or None."""
        name = ep.name
        reason = failure.reason
        if counts_as_upstream_error(reason):
            metrics.UPSTREAM_ERRORS.labels(name, variant.name, reason).inc()
        on_stable = variant is stable
        stable_fits = True
        if not on_stable and reason is not FailureReason.INCOMPATIBLE and stable.signature is not None:
            stable_fits = stable.signature is variant.signature or stable.signature.check(parsed) is None
        retry_entry = None
        if retry_on_stable(reason, on_stable=on_stable, stable_fits=stable_fits):
            retry_entry = stable.pick_after(key, entry) if on_stable else replica_for(ep, stable, key)
            if retry_entry is None and not on_stable:
                retry_entry = stable.pick_panic()
            if on_stable and retry_entry is entry:
                retry_entry = None
        remaining = deadline - perf_counter()
        if retry_entry is not None and remaining > MIN_RETRY_S:
            if reason is not FailureReason.UNAVAILABLE:
                metrics.RETRIES.labels(name, variant.name).inc()
            if not on_stable:
                metrics.FAILOVERS.labels(name, variant.name, stable.name, reason).inc()
            from_variant, variant = variant, stable
            try:
                served = await send(retry_entry, payload, remaining, name, variant.name, client_limited)
                return variant, served, None
            except UpstreamFailure as exc:
                failure = exc
                metrics.failover_failed(name, from_variant.name, reason, on_stable)
                if counts_as_upstream_error(exc.reason):
                    metrics.UPSTREAM_ERRORS.labels(name, variant.name, exc.reason).inc()
        outcome = failure_outcome(
            failure.reason, deadline_passed=deadline - perf_counter() <= 0, retried=retry_entry is not None
        )
        if outcome.kind is Kind.PASS_THROUGH:  # Triton's own 5xx: passed on, renamed, as the backend's
            return variant, failure.served, None
        return variant, None, (outcome, failure)

    def _failure_response(self, outcome, failure, ep, variant, rid: str, timeout: float):
        """(status, headers, body, fault) for an outcome of failover.failure_outcome."""
        detail = failure_detail(outcome, failure, ep, variant, timeout)
        if outcome.retry_later:
            status, headers, body = unavailable(detail, rid, variant.name, self.breakers.retry_wait(variant))
        else:
            status, headers, body = error(outcome.status, outcome.code, detail, rid, variant.name)
        return status, headers, body, outcome.fault

    async def attempt(
        self,
        entry,
        payload: tuple,
        timeout: float,
        ep_name: str,
        variant_name: str,
        client_bound: bool = False,
    ):
        """One HTTP upstream attempt of (body, forwarded header bytes). `client_bound`: `timeout` is the client's deadline, below
        the endpoint's floor, so running out of it is the client's doing: no breaker
        count, reason CLIENT_DEADLINE."""
        state, line = entry[0], entry[1]
        body, headers = payload
        state.outstanding += 1
        t0 = perf_counter()
        try:
            status, rheaders, data = await state.pool.request(line + headers, body, timeout)
        except TimeoutError:
            if client_bound:
                raise UpstreamFailure(FailureReason.CLIENT_DEADLINE) from None
            self.breakers.failed(state)
            raise UpstreamFailure(FailureReason.TIMEOUT) from None
        except UpstreamError as exc:
            refused = exc.reason == "connect"
            self.breakers.failed(state, refused=refused)
            raise UpstreamFailure(FailureReason.CONNECT if refused else FailureReason.DISCONNECT) from None
        except OSError:
            self.breakers.failed(state)
            raise UpstreamFailure(FailureReason.DISCONNECT) from None
        finally:
            state.outstanding -= 1
        self.hot.observe_upstream(ep_name, variant_name, perf_counter() - t0)
        if status >= 500:
            if blames_request(status, data):  # Triton's words for a body it cannot read: the client's
                raise UpstreamFailure(FailureReason.BAD_INPUT, status, rheaders, data)
            if status in UNAVAILABLE_STATUSES:
                self.breakers.failed(state)
            raise UpstreamFailure(FailureReason.UPSTREAM_5XX, status, rheaders, data)
        if status == 404:
            # Triton's "Request for unknown model": the route table's model is not loaded
            # on this replica (loading, or the replica restarted): the replica's fault,
            # ejected until its ready probe passes; never the client's 404.
            self.breakers.failed(state)
            raise UpstreamFailure(FailureReason.NOT_LOADED, status, rheaders, data)
        state.failures = 0
        return status, rheaders, data

    # --- the reply ----------------------------------------------------------------------
    def _reply(self, request, ep, variant, served, headers, rid: str, t0: float, tenant, pinned=None, capture=None):
        status, rheaders, data = served
        name = ep.name
        out = reply_headers(rheaders, rid, variant.name)
        # the endpoint's name, not the Triton model's (replies.py)
        if status == 200:
            public = public_reply(data, out.get("Content-Encoding"), variant.reply_from, variant.reply_to)
            if public is not None:
                json_length = out.get(IHCL)
                if json_length is None:
                    data = public[0]
                elif json_length.isdigit():  # binary tensors follow the JSON part: its length moves
                    out[IHCL] = str(int(json_length) + public[1])
                    data = public[0]
        else:
            data = rename_error(data, out.get("Content-Encoding"), variant.triton_model.encode(), name.encode())
        if status == 200 and ep.exposure_token_key and pinned is None:  # feedback may cite it (feedback_rules.py)
            out["X-Exposure-Token"] = endpoint_token(ep, variant.name, rid, headers.get(ep.sticky_key))
        fault = OK if status < 400 else (CLIENT if status < 500 else BACKEND)
        response = self._done(request, (status, out, data), t0, name, variant.name, fault, tenant)
        if status == 200:  # after the latency is taken: sampling must not tilt the judge's comparison
            gateway = self.gateway
            gateway.scores.maybe_observe(
                name, variant.name, rheaders, data, candidate=variant is not ep.stable, at_least=ep.stable_score_rate
            )
            if (ep.experiment or capture) and pinned is None:  # the assigned arm (intention to treat)
                gateway.exposures.record(
                    rid,
                    ep.experiment,
                    name,
                    variant.name,
                    headers.get(ep.sticky_key),
                    data,
                    rheaders.get("content-encoding"),
                    capture,
                )
        return response
