"""The driver side of the file sink: commit a micro-batch, roll idle parts, finish a stopped query.

Every operation follows the same protocol, under :func:`driver_lock`:

1. read the newest state version and publish its ``pending`` parts again (idempotent: this
   completes a publication a crash interrupted);
2. compute the next version (parts that roll move from ``parts`` to ``pending``) and write it:
   this is the commit point;
3. publish the new ``pending`` parts, then delete hidden files nobody needs any more.

A batch is committed once: a batch id not above the state's ``batch`` was committed before a
driver crash and its replay is a no-op (its tasks skip writing, see ``sink.py``).
"""

from __future__ import annotations

import dataclasses
import posixpath
import time
import uuid
from collections.abc import Iterable

from connectors.files.part_files import Storage, finish, sweep
from connectors.files.rolling import RollingRules
from connectors.files.sink_state import Part, SinkState, StateLog, driver_lock
from connectors.files.sink_writer import FileSinkMessage, SinkPlan, slot_bucket


def publish(storage: Storage, parts: Iterable[Part], rename: bool) -> None:
    for part in parts:
        finish(storage, part, rename)


def commit_batch(plan: SinkPlan, messages: list[FileSinkMessage | None], batch_id: int) -> None:
    written = [m for m in messages if m is not None]
    if not written:
        return
    query = written[0].query
    assert query is not None, "stream writes always carry their query id"
    storage = plan.storage
    with driver_lock(storage.base):
        log = StateLog(storage, query)
        state = log.latest()
        publish(storage, state.pending, rename=True)
        if batch_id <= state.batch:
            return
        adopted = _adopt_other_queries(storage, query) if state.version == 0 else []
        parts, pending = _merge(plan, state, written)
        now = time.time()
        for slot, part in list(parts.items()):
            if plan.rules.roll_before_write(part.size, part.opened, part.written, now):
                pending.append(parts.pop(slot))
        new = SinkState(query, state.version + 1, batch_id, parts, tuple(pending))
        log.write(new)
        publish(storage, new.pending, rename=True)
        touched = {posixpath.dirname(p.final) for p in [*new.pending, *adopted]}
        sweep(storage, touched, keep=new.referenced())
        for path in set(state.garbage) - new.referenced():
            storage.delete(path)


def _merge(plan: SinkPlan, state: SinkState, messages: list[FileSinkMessage]) -> tuple[dict[str, Part], list[Part]]:
    """Apply the tasks' reports to the committed parts."""
    parts, pending = dict(state.parts), []
    for message in messages:
        if message.skipped:
            continue
        for slot, result in message.slots.items():
            current = parts.get(slot)
            if result.rolled is not None and current is not None and current.final == result.rolled:
                pending.append(parts.pop(slot))
                current = None
            for task_part in result.parts:
                if task_part.continues and current is not None and current.final == task_part.final:
                    part = current.extended(task_part.pieces, task_part.written)
                elif task_part.continues:
                    # The listener published the part while this task appended to it: the new bytes
                    # start a new part of their own.
                    final = plan.new_final(slot_bucket(slot), uuid.uuid4().hex, 0)
                    part = dataclasses.replace(task_part.as_part(), final=final, opened=task_part.written)
                else:
                    part = task_part.as_part()
                if task_part.closed:
                    parts.pop(slot, None)
                    pending.append(part)
                    current = None
                else:
                    parts[slot] = current = part
    return parts, pending


def _adopt_other_queries(storage: Storage, query: str) -> list[Part]:
    """A new query on a base path publishes what earlier queries left open: one query writes a
    base path at a time (as with Spark's file sink), so theirs are stopped."""
    return [
        part
        for other in StateLog.queries(storage)
        if other != query
        for part in finish_query(storage, other, rename=True, clean=False, locked=True)
    ]


def roll_expired(storage: Storage, rules: RollingRules, query: str, now: float | None = None) -> int:
    """Publish the parts of ``query`` past their rollover or inactivity interval, while the query
    may be running (tasks may be appending: pieces are copied, never moved). Returns how many."""
    now = time.time() if now is None else now
    with driver_lock(storage.base):
        log = StateLog(storage, query)
        state = log.latest()
        publish(storage, state.pending, rename=False)
        expired = {s: p for s, p in state.parts.items() if rules.expired(p.opened, p.written, now)}
        if not expired:
            return 0
        parts = {s: p for s, p in state.parts.items() if s not in expired}
        new = SinkState(query, state.version + 1, state.batch, parts, tuple(expired.values()), state.garbage)
        log.write(new.with_garbage(new.pending))
        publish(storage, new.pending, rename=False)
        return len(expired)


def finish_query(storage: Storage, query: str, rename: bool, clean: bool, locked: bool = False) -> list[Part]:
    """Publish every open part of ``query`` and return them. ``rename``: piece files may be moved
    (no task appends to them any more; else they are copied); ``clean``: delete every leftover hidden
    file in the parts' directories now (only when no task of any query writes to the base path);
    otherwise the next batch commit deletes the published pieces."""
    if not locked:
        with driver_lock(storage.base):
            return finish_query(storage, query, rename, clean, locked=True)
    log = StateLog(storage, query)
    state = log.latest()
    publish(storage, state.pending, rename)
    if not state.parts:
        if clean:
            for path in state.garbage:
                storage.delete(path)
        return []
    new = SinkState(query, state.version + 1, state.batch, {}, tuple(state.parts.values()), state.garbage)
    log.write(new if clean else new.with_garbage(new.pending))
    publish(storage, new.pending, rename)
    if clean:
        sweep(storage, {posixpath.dirname(p.final) for p in new.pending}, keep=set())
        for path in new.garbage:
            storage.delete(path)
    return list(new.pending)
