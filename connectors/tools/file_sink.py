"""Publishing data when no micro-batch comes: a query listener and the finish command.

Spark runs no micro-batch without new data, so a part left open by the default rolling policy
would stay invisible while a stream is idle, and for good after an ``AvailableNow`` run or a
stop. Two remedies, both safe while tasks write (they copy instead of moving files a task may
append to, and take the driver-side state lock the batch commit takes):

- :class:`FileSinkListener`, attached with ``spark.streams.addListener``: on each query-idle
  event (Spark posts one every ``spark.sql.streaming.noDataProgressEventInterval``, 10 s by
  default) at most every ``bucketCheckInterval`` it publishes parts past their rollover or
  inactivity interval; on query termination it publishes every open part of the query;
- :func:`finish` / ``connectors finish <base path>``: publishes every open part
  under a base path whose queries are stopped (and deletes leftover hidden files).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping

from pyspark.sql.streaming import StreamingQueryListener

from connectors.core.options import Options, render
from connectors.files.sink.exactly_once import finish_query, roll_expired
from connectors.files.sink.options import FileSinkOptions
from connectors.files.sink.state import Part, StateLog
from connectors.files.sink.storage import Storage

log = logging.getLogger(__name__)

__all__ = ["FileSinkListener", "QueryStatus", "finish", "status"]


class FileSinkListener(StreamingQueryListener):
    """Publishes idle and leftover parts of the file sink at ``path`` (one listener per base path).

    Takes the sink's own options (or a FileSinkOptions); it acts only on queries that wrote there.
    """

    def __init__(self, path: str | None = None, options: Options | Mapping[str, object] | None = None, **kwargs):
        base = options.to_options() if isinstance(options, Options) else dict(options or {})
        merged = {**base, **({"path": path} if path is not None else {}), **kwargs}
        self.config = FileSinkOptions.from_options({k: v if isinstance(v, str) else render(v) for k, v in merged.items()})
        self.storage = Storage(self.config.path, self.config.storage_options)
        self._checked: dict[str, float] = {}

    def _writes_here(self, query: str) -> bool:
        return query in StateLog.queries(self.storage)

    def onQueryStarted(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        pass  # every batch commit checks time-based rolling itself

    def onQueryIdle(self, event) -> None:
        query, now = str(event.id), time.time()
        if now - self._checked.get(query, 0.0) < self.config.bucket_check_interval.total_seconds():
            return
        self._checked[query] = now
        try:
            if self._writes_here(query):
                rolled = roll_expired(self.storage, self.config.rules, query, now)
                if rolled:
                    log.info("file sink %s: published %d idle part(s) of query %s", self.config.path, rolled, query)
        except Exception:  # a listener must not take the listener bus down
            log.exception("file sink %s: rolling idle parts of query %s failed", self.config.path, query)

    def onQueryTerminated(self, event) -> None:
        query = str(event.id)
        self._checked.pop(query, None)
        try:
            if self._writes_here(query):
                # A task of the stopped query may still be winding down: copy, and leave cleanup
                # to the next commit or to finish().
                finish_query(self.storage, query, rename=False, clean=False)
        except Exception:
            log.exception("file sink %s: publishing the parts of query %s failed", self.config.path, query)


def finish(path: str, storage_options: dict | None = None) -> int:
    """Publish every open part under ``path`` and delete leftover hidden files; returns how many
    parts were published. Only for base paths no running query writes to."""
    storage = Storage(path, storage_options)
    return sum(len(finish_query(storage, query, rename=True, clean=True)) for query in StateLog.queries(storage))


@dataclasses.dataclass(frozen=True)
class QueryStatus:
    """What one query's sink state says: its last committed batch and its unpublished parts."""

    query: str
    batch: int
    in_progress: tuple[Part, ...]  # open parts: committed bytes, hidden, still being appended to
    pending: tuple[Part, ...]  # closed parts the last commit publishes (done on the next reader)


def status(path: str, storage_options: dict | None = None) -> tuple[list[QueryStatus], int]:
    """The state of every query that wrote under ``path``, and the number of finished part files."""
    storage = Storage(path, storage_options)
    queries = []
    for query in StateLog.queries(storage):
        state = StateLog(storage, query).latest()
        queries.append(QueryStatus(query, state.batch, tuple(state.parts.values()), state.pending))
    finished = [name for name in storage.fs.find(storage.abs("")) if not _hidden(name, storage.abs(""))]
    return queries, len(finished)


def _hidden(name: str, root: str) -> bool:
    return any(part.startswith((".", "_")) for part in name[len(root):].split("/") if part)
