"""Per-key rate limits and concurrency quotas held in total by every worker of one gateway
host (gateway/process/workers.py), in memory the workers share.

Why not a split (each of N workers enforcing 1/N): a client's connection lands on one
worker, and a gRPC client sends everything over one HTTP/2 connection, so a split gives
such a client 1/N of its quota. Why not Redis on the request path: a round trip per
request costs more CPU than the whole proxied request (`python -m bench gateway` measures
both: a shared-memory admission against an EVALSHA token bucket).

Layout: one anonymous MAP_SHARED mapping made by the supervisor before it forks the
workers, read as doubles: per key slot [tag, tokens, stamp, in flight]; then per worker
row, the in-flight count of each slot that row's worker holds, so a worker that dies with
requests in flight gives them back (`forget_row`, called by the supervisor when it reaps
it). A slot is found by open addressing on a 48-bit BLAKE2b tag of the key id (exact in a
double), so every worker finds the same slot for the same key whatever its route table's
order. One POSIX semaphore (multiprocessing.Lock) guards the arithmetic; a worker that
cannot take it within LOCK_WAIT_S (a worker killed inside the few instructions it holds
it: the supervisor frees it when it reaps that worker) goes on without it rather than stall.

Times are `time.perf_counter()` values: CLOCK_MONOTONIC, the same clock in every process.
A full table (CAPACITY keys) leaves the keys that find no slot to each worker's own
counters, logged once.
"""

from __future__ import annotations

import logging
import mmap
import multiprocessing
from hashlib import blake2b

log = logging.getLogger("gateway")

CAPACITY = 16384
FIELDS = 4  # tag, tokens (-1: not used yet), stamp, in flight (every worker)
LOCK_WAIT_S = 0.05
# Token budgets never go on unlocked (an unlocked take would admit past the budget): they wait
# this long for the lock, then the request is refused as busy (`take_budgets` returns None).
BUDGET_LOCK_WAIT_S = 1.0


def _tag(key_id: str) -> float:
    return float(int.from_bytes(blake2b(key_id.encode(), digest_size=6).digest(), "big") | 1)


