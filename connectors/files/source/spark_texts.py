"""Spark's texts of numbers, booleans and timestamps beyond what pyarrow converts.

csv inference (``schema.py``) infers the types these read, and a csv value pyarrow does not convert
is read by them (``records.cast_or_mark``), as Spark's csv reader reads it: Java's ``Integer.parseInt``,
``Double.parseDouble`` and ``BigDecimal``, and Spark's lenient default timestamp parser.
"""

from __future__ import annotations

import datetime
import decimal
import functools
import re
import zoneinfo
from typing import Any

import pyarrow as pa


_JAVA_TRIMMED = "".join(map(chr, range(0x21)))  # what Java's String.trim drops (Double.parseDouble does)
_INTEGER_TEXT = re.compile(r"[+-]?\d+")  # any Unicode decimal digits, as Java's Character.digit
BIG_DECIMAL_TEXT = re.compile(r"[+-]?(?:([0-9]+)\.?([0-9]*)|\.([0-9]+))(?:[eE]([+-]?[0-9]+))?")  # Java's BigDecimal
_JAVA_DOUBLE_TEXT = re.compile(
    r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?"
    r"|0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+[fFdD]?)"
)
# Spark's default timestamp parser (DateTimeUtils.stringToTimestamp): a date of a 4 to 6 digit year,
# maybe cut after the year or the month, then a time; or a time alone; then a zone after the seconds.
_TIME = r"[0-9]{1,2}(?::[0-9]{1,2}(?::[0-9]{1,2}(?:\.[0-9]*)?)?)?"
_LENIENT_TIMESTAMP_TEXT = re.compile(
    rf"(?:(?P<year>[+-]?[0-9]{{4,6}})(?:-(?P<month>[0-9]{{1,2}})(?:-(?P<day>[0-9]{{1,2}})(?:[ T](?P<time>{_TIME}))?)?)?"
    rf"|T?(?P<time_only>{_TIME}))"
    r"(?: ?(?P<zone>Z|(?:UTC|GMT|UT)?[+-][0-9]{1,2}(?::?[0-9]{2}(?::?[0-9]{2})?)?|[A-Za-z][A-Za-z0-9_+\-/]*))?"
)
# Spark's default date parser (DateTimeUtils.stringToDate): a 4 to 7 digit year, maybe cut after the year
# or the month; after the day, anything that follows a space or a T is ignored.
_LENIENT_DATE_TEXT = re.compile(r"([+-]?)([0-9]{4,7})(?:-([0-9]{1,2})(?:-([0-9]{1,2})(?:[ T].*)?)?)?", re.DOTALL)
_DATE_TRIMMED = _JAVA_TRIMMED + "\x7f"  # UTF8String.isWhitespaceOrISOControl, by byte
_MONTH_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_ZONE_OFFSET = re.compile(r"(?:UTC|GMT|UT)?([+-])([0-9]{1,2}):?([0-9]{2})?:?([0-9]{2})?")
_JAVA_SHORT_ZONE_IDS = {  # java.time.ZoneId.SHORT_IDS, which Spark's parser takes too
    "ACT": "Australia/Darwin", "AET": "Australia/Sydney", "AGT": "America/Argentina/Buenos_Aires",
    "ART": "Africa/Cairo", "AST": "America/Anchorage", "BET": "America/Sao_Paulo", "BST": "Asia/Dhaka",
    "CAT": "Africa/Harare", "CNT": "America/St_Johns", "CST": "America/Chicago", "CTT": "Asia/Shanghai",
    "EAT": "Africa/Addis_Ababa", "ECT": "Europe/Paris", "IET": "America/Indiana/Indianapolis", "IST": "Asia/Kolkata",
    "JST": "Asia/Tokyo", "MIT": "Pacific/Apia", "NET": "Asia/Yerevan", "NST": "Pacific/Auckland", "PLT": "Asia/Karachi",
    "PNT": "America/Phoenix", "PRT": "America/Puerto_Rico", "PST": "America/Los_Angeles", "SST": "Pacific/Guadalcanal",
    "VST": "Asia/Ho_Chi_Minh", "EST": "Etc/GMT+5", "MST": "Etc/GMT+7", "HST": "Etc/GMT+10",
}


def java_integer(text: str, bits: int) -> int | None:
    """``text`` as Java's ``Integer.parseInt`` (``Long.parseLong``, ...) reads it: a sign, digits, in range."""
    if _INTEGER_TEXT.fullmatch(text) and -(2 ** (bits - 1)) <= (value := int(text)) < 2 ** (bits - 1):
        return value
    return None


def java_double(text: str) -> float | None:
    """``text`` as Java's ``Double.parseDouble`` reads it: trimmed, maybe hex, maybe a d or f suffix."""
    text = text.strip(_JAVA_TRIMMED)
    if not _JAVA_DOUBLE_TEXT.fullmatch(text):
        return None
    text = text[:-1] if text[-1] in "fFdD" else text
    return float.fromhex(text) if "x" in text.lower() else float(text)


