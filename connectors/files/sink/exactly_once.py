"""The driver side of the file sink: commit a micro-batch, roll idle parts, finish a stopped query.

Every operation follows the same protocol, under :func:`driver_lock`:

1. read the newest state version and publish its ``pending`` parts again (idempotent: this
   completes a publication a crash interrupted);
2. compute the next version (parts that roll move from ``parts`` to ``pending``, those of one
   bucket compacted into one part: see :func:`compact`) and write it: this is the commit point,
   and the intent of every concatenation;
3. publish the new ``pending`` parts (a compacted part is concatenated into a hidden file renamed
   into place), then delete hidden files nobody needs any more: the sources of a concatenation
   only after its target is published. Where the pieces stay (the listener and ``finish`` copy
   them), one more version without ``pending`` records that publishing is done: a published file
   a consumer moved or deleted is then never published again.

A batch is committed once: a batch id not above the state's ``batch`` was committed before a
driver crash and its replay is a no-op (its tasks skip writing, see ``writer.py``).
"""

from __future__ import annotations

import dataclasses
import posixpath
import time
import uuid
from collections.abc import Iterable

from connectors.files.sink.part_files import in_progress_name, publish, sweep
from connectors.files.sink.rolling import RollingRules
from connectors.files.sink.state import (
    Part,
    Piece,
    SinkState,
    StateLog,
    compact,
    driver_lock,
)
from connectors.files.sink.storage import Storage
from connectors.files.sink.task_writer import FileSinkMessage, SinkPlan, slot_bucket
from connectors.testing.faults import fault_point


def publish_all(storage: Storage, parts: Iterable[Part], rename: bool) -> None:
    for part in parts:
        publish(storage, part, rename)


def _publish_pending(log: StateLog, state: SinkState, rename: bool) -> SinkState:
    """Publish ``state.pending`` and return the newest version; that is one more, without
    ``pending``, if there were any (their pieces may stay, and every reader would publish them
    again)."""
    publish_all(log.storage, state.pending, rename)
    if not state.pending:
        return state
    done = dataclasses.replace(state, version=state.version + 1, pending=())
    log.write(done)
    return done


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
        publish_all(storage, state.pending, rename=True)
        run = written[0].run
        if batch_id == state.batch and run is not None and run == state.run:
            # A restart has a new run id: this is a second write of the batch in the run that
            # committed it, which skipping as a replay would silently lose.
            raise RuntimeError(
                f"connectors.files: micro-batch {batch_id} was already written to {storage.base} in this "
                "run; write to one base path once per micro-batch (union the DataFrames first)"
            )
        if batch_id <= state.batch:  # a replay: finish what the crashed commit left, no new state
            sweep(storage, _directories(state.pending), keep=state.referenced())
            return
        adopted = _adopt_other_queries(storage, query) if state.version == 0 else []
        parts, pending = _merge(plan, state, written)
        now = time.time()
        for slot, part in list(parts.items()):
            if plan.rules.roll_before_write(part.size, part.opened, part.written, now):
                pending.append(parts.pop(slot))
        pending = compact(pending, plan.compaction)
        new = SinkState(query, state.version + 1, batch_id, parts, tuple(pending), compaction=plan.compaction, run=run)
        log.write(new)
        fault_point("files.commit.state_written", storage.base)
        publish_all(storage, new.pending, rename=True)
        sweep(storage, _directories([*state.pending, *new.pending, *adopted]), keep=new.referenced())
        for path in set(state.garbage) - new.referenced():
            storage.delete(path)


def _directories(parts: Iterable[Part]) -> set[str]:
    return {posixpath.dirname(part.final) for part in parts}


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
                    part = _new_part(plan, slot, task_part.as_part())
                else:
                    part = task_part.as_part()
                if task_part.closed:
                    parts.pop(slot, None)
                    pending.append(part)
                    current = None
                else:
                    parts[slot] = current = part
    return parts, pending


def _new_part(plan: SinkPlan, slot: str, rows: Part) -> Part:
    """``rows`` (bytes written as the continuation of a part published meanwhile) as a part of
    their own, under a new name, starting with a header piece when the format has one."""
    final = plan.new_final(slot_bucket(slot), uuid.uuid4().hex, 0)
    pieces = rows.pieces
    if plan.header:
        header = Piece(in_progress_name(final), 0, len(plan.header))
        plan.storage.write_atomically(header.path, plan.header)
        pieces = (header, *pieces)
    return Part(final, pieces, rows.written, rows.written, len(plan.header))


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
        state = _publish_pending(log, log.latest(), rename=False)
        expired = {s: p for s, p in state.parts.items() if rules.expired(p.opened, p.written, now)}
        if not expired:
            return 0
        parts = {s: p for s, p in state.parts.items() if s not in expired}
        pending = tuple(compact(expired.values(), state.compaction))
        new = dataclasses.replace(state, version=state.version + 1, parts=parts, pending=pending)
        new = new.with_garbage(new.pending)
        log.write(new)
        _publish_pending(log, new, rename=False)
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
    state = _publish_pending(log, log.latest(), rename)
    if not state.parts:
        if clean:
            for path in state.garbage:
                storage.delete(path)
        return []
    pending = tuple(compact(state.parts.values(), state.compaction))
    new = dataclasses.replace(state, version=state.version + 1, parts={}, pending=pending)
    new = new if clean else new.with_garbage(new.pending)
    log.write(new)
    _publish_pending(log, new, rename)
    if clean:
        sweep(storage, _directories(new.pending), keep=set())
        for path in new.garbage:
            storage.delete(path)
    return list(new.pending)
