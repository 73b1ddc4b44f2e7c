"""Options of ``connectors.jdbc`` (Flink's JdbcSink): connection, execution, and what to write.

Flink splits a JDBC sink's settings into ``JdbcConnectionOptions`` and ``JdbcExecutionOptions``;
the same two typed classes exist here with Flink's field names, and :class:`JdbcSinkOptions`
combines them with the target (``dbtable`` + ``mode``, or ``sql``) and the delivery guarantee.
Every class renders to the same string options (``to_options()``) the format takes.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from connectors.core.guarantees import DeliveryGuarantee, parse_guarantee
from connectors.core.options import (
    OptionError,
    Options,
    choice,
    is_secret_name,
    non_negative,
    option,
    parse_bool,
    parse_duration,
    parse_int,
    parse_list,
    parse_size,
    positive,
    scrub,
)
from connectors.jdbc import FORMAT
from connectors.jdbc.table import parse_table_name

# libpq SSL parameters, accepted as options of the same name (or in the URL).
SSL_OPTIONS = ("sslmode", "sslrootcert", "sslcert", "sslkey", "sslcrl", "sslpassword")

# PgJDBC URL parameters -> libpq parameters.
_JDBC_PARAMS = {
    "user": "user", "password": "password", "sslmode": "sslmode", "sslrootcert": "sslrootcert",
    "sslcert": "sslcert", "sslkey": "sslkey", "sslpassword": "sslpassword",
    "applicationname": "application_name", "connecttimeout": "connect_timeout", "logintimeout": "connect_timeout",
    "options": "options", "targetservertype": "target_session_attrs",
}  # fmt: skip
# PgJDBC tuning parameters with no meaning for libpq: accepted and ignored.
_JDBC_IGNORED = {"rewritebatchedinserts", "preparethreshold", "defaultrowfetchsize", "loggerlevel", "stringtype",
                 "binarytransfer"}  # fmt: skip


class JdbcUrl(str):
    """A connection URL whose ``repr`` hides the password, so errors and logs never show it."""

    def __repr__(self) -> str:
        return repr(redact_url(self))


def redact_url(url: str) -> str:
    """``url`` with every password it may hold (:func:`url_passwords`) replaced by ``***``."""
    url = str(url)  # a plain str: the repr of a JdbcUrl calls this
    for password in sorted(url_passwords(url), key=len, reverse=True):
        url = url.replace(password, "***")
    return url


def url_passwords(url: str) -> set[str]:
    """Every password ``url`` may hold, as written and percent-decoded: the user info's (up to
    the last '@' of the host part and, should the password hold a '/', of the whole URL) and the
    ``password``/``sslpassword`` parameters."""
    rest = url.partition("://")[2]
    found = {info.partition(":")[2] for info in (rest.partition("/")[0].rpartition("@")[0], rest.rpartition("@")[0])}
    found.update(re.findall(r"(?:^|[?&])(?:ssl)?password=([^&#]*)", url.partition("?")[2], re.IGNORECASE))
    return {text for password in found if password for text in (password, unquote(password))}


def parse_url(text: str) -> JdbcUrl:
    return JdbcUrl(text.strip())


def libpq_dsn(url: str) -> str:
    """The libpq URI for a ``jdbc:postgresql:`` or ``postgresql://`` URL (PgJDBC parameters renamed).

    Raises ValueError with a short reason for URLs of other databases or unknown PgJDBC parameters.
    """
    if url.startswith(("postgresql://", "postgres://")):
        return url
    if not url.startswith("jdbc:postgresql:"):
        raise ValueError("expected jdbc:postgresql://host:port/database or postgresql://...")
    rest = url.removeprefix("jdbc:postgresql:")
    if not rest.startswith("//"):  # jdbc:postgresql:database means localhost
        rest = "//localhost/" + rest
    scheme, netloc, path, query, _ = urlsplit("postgresql:" + rest)
    params = []
    for key, value in parse_qsl(query, keep_blank_values=True):
        lowered = key.lower()
        if lowered in _JDBC_PARAMS:
            params.append((_JDBC_PARAMS[lowered], value))
        elif lowered == "ssl":
            if value.lower() == "true" and not any(k.lower() == "sslmode" for k, _ in parse_qsl(query)):
                params.append(("sslmode", "require"))
        elif lowered == "currentschema":
            params.append(("options", f"-csearch_path={value}"))
        elif lowered == "tcpkeepalive":
            if value.lower() not in ("true", "false"):
                raise ValueError(f"URL parameter '{key}' must be true or false")
            params.append(("keepalives", "1" if value.lower() == "true" else "0"))
        elif lowered == "sockettimeout":
            # A read timeout, which libpq does not have: 0 (PgJDBC's default, none) asks for nothing.
            if value.strip() != "0":
                raise ValueError(
                    f"URL parameter '{key}' (a client read timeout) has no libpq equivalent: remove it; the "
                    "options 'queryTimeout' and 'lockTimeout' bound every statement and lock wait on the server, "
                    "and a postgresql:// URL takes libpq's keepalives_idle and tcp_user_timeout"
                )
        elif lowered not in _JDBC_IGNORED:
            raise ValueError(f"URL parameter '{key}' is not supported by this connector")
    return urlunsplit((scheme, netloc, path, urlencode(params), ""))


def _not_blank(value: str) -> None:
    if not value.strip():
        raise ValueError("must not be empty")


class IsolationLevel(enum.Enum):
    """Spark's ``isolationLevel`` values (the JDBC constants' names)."""

    NONE = "NONE"
    READ_UNCOMMITTED = "READ_UNCOMMITTED"
    READ_COMMITTED = "READ_COMMITTED"
    REPEATABLE_READ = "REPEATABLE_READ"
    SERIALIZABLE = "SERIALIZABLE"

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:  # errors show the value as it was written
        return repr(self.value)


def _parse_isolation(text: str) -> IsolationLevel:
    # Spark matches the names exactly; any case is taken here, as for every other choice.
    return IsolationLevel(choice(*(level.value for level in IsolationLevel))(text))


@dataclasses.dataclass(frozen=True, kw_only=True)
class JdbcConnectionOptions(Options):
    """Where to connect (Flink's ``JdbcConnectionOptions``).

    ``url`` is ``jdbc:postgresql://host:port/database?...`` (PgJDBC parameters such as ``sslmode``,
    ``ApplicationName``, ``currentSchema`` are translated) or a libpq URI ``postgresql://...``.
    """

    source_name = FORMAT
    passthrough_prefixes = ("ssl",)

    url: JdbcUrl = option("url", parse_url, doc="jdbc:postgresql://host:port/db or postgresql://...")
    username: str | None = option("user", default=None, doc="user name (overrides the URL's)")
    password: str | None = option("password", default=None, secret=True, doc="password (overrides the URL's)")
    driver_name: str | None = option("driver", default=None, doc="accepted for compatibility with Spark's jdbc format; ignored")
    connection_check_timeout_seconds: int = option(
        "connectionCheckTimeoutSeconds", parse_int, default=60, checks=[positive],
        doc="seconds to wait for a connection (libpq connect_timeout)",
    )
    lock_timeout: timedelta = option(
        "lockTimeout", parse_duration, default=timedelta(seconds=60), checks=[non_negative],
        doc="longest wait for a lock before the transaction is retried (lock_timeout; 0: none)",
    )
    query_timeout: int = option(
        "queryTimeout", parse_int, default=600, checks=[non_negative],
        doc="seconds a statement, or a transaction's wait for its next one, may take (0: no limit)",
    )
    isolation_level: IsolationLevel = option(
        "isolationLevel", _parse_isolation, default=IsolationLevel.READ_UNCOMMITTED,
        doc="isolation of every transaction (Spark's names and default; NONE: the server's default level)",
    )
    session_init_statement: str | None = option(
        "sessionInitStatement", default=None, checks=[_not_blank],
        doc="SQL run once on every new connection, before it writes",
    )
    extra: dict[str, str] = dataclasses.field(default_factory=dict, repr=False)  # ssl* pass-through

    def validate(self) -> None:
        # Checked here rather than by the parser, whose errors would echo a password in the URL.
        try:
            libpq_dsn(self.url)
        except ValueError as exc:
            raise self.error("url", str(exc)) from None
        for key in self.extra:
            if key.lower() not in SSL_OPTIONS:
                raise self.error(key, f"unknown option; SSL options are {', '.join(SSL_OPTIONS)}")

    def connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``psycopg2.connect``: the DSN, then explicit options on top."""
        kwargs: dict[str, Any] = {"dsn": libpq_dsn(self.url)}
        in_url = {key for key, _ in parse_qsl(urlsplit(kwargs["dsn"]).query)}
        default_timeout = type(self).__dataclass_fields__["connection_check_timeout_seconds"].default
        if "connect_timeout" not in in_url or self.connection_check_timeout_seconds != default_timeout:
            kwargs["connect_timeout"] = self.connection_check_timeout_seconds  # else the URL's connectTimeout
        if "application_name" not in kwargs["dsn"]:
            kwargs["application_name"] = FORMAT
        if self.username is not None:
            kwargs["user"] = self.username
        if self.password is not None:
            kwargs["password"] = self.password
        kwargs.update({key.lower(): value for key, value in self.extra.items()})
        return kwargs

    def session_settings(self) -> dict[str, str]:
        """PostgreSQL settings of every session (``SET``): UTC, so timestamps land the same through
        COPY and INSERT, the timeouts, so no statement waits forever on a dead peer's lock, and the
        transactions' isolation level."""
        lock_ms, query_ms = round(self.lock_timeout.total_seconds() * 1000), self.query_timeout * 1000
        settings = {"TimeZone": "UTC", "lock_timeout": f"{lock_ms}ms", "statement_timeout": f"{query_ms}ms",
                    "idle_in_transaction_session_timeout": f"{query_ms}ms"}  # fmt: skip
        if self.isolation_level is not IsolationLevel.NONE:
            # The session's default, so every transaction on it (ours, psycopg2's implicit BEGIN) gets it.
            settings["default_transaction_isolation"] = self.isolation_level.value.replace("_", " ").lower()
        return settings

    def scrubbed(self, exc: Exception) -> Exception:
        """``exc``, a client error, as the same type without these settings' passwords (libpq quotes
        parts of a URL it cannot parse)."""
        secrets = [*url_passwords(self.url), self.password or ""]
        secrets += [value for key, value in self.extra.items() if is_secret_name(key)]  # sslpassword
        return type(exc)(scrub(str(exc), secrets))


