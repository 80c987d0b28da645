"""n choices from a Triton backend: n generations of the same request on one replica, read as
one attempt (the interface of backends.Attempt: open, pieces, close, replica, sent_at).

A generate model answers one text per request, so a request for n > 1 choices is n upstream
requests (backends.Attempt with index i: its seed seed + i when the client gave one, so the
choices differ and the same request gives the same choices). They are opened together; if
one fails before the first token, all are closed and the request fails over as one (a choice
from one backend and another from the next would be two models' answers). Their Pieces are
merged as they come, tagged with their choice's index; each generation is read only as fast as
the merged stream is (a queue of n: backpressure holds). The counts are the request's, as
OpenAI's usage counts them: the prompt once, the completion tokens summed over the choices
(`generated` the sum so far; `completion_tokens` once every choice has its own).
"""

from __future__ import annotations

import asyncio

from gateway.llm.backends import Attempt


class FanOut:
    def __init__(self, attempts: list[Attempt]):
        self.attempts = attempts
        self.replica = attempts[0].replica
        self.sent_at = 0.0

    async def open(self) -> None:
        results = await asyncio.gather(*(a.open() for a in self.attempts), return_exceptions=True)
        self.sent_at = self.attempts[0].sent_at
        for result in results:
            if isinstance(result, BaseException):
                self.close()
                raise result

    async def pieces(self):
        queue: asyncio.Queue = asyncio.Queue(maxsize=len(self.attempts))
        tasks = [asyncio.create_task(_pump(i, a, queue)) for i, a in enumerate(self.attempts)]
        left, generated, completion = len(tasks), {}, {}
        try:
            while left:
                item = await queue.get()
                if type(item) is int:  # that generation ended
                    left -= 1
                    continue
                if isinstance(item, BaseException):
                    raise item
                if item.generated is not None:
                    generated[item.index] = item.generated
                if item.completion_tokens is not None:
                    completion[item.index] = generated[item.index] = item.completion_tokens
                item.generated = sum(generated.values()) if generated else None
                item.completion_tokens = sum(completion.values()) if len(completion) == len(tasks) else None
                yield item
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def close(self) -> None:
        for attempt in self.attempts:
            attempt.close()


async def _pump(index: int, attempt: Attempt, queue: asyncio.Queue) -> None:
    pieces = attempt.pieces()
    try:
        async for piece in pieces:
            piece.index = index
            await queue.put(piece)
        await queue.put(index)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - the merged stream raises it (a BackendFailure)
        await queue.put(exc)
    finally:
        await pieces.aclose()
