"""Spark's text, csv and json read options: wholetext, samplingRatio, preferDate, the json allow*
options, enforceSchema, maxColumns, maxCharsPerColumn, and the ones refused (unescapedQuoteHandling,
charToEscapeQuoteEscaping, locale), against Spark's own readers."""

from __future__ import annotations

import bz2
import gzip
import itertools
import json

import pytest

from connectors.core.options import OptionError
from connectors.files.source.options import FileSourceOptions


def ours(spark, fmt: str, path, schema: str | None = None, **options):
    reader = spark.read.format("connectors.files").options(fileFormat=fmt, **options)
    return (reader.schema(schema) if schema else reader).load(str(path))


def rows(frame) -> list[str]:
    """As text, sorted: NaN equals itself there."""
    return sorted(str(row) for row in frame.selectExpr(*(f"string(`{c}`)" for c in frame.columns)).collect())


def test_spark_draws_of_its_sample_with_seed_1():
    """Dataset.sample(False, 0.1, 1) of 200 lines in one partition keeps these (Spark 4.3's answer)."""
    from connectors.files.source.sampling import XorShiftRandom  # here: the other tests run without it

    random = XorShiftRandom(1)
    kept = [i for i in range(200) if random.next_double() < 0.1]
    assert kept == [3, 18, 20, 24, 50, 60, 87, 99, 100, 122, 137, 145, 146, 156, 161, 169, 172, 178, 186, 190]


@pytest.mark.parametrize("options, message", [
    ({"fileFormat": "csv", "unescapedQuoteHandling": "RAISE_ERROR"}, "only STOP_AT_DELIMITER"),
    ({"fileFormat": "csv", "charToEscapeQuoteEscaping": "#"}, "only the escape character"),
    ({"fileFormat": "json", "locale": "fr-FR"}, "only en-US"),
    ({"fileFormat": "json", "multiLine": "true", "samplingRatio": "0.5"}, "not supported with multiLine"),
    ({"fileFormat": "csv", "wholetext": "true"}, "applies to text"),
    ({"fileFormat": "text", "samplingRatio": "0.5"}, "applies to csv, json"),
])
def test_options_that_cannot_be_honoured_are_refused(options, message):
    with pytest.raises(OptionError, match=message):
        FileSourceOptions.from_options(options)
    accepted = {"fileFormat": "csv", "unescapedQuoteHandling": "stop_at_delimiter", "charToEscapeQuoteEscaping": "\\",
                "locale": "en_US", "samplingRatio": "0.5"}
    assert FileSourceOptions.from_options(accepted).locale == "en_US"


def test_wholetext_reads_each_file_as_one_row_as_spark_does(spark, tmp_path):
    """Each file is one row, decompressed, never cut into byte ranges; an empty file is no row;
    lineSep does not apply."""
    (tmp_path / "a.txt").write_bytes(b"x\ny\r\n" * 20)
    (tmp_path / "e.txt").write_bytes(b"")
    (tmp_path / "c.txt.gz").write_bytes(gzip.compress(b"p|q\n"))
    (tmp_path / "b.txt.bz2").write_bytes(bz2.compress(b"m\nn"))
    for line_sep in (None, "|"):
        extra = {"lineSep": line_sep} if line_sep else {}
        theirs = spark.read.text(str(tmp_path), wholetext=True, **extra)
        mine = ours(spark, "text", tmp_path, wholetext="true", maxPartitionBytes="8", **extra)
        assert rows(mine) == rows(theirs)
        assert len(rows(mine)) == 3


NON_NUMERIC = ["NaN", "+INF", "-INF", "Infinity", "-Infinity", "+Infinity", "INF", "+NaN", "1.5"]


def test_json_syntax_options_read_as_spark_does(spark, tmp_path):
    """allowNonNumericNumbers (on by default), allowBackslashEscapingAnyCharacter and
    allowUnquotedControlChars: the same inferred schema and the same rows or malformed records."""
    numbers = tmp_path / "n.json"
    numbers.write_text("".join(f'{{"a": {token}}}\n' for token in NON_NUMERIC))
    strings = tmp_path / "s.json"
    strings.write_text('{"a": "\\$x"}\n{"a": "t\tb"}\n{"a": "ok\\n"}\n{"a": \'q\\#\'}\n')
    for path, options in [
        (numbers, {}), (numbers, {"allowNonNumericNumbers": "false"}),
        (strings, {}), (strings, {"allowBackslashEscapingAnyCharacter": "true"}),
        (strings, {"allowUnquotedControlChars": "true"}),
    ]:
        theirs = spark.read.options(**options).json(str(path))
        mine = ours(spark, "json", path, **options)
        assert mine.schema.simpleString() == theirs.schema.simpleString(), options
        assert rows(mine) == rows(theirs), options