@dataclasses.dataclass(frozen=True, kw_only=True)
class JdbcExecutionOptions(Options):
    """How to send rows (Flink's ``JdbcExecutionOptions``, with Flink's defaults)."""

    source_name = FORMAT

    batch_size: int = option("batchSize", parse_int, default=5000, checks=[positive], doc="rows per round trip")
    batch_interval_ms: int = option(
        "batchIntervalMs", parse_int, default=0, checks=[non_negative],
        doc="also send buffered rows when this many ms passed since the last send (0: only by size)",
    )
    max_retries: int = option(
        "maxRetries", parse_int, default=3, checks=[non_negative],
        doc="retries of a failed transaction after a transient error (reconnecting, with back-off)",
    )
    max_buffered_bytes: int = option(
        "maxBufferedBytes", parse_size, default=64 << 20, checks=[positive],
        doc="rows a task keeps for a retry; a partition's transaction commits when they reach this size",
    )


class WriteMode(enum.Enum):
    APPEND = "append"
    UPSERT = "upsert"

    def __str__(self) -> str:
        return self.value


def _parse_mode(text: str) -> WriteMode:
    return WriteMode(choice("append", "upsert")(text))


def missing_sink_id() -> OptionError:
    """Exactly-once without a query id to key progress rows by, and no sinkId."""
    return OptionError(
        FORMAT, "sinkId", None,
        "required for exactly-once where the streaming query id is unavailable (Spark Connect, or the sink "
        "called outside a streaming query): set a sinkId that stays the same when the query restarts, or "
        "deliveryGuarantee=at-least-once",
    )  # fmt: skip


