"""Part files on a filesystem: hidden in-progress files, and publishing a part under its final name.

Names follow Flink: a part's final name is ``<partPrefix>-<uid>-<counter><partSuffix>`` in its
bucket directory; bytes for it are written to hidden files ``.<final name>.inprogress.<uuid>``
next to it. Readers that skip hidden files (Spark, pyarrow, pandas, Hadoop) never see them.

Publishing (:func:`publish`) renames the only piece, or concatenates the pieces' committed byte
ranges; both are atomic through :mod:`connectors.files.sink.storage` and idempotent: once the
final file exists with the part's size, publishing again does nothing, and so does a final file
gone with a piece gone (published, then moved or deleted downstream).
"""

from __future__ import annotations

import logging
import posixpath
import uuid
from collections.abc import Iterable

from connectors.files.sink.state import Part
from connectors.files.sink.storage import Storage
from connectors.testing.faults import fault_point

log = logging.getLogger(__name__)


def final_name(bucket: str, prefix: str, uid: str, counter: int, suffix: str) -> str:
    name = f"{prefix}-{uid}-{counter}{suffix}"
    return f"{bucket}/{name}" if bucket else name


def in_progress_name(final: str) -> str:
    directory, name = posixpath.split(final)
    hidden = f".{name}.inprogress.{uuid.uuid4().hex[:12]}"
    return posixpath.join(directory, hidden) if directory else hidden


def is_sink_temp(name: str) -> bool:
    """A hidden file of this sink (in-progress piece or half-published concatenation)."""
    return name.startswith(".") and (".inprogress." in name or ".finishing." in name)


def publish(storage: Storage, part: Part, rename: bool) -> None:
    """Publish ``part`` under its final name; idempotent.

    ``rename`` allows moving the only piece file itself, which is safe only when no task can be
    appending to it (the batch commit, or a stopped query); otherwise its range is copied.
    """
    pieces = [piece for piece in part.pieces if piece.size > 0]
    if not pieces:
        return
    # The size, not mere existence: a file of another size is a publication gone wrong (a short
    # concatenation completed by an earlier version), written again from the pieces.
    size = storage.size_if_exists(part.final)
    if size == part.size:
        return
    if size is not None and not all(storage.exists(piece.path) for piece in pieces):
        raise OSError(f"{part.final} holds {size} bytes, not the {part.size} committed, and its pieces are gone")
    only = pieces[0]
    movable = rename or not storage.local  # objects are immutable: nobody appends to them
    try:
        whole = movable and len(pieces) == 1 and only.start == 0
        if not (whole and storage.move_whole(only.path, part.final, only.end)):
            storage.concat([(p.path, p.start, p.size) for p in pieces], part.final)
    except FileNotFoundError:
        # Pieces are deleted only after their part is published (moved into place, or swept once
        # the whole version is), so a piece gone with no final file means a consumer moved or
        # deleted the published file: publishing again would fail on every restart.
        if size is not None or all(storage.exists(piece.path) for piece in pieces):
            raise
        log.info("%s was published and has since been moved or deleted: not published again", part.final)
        return
    fault_point("files.publish.part", storage.base)


def sweep(storage: Storage, directories: Iterable[str], keep: set[str]) -> None:
    """Delete this sink's hidden files in ``directories`` that no open part needs: leftovers of
    failed attempts, of runs killed before their commit, and pieces already published."""
    for directory in set(directories):
        for rel in storage.list_files(directory):
            if is_sink_temp(posixpath.basename(rel)) and rel not in keep:
                storage.delete(rel)
