"""spark-avro's read options (``AvroOptions``) that both the file source (fileFormat avro) and the
Kafka source (avro-confluent, as ``from_avro`` takes them) accept, under Spark's names."""

from __future__ import annotations

import dataclasses
from typing import Any

from pyspark.sql.types import StructType

from connectors.core.options import option, parse_bool, parse_int, supported_choice

RECURSIVE_FIELD_MAX_DEPTH_LIMIT = 15  # spark-avro's


def avro_record_schema(text: str) -> str:
    """avroSchema (of the file source and sink): an Avro record whose fields are the columns."""
    from connectors.core import avro  # noqa: PLC0415 - fastavro: only where Avro is used

    try:
        columns = avro.read_type(avro.parse(text))  # a type Spark cannot hold fails at query start
    except TypeError as exc:
        raise ValueError(str(exc)) from None
    if not isinstance(columns, StructType):
        raise ValueError("must be an Avro record (its fields are the columns), as in Spark")
    return text


def resolve_schema_url(options: Any) -> None:
    """avroSchemaUrl without avroSchema (of a source's or sink's options, being validated): the schema in
    that file, read once here on the driver, becomes the avroSchema option's value, as in Spark."""
    if options.avro_schema_url is None or options.avro_schema is not None:
        return
    from connectors.core.filesystem import filesystem  # noqa: PLC0415 - fsspec: only when a URL is given

    try:
        fs, path = filesystem(options.avro_schema_url, options.storage_options)
        with fs.open(path, "rb") as handle:
            text = avro_record_schema(handle.read().decode("utf-8"))
    except (OSError, ValueError) as exc:
        raise options.error("avroSchemaUrl", f"cannot read an Avro schema from it: {exc}") from None
    object.__setattr__(options, "avro_schema", text)  # frozen options: set before anyone reads it


# Values are read as written (proleptic Gregorian), what Spark 3+ writers mean: rebasing from the
# hybrid Julian calendar (LEGACY) and failing on dates before 1582-10-15 (EXCEPTION) are not done
_rebase_mode = supported_choice(
    ("EXCEPTION", "CORRECTED", "LEGACY"), "CORRECTED",
    "(read dates and timestamps as written, proleptic Gregorian) is supported; LEGACY and EXCEPTION, for files of "
    "Spark 2 and other Julian-calendar writers, are not implemented: read such data with Spark's avro format or "
    "from_avro")


def _recursive_depth(value: int) -> None:
    if value > RECURSIVE_FIELD_MAX_DEPTH_LIMIT:
        raise ValueError(f"Should not be greater than {RECURSIVE_FIELD_MAX_DEPTH_LIMIT} (as Spark)")
    if value > 0:
        raise ValueError("recursive Avro schemas are not supported: only -1 or 0 (Spark's default, which "
                         "refuses them) is")


@dataclasses.dataclass(frozen=True, kw_only=True)
class AvroReadOptions:
    """Mixed into a source's options dataclass."""

    enable_stable_identifiers_for_union_type: bool = option(
        "enableStableIdentifiersForUnionType", parse_bool, default=False,
        doc="avro: a union of several types is a struct of fields <prefix><type name> (member_int, member_MyRecord) "
            "instead of member0, member1, ...")
    stable_identifier_prefix_for_union_type: str = option(
        "stableIdentifierPrefixForUnionType", default="member_",
        doc="avro: the prefix of those fields (may be empty)")
    datetime_rebase_mode: str = option(
        "datetimeRebaseMode", _rebase_mode, default="CORRECTED",
        doc="avro: only CORRECTED (dates and timestamps as written), what Spark reads files of Spark 3+ as")
    recursive_field_max_depth: int = option(
        "recursiveFieldMaxDepth", parse_int, default=-1, checks=[_recursive_depth],
        doc="avro: only -1 or 0, Spark's default: a recursive schema is refused")

    @property
    def union_prefix(self) -> str | None:
        """The stable-identifier prefix of union members, None for member0, member1, ..."""
        return self.stable_identifier_prefix_for_union_type if self.enable_stable_identifiers_for_union_type else None