class SharedLimits:
    def __init__(self, rows: int, capacity: int = CAPACITY):
        self.capacity = capacity
        self.rows = rows
        self.mapping = mmap.mmap(-1, 8 * capacity * (FIELDS + rows))  # anonymous + shared: inherited by fork
        self.values = memoryview(self.mapping).cast("d")
        self.lock = multiprocessing.Lock()
        self.row_base = capacity * FIELDS  # this process's row (set_row in each worker)
        self.slots: dict[str, int] = {}  # key id -> slot, this process's cache
        self.full_logged = False

    def set_row(self, row: int) -> None:
        self.row_base = self.capacity * (FIELDS + row)
        self.slots.clear()

    def slot(self, key_id: str) -> int:
        """The key's slot (made on first use by any worker), or -1 when the table is full."""
        found = self.slots.get(key_id)
        if found is not None:
            return found
        tag = _tag(key_id)
        values = self.values
        start = int(tag) % self.capacity
        with self.lock:
            for i in range(self.capacity):
                slot = (start + i) % self.capacity
                base = slot * FIELDS
                current = values[base]
                if current == tag:
                    break
                if current == 0.0:
                    values[base], values[base + 1], values[base + 2], values[base + 3] = tag, -1.0, 0.0, 0.0
                    break
            else:
                slot = -1
        if slot < 0 and not self.full_logged:
            self.full_logged = True
            log.warning("shared key limits are full (%d keys): further keys are limited per worker", self.capacity)
        self.slots[key_id] = slot
        return slot

    def admit(self, slot: int, now: float, rate: float | None, burst: float, max_concurrency: int | None):
        """None when admitted (one in flight taken: `release` later), else
        ("concurrency_limit", in flight) or ("rate_limited", seconds until a token)."""
        values = self.values
        base = slot * FIELDS
        lock = self.lock
        locked = lock.acquire(True, LOCK_WAIT_S)  # not within the wait: a dead worker holds it; go on unlocked
        try:
            if max_concurrency is not None and values[base + 3] >= max_concurrency:
                return "concurrency_limit", values[base + 3]
            if rate is not None:
                tokens = values[base + 1]
                if tokens < 0.0:
                    tokens = burst
                    values[base + 2] = now
                elif now > values[base + 2]:
                    # only forward: a request that arrived before the last admission (another
                    # worker's) refills nothing, or the same interval would be refilled twice
                    tokens += (now - values[base + 2]) * rate
                    if tokens > burst:
                        tokens = burst
                    values[base + 2] = now
                if tokens < 1.0:
                    values[base + 1] = tokens
                    return "rate_limited", (1.0 - tokens) / rate
                values[base + 1] = tokens - 1.0
            values[base + 3] += 1.0
            values[self.row_base + slot] += 1.0
        finally:
            if locked:
                lock.release()
        return None

    def release(self, slot: int) -> None:
        values = self.values
        lock = self.lock
        locked = lock.acquire(True, LOCK_WAIT_S)
        try:
            values[slot * FIELDS + 3] -= 1.0
            values[self.row_base + slot] -= 1.0
        finally:
            if locked:
                lock.release()

    def take(self, slot: int, now: float, rate: float, burst: float, amount: float, need: float) -> float:
        """A token bucket of `amount`s (an LLM key's tokens per minute, gateway/llm/quotas.py) in the
        slot's tokens and stamp: 0.0 when at least `need` tokens are there (then `amount` is taken,
        the bucket may go below zero: a debt the refill pays first), else the seconds until `need`."""
        values = self.values
        base = slot * FIELDS
        lock = self.lock
        locked = lock.acquire(True, LOCK_WAIT_S)
        try:
            tokens = values[base + 1]
            if tokens == -1.0 and values[base + 2] == 0.0:  # never used: a full bucket
                tokens = burst
                values[base + 2] = now
            elif now > values[base + 2]:
                tokens = min(burst, tokens + (now - values[base + 2]) * rate)
                values[base + 2] = now
            if tokens < need:
                values[base + 1] = tokens
                return (need - tokens) / rate
            values[base + 1] = tokens - amount
            return 0.0
        finally:
            if locked:
                lock.release()

    def take_budgets(self, budgets, now: float, amount: float) -> tuple[float, int] | None:
        """Take `amount` from every budget of `budgets` [(slot, capacity, refill per second)] at
        once, or from none: (0.0, -1) when each holds min(amount, capacity) (then `amount` is
        taken from each, a budget may go below zero: a debt the refill pays first), else (the
        seconds until the last of them does, its index), nothing taken. All under one lock,
        never without it: None when the lock is not had within BUDGET_LOCK_WAIT_S (nothing
        taken; the caller refuses)."""
        values = self.values
        if not self.lock.acquire(True, BUDGET_LOCK_WAIT_S):
            return None
        try:
            wait, binding, levels = 0.0, -1, []
            for index, (slot, capacity, rate) in enumerate(budgets):
                base = slot * FIELDS
                tokens = values[base + 1]
                if tokens == -1.0 and values[base + 2] == 0.0:  # never used: a full bucket
                    tokens = capacity
                elif now > values[base + 2]:
                    tokens = min(capacity, tokens + (now - values[base + 2]) * rate)
                values[base + 1] = tokens
                values[base + 2] = max(now, values[base + 2])
                need = min(amount, capacity)
                if tokens < need and (need - tokens) / rate > wait:
                    wait, binding = (need - tokens) / rate, index
                levels.append(base)
            if binding >= 0:
                return wait, binding
            for base in levels:
                values[base + 1] -= amount
            return 0.0, -1
        finally:
            self.lock.release()

    def give_budgets(self, budgets, amount: float) -> None:
        """Correct a `take_budgets` once the real count is known: `amount` back to each (negative: more taken)."""
        values = self.values
        locked = self.lock.acquire(True, BUDGET_LOCK_WAIT_S)
        try:
            for slot, capacity, _ in budgets:
                values[slot * FIELDS + 1] = min(capacity, values[slot * FIELDS + 1] + amount)
        finally:
            if locked:
                self.lock.release()

    def give(self, slot: int, amount: float, burst: float) -> None:
        """Correct a `take` once the real count is known: `amount` back (negative: more taken)."""
        values = self.values
        lock = self.lock
        locked = lock.acquire(True, LOCK_WAIT_S)
        try:
            values[slot * FIELDS + 1] = min(burst, values[slot * FIELDS + 1] + amount)
        finally:
            if locked:
                lock.release()

    def hold(self, slot: int, amount: float, limit: float) -> float | None:
        """Add `amount` to what the slot holds (a tenant's buffered reply bytes, gateway/llm/buffers.py)
        when the total stays within `limit`: None; else what it holds now (nothing added). What a
        worker holds goes back when it dies, like its requests in flight (`forget_row`)."""
        values = self.values
        index = slot * FIELDS + 3
        lock = self.lock
        locked = lock.acquire(True, LOCK_WAIT_S)
        try:
            held = values[index]
            if held + amount > limit:
                return held
            values[index] = held + amount
            values[self.row_base + slot] += amount
        finally:
            if locked:
                lock.release()
        return None

    def unhold(self, slot: int, amount: float) -> None:
        values = self.values
        lock = self.lock
        locked = lock.acquire(True, LOCK_WAIT_S)
        try:
            values[slot * FIELDS + 3] -= amount
            values[self.row_base + slot] -= amount
        finally:
            if locked:
                lock.release()

    def in_flight(self, slot: int) -> int:
        return int(self.values[slot * FIELDS + 3])

    def forget_row(self, row: int) -> None:
        """A worker is gone: its requests in flight no longer count (supervisor side). If it
        died holding the lock, the lock is freed."""
        if not self.lock.acquire(True, 0.2):
            self.lock.release()  # held by the dead worker (nobody holds it this long)
            self.lock.acquire()
        values = self.values
        row_base = self.capacity * (FIELDS + row)
        try:
            for slot in range(self.capacity):
                held = values[row_base + slot]
                if held:
                    values[slot * FIELDS + 3] -= held
                    values[row_base + slot] = 0.0
        finally:
            self.lock.release()
