"""What a reply that is not streamed may hold in the gateway's memory, bounded three ways:

- per request: GATEWAY_LLM_MAX_REPLY_BYTES of text (a backend that sends more gets the
  request a 502 `reply_too_large`: the client should stream a reply that long);
- per key and per team, on the whole host: the bytes every worker holds at once for that
  key's (team's) replies in progress, in the workers' shared memory (gateway/keys/sharedlimits.py,
  one slot per key and per team, given back when a worker dies), at most
  GATEWAY_LLM_BUFFER_BYTES_PER_KEY (_PER_TEAM). A request whose next piece would take its
  key or team past that gets 429 `reply_buffer_full` at once, its bytes released: the tenant
  over its share is refused, never another tenant (whose share is its own).

Anonymous callers of a public endpoint count as one key per endpoint, with the endpoint's
team. A streamed reply holds one event at a time (bounded in backends.py) and is not counted.
"""

from __future__ import annotations

from gateway.llm.errors import LlmError
from gateway.llm.quotas import limits_store


class ReplyBuffer:
    """The bytes one collected reply holds, charged to its key's and its team's shares."""

    __slots__ = ("store", "slots", "limits", "held", "max_reply")

    def __init__(self, *, key_id: str, team: str, per_key: int, per_team: int, max_reply: int):
        self.store = limits_store()
        self.slots = (self.store.slot(f"\x1ebuffer\x1f{key_id}"), self.store.slot(f"\x1ebuffer-team\x1f{team}"))
        self.limits = (float(per_key), float(per_team))
        self.held = 0
        self.max_reply = max_reply

    def grow(self, amount: int) -> None:
        """Hold `amount` more bytes, or raise LlmError (502 past the request's bound, 429 past a share)."""
        if self.held + amount > self.max_reply:
            raise LlmError(
                502,
                "reply_too_large",
                f"the backend's reply is longer than {self.max_reply} bytes, the most a reply that is not "
                "streamed may hold: ask for a stream (stream: true) or fewer max_tokens",
            )
        taken = []
        for slot, limit, whose in zip(self.slots, self.limits, ("key", "team")):
            if slot < 0:
                continue  # the shared table is full: this worker's bound per request still holds
            held = self.store.hold(slot, float(amount), limit)
            if held is not None:
                for done in taken:
                    self.store.unhold(done, float(amount))
                raise LlmError(
                    429,
                    "reply_buffer_full",
                    f"the replies of this {whose} that are not streamed already hold {int(held)} bytes in the gateway "
                    f"(its share is {int(limit)}): stream them, or retry when some have finished",
                    None,
                    1.0,
                )
            taken.append(slot)
        self.held += amount

    def release(self) -> None:
        if self.held:
            for slot in self.slots:
                if slot >= 0:
                    self.store.unhold(slot, float(self.held))
            self.held = 0