def _zone(name: str) -> datetime.tzinfo | None:
    """The zone a timestamp text names; None if unknown."""
    name = name.strip()
    if name in ("Z", "UTC", "GMT", "UT"):
        return datetime.timezone.utc
    offset = _ZONE_OFFSET.fullmatch(name)
    if offset:
        sign, hours, minutes, seconds = offset.groups()
        delta = datetime.timedelta(hours=int(hours), minutes=int(minutes or 0), seconds=int(seconds or 0))
        return datetime.timezone(-delta if sign == "-" else delta) if delta < datetime.timedelta(hours=19) else None
    return _region(_JAVA_SHORT_ZONE_IDS.get(name, name))


# Java's ZoneOffset.of: +h, +hh, +hhmm, +hh:mm, +hhmmss, +hh:mm:ss
_JAVA_OFFSET = re.compile(r"[+-](?:[0-9]{1,2}|[0-9]{2}:?[0-9]{2}|[0-9]{2}:[0-9]{2}:[0-9]{2}|[0-9]{6})")
_JAVA_REGION = re.compile(r"[A-Za-z][A-Za-z0-9~/._+-]+")


@functools.cache
def _regions() -> frozenset[str]:
    # the tz database's zones, but for files Java's has no id of
    return frozenset(zoneinfo.available_timezones()) - {"Factory", "localtime", "posixrules"}


def _region(name: str) -> datetime.tzinfo | None:
    return zoneinfo.ZoneInfo(name) if _JAVA_REGION.fullmatch(name) and name in _regions() else None


def _java_offset(text: str) -> datetime.tzinfo | None:
    if not _JAVA_OFFSET.fullmatch(text):
        return None
    digits = text[1:].replace(":", "").zfill(2)
    hours, minutes, seconds = (int(digits[i:i + 2] or 0) for i in (0, 2, 4))
    if hours > 18 or minutes > 59 or seconds > 59 or (hours == 18 and (minutes or seconds)):
        return None
    delta = datetime.timedelta(hours=hours, minutes=minutes, seconds=seconds)
    return datetime.timezone(-delta if text[0] == "-" else delta)


@functools.lru_cache(maxsize=16)
def zone_id(text: str) -> datetime.tzinfo | None:
    """The zone Spark's ``timeZone`` option names (``DateTimeUtils.getZoneId``: Java's ``ZoneId.of``
    with ``SHORT_IDS``, after mending ``+h:mm`` and ``+hh:m``): a region id (``America/New_York``),
    ``Z``, ``UTC``, ``GMT``, ``UT``, an offset (``+01:00``, ``-0530``, ``+1``), maybe after ``UTC``,
    ``GMT`` or ``UT``; None if it names none."""
    text = re.sub(r"([+-])([0-9]):", r"\g<1>0\2:", text, count=1)
    text = re.sub(r"([+-][0-9]{2}):([0-9])$", r"\1:0\2", text, count=1)
    text = _JAVA_SHORT_ZONE_IDS.get(text, text)
    if text in ("Z", "UTC", "GMT", "UT"):
        return datetime.timezone.utc
    if text[:1] in ("+", "-"):
        return _java_offset(text)
    prefix = next((p for p in ("UTC", "GMT", "UT") if text.startswith(p) and text[len(p):][:1] in ("+", "-")), None)
    return _java_offset(text[len(prefix):]) if prefix else _region(text)


def spark_timestamp(text: str, zone: datetime.tzinfo = datetime.timezone.utc) -> datetime.datetime | None:
    """``text`` as Spark's default timestamp parser reads it (``2024``, ``2024-2-3 1:2``,
    ``10:00:00`` today, ``...:00.5 Europe/Paris``), an instant, in ``zone`` unless it names one
    (a time a gap skips moved on by the gap, one an overlap repeats at the earlier offset, as Java);
    None if it reads none (or a year Python's datetime does not hold, past 9999)."""
    text = text.strip(_JAVA_TRIMMED)
    match = _LENIENT_TIMESTAMP_TEXT.fullmatch(text)
    if match is None:
        return None
    time = match["time"] or match["time_only"]
    if match["time_only"] and ":" not in time and not text.startswith("T"):
        return None  # a number alone is no time
    if match["zone"] and (time is None or time.count(":") != 2):
        return None  # Spark takes a zone only after the seconds
    zone = _zone(match["zone"]) if match["zone"] else zone
    if zone is None:
        return None
    clock, _, fraction = (time or "0").partition(".")
    hour, minute, second = (int(part) for part in (clock.split(":") + ["0", "0"])[:3])
    try:
        day = (datetime.datetime.now(zone).date() if match["year"] is None
               else datetime.date(int(match["year"]), int(match["month"] or 1), int(match["day"] or 1)))
        return datetime.datetime(day.year, day.month, day.day, hour, minute, second,
                                 int(fraction[:6].ljust(6, "0")), tzinfo=zone)
    except ValueError:  # out of range: 2024-02-30, 25:00, year 0
        return None


