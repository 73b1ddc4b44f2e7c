"""Retries with exponential back-off, for transient errors only.

Config errors (bad options, missing tables, authentication) must fail at once; callers pass
``retry_on`` to say which exceptions are transient for their client.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)


def retry(
    call: Callable[[], T],
    *,
    attempts: int,
    retry_on: tuple[type[BaseException], ...] | Callable[[BaseException], bool],
    backoff: float = 1.0,
    max_backoff: float = 30.0,
    what: str = "operation",
    before_retry: Callable[[BaseException], None] | None = None,
) -> T:
    """Run ``call``; on a transient error wait ``backoff * 2**n`` s (capped) and try again.

    ``attempts`` counts the first try; ``before_retry`` runs before each new try (e.g. reconnect).
    The last error is raised unchanged.
    """
    if isinstance(retry_on, tuple):
        classes = retry_on
        is_transient: Callable[[BaseException], bool] = lambda exc: isinstance(exc, classes)
    else:
        is_transient = retry_on
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except Exception as exc:
            if attempt >= attempts or not is_transient(exc):
                raise
            delay = min(max_backoff, backoff * 2 ** (attempt - 1))
            log.warning("%s failed (attempt %d of %d): %s; retrying in %.1fs", what, attempt, attempts, exc, delay)
            time.sleep(delay)
            if before_retry is not None:
                before_retry(exc)
    raise AssertionError("unreachable")
