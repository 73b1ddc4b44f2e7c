"""The short version of ``make chaos``: every exactly-once path and every source in one
application, SIGKILLed at random moments and restarted, then every record counted."""

from __future__ import annotations

import pytest
from chaos import run_chaos, table


@pytest.mark.crash
def test_random_kills_of_every_path_and_source_lose_and_duplicate_nothing(kafka_bootstrap, postgres_dsn, tmp_path):
    rows = run_chaos(tmp_path, kafka_bootstrap, postgres_dsn, kills=3, batches=6, seed=7, window=(5.0, 30.0))
    print(table(rows))
    wrong = [row for row in rows if (row.counts.lost, row.counts.duplicated) != (0, 0) or row.kills == 0]
    assert not wrong, table(rows)