def test_csv_limits_and_header_check_as_spark(spark, tmp_path):
    """enforceSchema=false fails on a header unlike the schema (its case aside), naming both;
    maxColumns and maxCharsPerColumn fail the read whatever the mode, as Spark's parser does."""
    path = tmp_path / "h.csv"
    path.write_text("A,b\n1,22\n")
    header = {"header": "true", "enforceSchema": "false"}
    assert rows(ours(spark, "csv", path, "a int, B int", **header)) == rows(
        spark.read.options(**header).schema("a int, B int").csv(str(path)))
    with pytest.raises(Exception, match="h.csv.*Header: A, b; schema: a, c; expected 'c' but found 'b'"):
        ours(spark, "csv", path, "a int, c int", **header).collect()
    with pytest.raises(Exception, match="CSV header does not conform to the schema"):
        spark.read.options(**header).schema("a int, c int").csv(str(path)).collect()
    for option, value in [("maxColumns", "1"), ("maxCharsPerColumn", "1")]:
        with pytest.raises(Exception, match=f"{option} = {value}"):
            ours(spark, "csv", path, "a int, b int", **{option: value}).collect()
        with pytest.raises(Exception, match="MALFORMED_CSV_RECORD"):
            spark.read.option(option, value).schema("a int, b int").csv(str(path)).collect()
    for option, value in [("maxColumns", "2"), ("maxCharsPerColumn", "2")]:
        assert rows(ours(spark, "csv", path, "a int, b int", **{option: value})) == rows(
            spark.read.option(option, value).schema("a int, b int").csv(str(path)))


def test_csv_limits_on_headers_and_inference_as_spark(spark, tmp_path):
    """A header, the first line, or a line sampled for inference past maxColumns or maxCharsPerColumn
    fails the read in any mode, with a schema or not, enforceSchema or not, as Spark's parser does: the
    error names the option and the file."""
    (tmp_path / "wide.csv").write_text("a,b,c\n1,2\n")
    (tmp_path / "long.csv").write_text("aaa,b\n1,2\n")
    (tmp_path / "wide_data.csv").write_text("a,b\n1,2,3\n")
    (tmp_path / "long_data.csv").write_text("a,b\n1,222\n")
    no_schema = [{"header": "true"}, {"header": "true", "inferSchema": "true"}, {"inferSchema": "true"}]
    checked = [{"header": "true", "enforceSchema": enforce} for enforce in ("true", "false")]
    modes = itertools.cycle(["PERMISSIVE", "DROPMALFORMED", "FAILFAST"])  # each case in one: checked in all alike
    for name, option, value, schema, cases in [
        ("wide", "maxColumns", "2", None, no_schema), ("long", "maxCharsPerColumn", "2", None, no_schema[:1]),
        ("wide_data", "maxColumns", "2", None, no_schema[1:2]),
        ("long_data", "maxCharsPerColumn", "2", None, no_schema[1:2]),
        ("wide", "maxColumns", "2", "x int, y int", checked),
        ("long", "maxCharsPerColumn", "2", "x int, y int", checked[1:]),
    ]:
        path = tmp_path / f"{name}.csv"
        for options in cases:
            options = {option: value, "mode": next(modes), **options}
            with pytest.raises(Exception, match=f"{option}'? = {value}.*{path.name}|{path.name}.*{option} = {value}"):
                ours(spark, "csv", path, schema, **options).collect()
            reader = spark.read.options(**options)
            with pytest.raises(Exception, match="MALFORMED_CSV_RECORD"):
                (reader.schema(schema) if schema else reader).csv(str(path)).collect()
    within = {"header": "true", "inferSchema": "true", "maxColumns": "3", "maxCharsPerColumn": "3"}
    assert rows(ours(spark, "csv", tmp_path / "wide.csv", **within)) == rows(
        spark.read.options(**within).csv(str(tmp_path / "wide.csv")))


def test_inference_options_as_spark(spark, tmp_path):
    """preferDate=false infers dates as timestamps (strings where timestampFormat does not read
    them); samplingRatio infers from the lines Spark's seeded sample keeps (one file: one partition)."""
    dates = tmp_path / "d.csv"
    dates.write_text("2020-01-01,2020-01-01 10:00:00,1\n2021-02-03,2020-01-01,2\n")
    for options in [{}, {"preferDate": "false"}, {"preferDate": "false", "timestampFormat": "yyyy-MM-dd HH:mm:ss"}]:
        theirs = spark.read.options(inferSchema="true", **options).csv(str(dates))
        mine = ours(spark, "csv", dates, inferSchema="true", **options)
        assert mine.schema.simpleString() == theirs.schema.simpleString(), options
    # with 0.1, Spark's sample of 200 lines is lines 3, 18, 20, ... (test_spark_draws_of_its_sample_with_seed_1)
    values = ["7"] * 200
    values[1] = values[2] = "x"  # never sampled: the column stays a number
    values[3] = "1.5"  # sampled, the header line 0 aside: double
    (tmp_path / "csv").mkdir()
    (tmp_path / "csv" / "s.csv").write_text("n\n" + "\n".join(values[1:]) + "\n")
    (tmp_path / "json").mkdir()
    (tmp_path / "json" / "s.json").write_text("".join(json.dumps({"n": v if v == "x" else float(v)}) + "\n"
                                                      for v in values))
    for fmt, options in [("csv", {"header": "true", "inferSchema": "true"}), ("json", {})]:
        for ratio in ("0.1", "1"):
            theirs = spark.read.format(fmt).options(samplingRatio=ratio, **options).load(str(tmp_path / fmt))
            mine = ours(spark, fmt, tmp_path / fmt, samplingRatio=ratio, **options)
            assert mine.schema.simpleString() == theirs.schema.simpleString(), (fmt, ratio)
