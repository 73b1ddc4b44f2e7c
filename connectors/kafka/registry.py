"""The Schema Registry for both sides of the Kafka connector: options, client, the wire format.

``valueFormat`` / ``keyFormat`` ``avro-confluent`` means the Confluent wire format: byte 0 is 0,
bytes 1-4 the schema id (big-endian), then the Avro binary body. ``schema.registry.url`` and the
other ``schema.registry.*`` settings go to confluent-kafka's ``SchemaRegistryClient`` with the
prefix removed (basic auth, bearer auth, TLS files, timeouts). Clients and the schemas fetched by
id are kept per Python process: a worker fetches each schema id once.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping

from connectors.core.options import OptionError, choice, option

RAW, AVRO_CONFLUENT = "raw", "avro-confluent"
PREFIX = "schema.registry."
WIRE_HEADER = 5  # magic byte 0, then the schema id as a big-endian int32


def parse_version(text: str) -> int | str:
    if text.strip().lower() == "latest":
        return "latest"
    try:
        version = int(text)
    except ValueError:
        raise ValueError("expected latest or a version number") from None
    if version < 1:
        raise ValueError("versions start at 1")
    return version


def parse_avro_schema(text: str) -> str:
    from connectors.core import avro  # noqa: PLC0415 - see connectors.kafka.source.reader._decoder

    avro.parse(text)  # AvroError is a ValueError: the option and value are named by the caller
    return text


_format = choice(RAW, AVRO_CONFLUENT)


@dataclasses.dataclass(frozen=True)
class RegistryOptions:
    """The format options both sides share; mixed into their options dataclasses."""

    value_format: str = option("valueFormat", _format, default=RAW,
                               doc="raw (bytes) or avro-confluent (Avro with a Schema Registry)")
    key_format: str = option("keyFormat", _format, default=RAW, doc="raw (bytes) or avro-confluent")
    schema_registry_url: str | None = option(
        "schema.registry.url", default=None, doc="the registry's URL (Confluent API); needed by avro-confluent")
    schema_registry_user_info: str | None = option(
        "schema.registry.basic.auth.user.info", default=None, secret=True, doc="basic auth, user:password")
    schema_registry_bearer_token: str | None = option(
        "schema.registry.bearer.auth.token", default=None, secret=True, doc="a static bearer token")
    value_subject: str | None = option("valueSubject", default=None,
                                       doc="the value's subject; default <topic>-value (TopicNameStrategy)")
    key_subject: str | None = option("keySubject", default=None, doc="the key's subject; default <topic>-key")
    value_schema_version: int | str | None = option(
        "valueSchemaVersion", parse_version, default=None, doc="latest or a version number of the subject")
    key_schema_version: int | str | None = option("keySchemaVersion", parse_version, default=None)
    value_schema: str | None = option("valueSchema", parse_avro_schema, default=None,
                                      doc="an Avro schema (JSON) to use instead of the subject's")
    key_schema: str | None = option("keySchema", parse_avro_schema, default=None)

    def avro_columns(self) -> tuple[str, ...]:
        """The columns in the avro-confluent format: "key", "value" or both."""
        return tuple(c for c, f in (("key", self.key_format), ("value", self.value_format)) if f == AVRO_CONFLUENT)

    def validate_formats(self) -> None:
        if self.avro_columns() and not self.schema_registry_url:
            column = self.avro_columns()[0]
            raise OptionError(self.source_name, "schema.registry.url", None,  # type: ignore[attr-defined]
                              f"required with {column}Format {AVRO_CONFLUENT}")

    def column_option(self, column: str, name: str):
        """``subject``, ``schema_version`` or ``schema`` of the key or the value column."""
        return getattr(self, f"{column}_{name}")

    def registry_settings(self) -> dict[str, str]:
        """``SchemaRegistryClient`` settings: ``schema.registry.*`` with the prefix removed."""
        settings = {key[len(PREFIX):]: value for key, value in getattr(self, "extra", {}).items()
                    if key.lower().startswith(PREFIX)}
        settings["url"] = self.schema_registry_url or ""
        if self.schema_registry_user_info:
            settings["basic.auth.user.info"] = self.schema_registry_user_info
            settings.setdefault("basic.auth.credentials.source", "USER_INFO")
        if self.schema_registry_bearer_token:
            settings["bearer.auth.token"] = self.schema_registry_bearer_token
            settings.setdefault("bearer.auth.credentials.source", "STATIC_TOKEN")
        return settings


class RegistryError(RuntimeError):
    """The registry refused or failed a request; the message never holds a credential."""


_lock = threading.Lock()
_clients: dict[tuple, object] = {}
_schemas: dict[tuple, str] = {}


def client(settings: Mapping[str, str]):
    """This process's ``SchemaRegistryClient`` for these settings."""
    from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: PLC0415 - only when used

    key = tuple(sorted(settings.items()))
    with _lock:
        if key not in _clients:
            try:
                _clients[key] = SchemaRegistryClient(dict(settings))
            except (ValueError, TypeError) as exc:
                raise RegistryError(f"invalid schema.registry.* settings: {exc}") from None
        return _clients[key]


def describe(exc: Exception) -> str:
    """A registry error's own message (status and text), without the request's credentials."""
    status = getattr(exc, "http_status_code", None)
    message = getattr(exc, "error_message", None) or str(exc)
    return f"HTTP {status}: {message}" if status else message


def schema_by_id(settings: Mapping[str, str], schema_id: int) -> str:
    """The Avro schema (JSON) registered under ``schema_id``, fetched once per process."""
    key = (tuple(sorted(settings.items())), schema_id)
    if key not in _schemas:
        try:
            registered = client(settings).get_schema(schema_id)
        except Exception as exc:  # noqa: BLE001 - SchemaRegistryError, HTTP and connection errors alike
            raise RegistryError(f"schema id {schema_id}: {describe(exc)}") from None
        if registered.schema_type not in (None, "AVRO"):
            raise RegistryError(f"schema id {schema_id} is a {registered.schema_type} schema, not Avro")
        _schemas[key] = registered.schema_str
    return _schemas[key]


def subject_version(settings: Mapping[str, str], subject: str, version: int | str | None) -> tuple[int, str]:
    """``(id, schema JSON)`` of a subject's version (default latest)."""
    registry = client(settings)
    try:
        if version in (None, "latest"):
            registered = registry.get_latest_version(subject)
        else:
            registered = registry.get_version(subject, version)
    except Exception as exc:  # noqa: BLE001
        raise RegistryError(f"subject {subject!r} version {version or 'latest'}: {describe(exc)}") from None
    if registered.schema.references:
        raise RegistryError(f"subject {subject!r}: schemas with references are not supported")
    return registered.schema_id, registered.schema.schema_str


def register(settings: Mapping[str, str], subject: str, schema_json: str, auto_register: bool) -> int:
    """The id of ``schema_json`` under ``subject``: registered (the registry checks compatibility)
    or, without auto-registration, looked up."""
    from confluent_kafka.schema_registry import Schema  # noqa: PLC0415

    registry = client(settings)
    schema = Schema(schema_json, "AVRO")
    try:
        if auto_register:
            return registry.register_schema(subject, schema)
        return registry.lookup_schema(subject, schema).schema_id
    except Exception as exc:  # noqa: BLE001
        what = "registering the schema" if auto_register else "looking the schema up (autoRegisterSchemas=false)"
        raise RegistryError(f"subject {subject!r}: {what} failed: {describe(exc)}") from None