def spark_timestamp_ntz(text: str) -> datetime.datetime | None:
    """``text`` as Spark's default timestamp_ntz parser reads it (``stringToTimestampWithoutTimeZone``):
    the texts :func:`spark_timestamp` takes but a time alone or any zone; None if it reads none."""
    match = _LENIENT_TIMESTAMP_TEXT.fullmatch(text.strip(_JAVA_TRIMMED))
    if match is None or match["year"] is None or match["zone"]:
        return None
    clock, _, fraction = (match["time"] or "0").partition(".")
    hour, minute, second = (int(part) for part in (clock.split(":") + ["0", "0"])[:3])
    try:
        return datetime.datetime(int(match["year"]), int(match["month"] or 1), int(match["day"] or 1),
                                 hour, minute, second, int(fraction[:6].ljust(6, "0")))
    except ValueError:  # out of range: 2024-02-30, 25:00, year 0 or past 9999
        return None


def _epoch_day(year: int, month: int, day: int) -> int | None:
    """Days from 1970-01-01 to a proleptic Gregorian date of any year; None if there is no such date."""
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    if not (1 <= month <= 12 and 1 <= day <= _MONTH_DAYS[month - 1] + (leap and month == 2)):
        return None
    year -= month <= 2
    era, year_of_era = divmod(year, 400)
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    return era * 146097 + year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year - 719468


def spark_date(text: str, days: bool = False) -> int | None:
    """``text`` as Spark's csv and json readers read a date without dateFormat, in days from
    1970-01-01: their fallback ``DateTimeUtils.stringToDate`` (``2024``, ``2024-1``, ``2024-01-15
    10:00``, ``+2024-01-15T``), after dropping ``GMT`` (``cleanLegacyTimestampStr``). ``days``
    (json): else a number of days, as Spark 1.5 wrote dates. None if it reads none."""
    match = _LENIENT_DATE_TEXT.fullmatch(text.replace("GMT", "").strip(_DATE_TRIMMED))
    if match is not None:
        sign, year, month, day = match.groups()
        return _epoch_day(-int(year) if sign == "-" else int(year), int(month or 1), int(day or 1))
    if days and _INTEGER_TEXT.fullmatch(text):
        value = int(text)  # Julian days before 1582-10-15, which Spark rebases: not read here
        return value if -141427 <= value < 2 ** 31 else None
    return None


def spark_decimal(text: str, kind: pa.DataType) -> decimal.Decimal | None:
    """``text`` as Spark's csv and json readers read a decimal(p, s): Java's ``BigDecimal`` of it without
    its commas (Spark's parser of the default locale), rounded HALF_UP to the scale; None if it is no
    number or has more digits than the precision after rounding."""
    match = BIG_DECIMAL_TEXT.fullmatch(text.replace(",", ""))
    if match is None:
        return None
    value = decimal.Decimal(match.group())
    whole_digits = kind.precision - kind.scale
    if value and value.adjusted() >= whole_digits:
        return None
    with decimal.localcontext(decimal.Context(prec=kind.precision + 2, Emin=-decimal.MAX_EMAX)):
        value = value.quantize(decimal.Decimal(1).scaleb(-kind.scale), rounding=decimal.ROUND_HALF_UP)
    return None if value and value.adjusted() >= whole_digits else value


def spark_text_value(text: str, kind: pa.DataType, zone: datetime.tzinfo = datetime.timezone.utc) -> Any:
    """A csv value pyarrow did not convert to ``kind``, as Spark's csv reader reads it (a zone-less
    timestamp in ``zone``); None if it reads none."""
    if pa.types.is_integer(kind):
        value = java_integer(text, kind.bit_width)
    elif pa.types.is_floating(kind):
        value = java_double(text)
    elif pa.types.is_boolean(kind):
        value = {"true": True, "false": False}.get(text.lower())
    elif pa.types.is_decimal(kind):
        value = spark_decimal(text, kind)
    elif pa.types.is_date(kind):
        return spark_date(text)  # days, which pa.array takes for a date (of years Python's date has not too)
    elif pa.types.is_timestamp(kind):
        value = spark_timestamp(text, zone) if kind.tz is not None else spark_timestamp_ntz(text)
    else:
        value = None
    try:
        return None if value is None else pa.scalar(value, kind).as_py()
    except (pa.ArrowInvalid, OverflowError):  # e.g. more digits than the decimal holds
        return None