_COLUMN_TYPE = re.compile(r'\s*("(?:[^"]|"")+"|[A-Za-z_][A-Za-z0-9_$]*)\s+(\S.*?)\s*$', re.DOTALL)


def parse_column_types(text: str) -> tuple[tuple[str, str], ...]:
    """``name type, "Odd Name" type(1,2), ...`` -> (column, type) pairs; commas inside parentheses
    belong to the type. Unquoted names fold to lower case, as in PostgreSQL."""
    entries, depth, start = [], 0, 0
    for position, char in enumerate(text + ","):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            entries.append(text[start:position])
            start = position + 1
    pairs = []
    for entry in entries if text.strip() else []:
        match = _COLUMN_TYPE.fullmatch(entry)
        if match is None or ";" in entry:
            raise ValueError(f"expected 'column type, ...', got {entry.strip()!r}")
        name, kind = match.groups()
        pairs.append((name[1:-1].replace('""', '"') if name.startswith('"') else name.lower(), kind))
    return tuple(pairs)


@dataclasses.dataclass(frozen=True, kw_only=True)
class JdbcSinkOptions(JdbcExecutionOptions, JdbcConnectionOptions):
    """Every option of ``connectors.jdbc``: connection, execution, target and guarantee."""

    dbtable: str | None = option("dbtable", default=None, doc="target table, SQL syntax: schema.table, \"Odd Name\"")
    mode: WriteMode = option("mode", _parse_mode, default=WriteMode.APPEND, doc="append (COPY) or upsert")
    key_columns: tuple[str, ...] | None = option(
        "keyColumns", parse_list, default=None, doc="upsert conflict columns (default: the table's primary key)",
    )
    sql: str | None = option("sql", default=None, doc="custom DML statement with :column parameters (instead of dbtable)")
    create_table_column_types: str | None = option(
        "createTableColumnTypes", default=None, checks=[parse_column_types],
        doc="PostgreSQL types for columns of a table the sink creates, e.g. name varchar(64), id uuid",
    )
    create_table_options: str = option(
        "createTableOptions", default="", doc="appended to the CREATE TABLE of a table the sink creates",
    )
    truncate: bool = option(
        "truncate", parse_bool, default=False,
        doc="save mode overwrite: keep the table and replace its rows (else the table is recreated)",
    )
    cascade_truncate: bool = option(
        "cascadeTruncate", parse_bool, default=False,
        doc="with truncate=true: TRUNCATE ... CASCADE, emptying the tables whose foreign keys reference it",
    )
    num_partitions: int | None = option(
        "numPartitions", parse_int, default=None, checks=[positive],
        doc="refused: a Python data source cannot coalesce its input; call df.coalesce(N) instead",
    )
    delivery_guarantee: DeliveryGuarantee = option(
        "deliveryGuarantee", parse_guarantee, default=DeliveryGuarantee.EXACTLY_ONCE,
        doc="exactly-once, at-least-once or none",
    )
    sink_id: str | None = option(
        "sinkId", default=None, checks=[_not_blank],
        doc="names this sink in the progress table, with the target (default: the query id)",
    )
    progress_table: str = option(
        "progressTable", default="connectors_jdbc_progress", doc="exactly-once bookkeeping table (created if missing)",
    )

    def validate(self) -> None:
        super().validate()
        if (self.dbtable is None) == (self.sql is None):
            raise self.error("dbtable", "give exactly one of 'dbtable' and 'sql'")
        if self.sql is not None and self.mode is not WriteMode.APPEND:
            raise self.error("mode", "a custom 'sql' statement takes no mode")
        if self.key_columns is not None and self.mode is not WriteMode.UPSERT:
            raise self.error("keyColumns", "only used with mode 'upsert'")
        if self.sql is not None and (self.create_table_column_types or self.create_table_options):
            option = "createTableColumnTypes" if self.create_table_column_types else "createTableOptions"
            raise self.error(option, "only used with dbtable: a custom 'sql' statement creates no table")
        if self.cascade_truncate and not self.truncate:
            raise self.error("cascadeTruncate", "only used with truncate=true (save mode overwrite)")
        if self.num_partitions is not None:
            # Spark's writer coalesces to N tasks; a data source's writer only sees its input as partitioned.
            raise self.error("numPartitions", "a Python data source cannot coalesce its input: call "
                             f"df.coalesce({self.num_partitions}) before writing, which bounds the concurrent "
                             "connections as Spark's option does (one per writing task)")
        if self.isolation_level is IsolationLevel.NONE and self.delivery_guarantee is not DeliveryGuarantee.NONE:
            # Spark's NONE (autocommit) would commit rows apart from their progress row, and in pieces.
            raise self.error("isolationLevel", f"NONE means no transactions, which deliveryGuarantee "
                             f"'{self.delivery_guarantee}' needs: each commits its rows all or nothing (exactly-once "
                             "together with its progress row); use deliveryGuarantee=none, where each batchSize "
                             "chunk commits on its own, or a transaction isolation level")

    def table_parts(self) -> tuple[str, ...]:
        """``dbtable`` as (schema, table) or (table,); an error naming the option if it is no table name."""
        try:
            return parse_table_name(self.dbtable or "")
        except ValueError as exc:
            raise self.error("dbtable", str(exc)) from None

    @property
    def column_types(self) -> dict[str, str]:
        """createTableColumnTypes: column -> PostgreSQL type."""
        return dict(parse_column_types(self.create_table_column_types or ""))

    @property
    def connection(self) -> JdbcConnectionOptions:
        return JdbcConnectionOptions(**{f.name: getattr(self, f.name) for f in dataclasses.fields(JdbcConnectionOptions)})

    @property
    def execution(self) -> JdbcExecutionOptions:
        return JdbcExecutionOptions(**{f.name: getattr(self, f.name) for f in dataclasses.fields(JdbcExecutionOptions)})
