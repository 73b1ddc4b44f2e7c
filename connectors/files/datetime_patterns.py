"""Java ``DateTimeFormatter`` patterns, as Flink's bucket format and Spark's ``dateFormat`` /
``timestampFormat`` options write them: :func:`strftime_pattern` formats (the file sink's bucket
directories), :class:`DateTimePattern` parses Arrow string arrays (the file source's csv and json).

Parsing is vectorised: the pattern becomes one RE2 regular expression whose groups pyarrow's
``extract_regex`` cuts out, and the fields are checked and combined with Arrow compute, never row
by row in Python. ``pyarrow.compute.strptime`` is no substitute: it takes no fractions of a second
and silently reads ``2024-02-30`` as March 1st, where Spark (a ``STRICT`` resolver) refuses it.
"""

from __future__ import annotations

import datetime
import functools
import re

import pyarrow as pa
import pyarrow.compute as pc


def tokens(pattern: str) -> list[tuple[str, str]]:
    """``pattern`` as ``("letters", run of one letter)``, ``("text", character)`` and ``("quoted",
    literal)`` pieces; ``''`` is a quote, as in Java. ValueError on an unclosed quote."""
    out: list[tuple[str, str]] = []
    position = 0
    while position < len(pattern):
        char = pattern[position]
        if char == "'":
            if pattern.startswith("''", position):
                out.append(("quoted", "'"))
                position += 2
                continue
            text, position = [], position + 1
            while True:
                if position >= len(pattern):
                    raise ValueError("unclosed quote")
                if pattern.startswith("''", position):
                    text.append("'")
                    position += 2
                elif pattern[position] == "'":
                    position += 1
                    break
                else:
                    text.append(pattern[position])
                    position += 1
            out.append(("quoted", "".join(text)))
        elif char.isascii() and char.isalpha():
            end = position
            while end < len(pattern) and pattern[end] == char:
                end += 1
            out.append(("letters", pattern[position:end]))
            position = end
        else:
            out.append(("text", char))
            position += 1
    return out


def _unsupported(run: str, supported: str) -> ValueError:
    count = f" ({run})" if len(run) > 1 else ""
    return ValueError(f"unsupported pattern letter {run[0]!r}{count}; use {supported}")


# Letters meaningful in a directory name -> strftime.
_STRFTIME = {"yyyy": "%Y", "yy": "%y", "MM": "%m", "dd": "%d", "HH": "%H", "mm": "%M", "ss": "%S"}


def strftime_pattern(java_pattern: str) -> str:
    """Flink's ``DateTimeBucketAssigner`` format (Java pattern letters) as a strftime pattern.

    Raises ValueError on letters other than yyyy, yy, MM, dd, HH, mm, ss (quoted text is literal).
    """
    if not java_pattern:
        raise ValueError("expected a date pattern such as yyyy-MM-dd--HH")
    out = []
    for kind, text in tokens(java_pattern):
        if kind == "letters" and text not in _STRFTIME:
            raise _unsupported(text, "yyyy, yy, MM, dd, HH, mm, ss or 'quoted text'")
        out.append(_STRFTIME[text] if kind == "letters" else text.replace("%", "%%"))
    return "".join(out)


_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december")  # fmt: skip
_OFFSET_COLON, _OFFSET, _OFFSET_HOURS = r"[+-]\d{2}:\d{2}", r"[+-]\d{4}", r"[+-]\d{2}(?:\d{2})?"
# letters -> (field, regular expression). Widths as Spark's parser takes them: a doubled letter is
# exactly two digits, a single one one or two; names (English, Spark's default locale) and all
# literal text in any case (Spark's formatter is case-insensitive).
_FIELDS = {
    "yyyy": ("year", r"\d{4}"), "yy": ("year2", r"\d{2}"),
    "M": ("month", r"\d{1,2}"), "MM": ("month", r"\d{2}"),
    "MMM": ("month_short", "|".join(m[:3] for m in _MONTHS)), "MMMM": ("month_long", "|".join(_MONTHS)),
    "d": ("day", r"\d{1,2}"), "dd": ("day", r"\d{2}"),
    "H": ("hour", r"\d{1,2}"), "HH": ("hour", r"\d{2}"),
    "h": ("clock_hour", r"\d{1,2}"), "hh": ("clock_hour", r"\d{2}"), "a": ("am_pm", "am|pm"),
    "m": ("minute", r"\d{1,2}"), "mm": ("minute", r"\d{2}"),
    "s": ("second", r"\d{1,2}"), "ss": ("second", r"\d{2}"),
    # S..SSSSSSSSS: Spark reads 1 up to that many digits (a fraction of variable length)
    **{"S" * n: ("fraction", rf"\d{{1,{n}}}") for n in range(1, 10)},
    "X": ("offset", "z|" + _OFFSET_HOURS), "XX": ("offset", "z|" + _OFFSET), "XXX": ("offset", "z|" + _OFFSET_COLON),
    "x": ("offset", _OFFSET_HOURS), "xx": ("offset", _OFFSET), "xxx": ("offset", _OFFSET_COLON),
    "Z": ("offset", _OFFSET), "ZZ": ("offset", _OFFSET), "ZZZ": ("offset", _OFFSET),
}  # fmt: skip
SUPPORTED = "yyyy, yy, M, MM, MMM, MMMM, d, dd, H, HH, h, hh, a, m, mm, s, ss, S to SSSSSSSSS, X, XX, XXX, x, xx, xxx, Z or 'quoted text'"

_DAY_MICROS = 86_400 * 1_000_000


class DateTimePattern:
    """A Java date-time pattern that parses strings as Spark's csv and json readers do with
    ``dateFormat`` / ``timestampFormat``: the whole value must match, fields must be in range (no
    February 30th), missing fields default to 1970-01-01 00:00:00, ``hh`` without ``a`` is AM.
    A timestamp without an offset is read in the time zone :meth:`parse` is given."""

    def __init__(self, pattern: str):
        if not pattern:
            raise ValueError("expected a pattern such as yyyy-MM-dd")
        self.pattern = pattern
        self.fields: dict[str, str] = {}  # field -> its group; a repeated field is matched, not checked
        parts, depth = [], 0
        for kind, text in tokens(pattern):
            if kind == "text" and text in "[]":  # an optional section; its fields may be missing
                depth += 1 if text == "[" else -1
                if depth < 0:
                    raise ValueError("']' without '['")
                parts.append("(?:" if text == "[" else ")?")
                continue
            if kind == "text" and text in "{}#":  # reserved by Java
                raise ValueError(f"unsupported pattern character {text!r}; quote it, or use {SUPPORTED}")
            if kind != "letters":
                parts.append(re.escape(text))
                continue
            if text not in _FIELDS:
                raise _unsupported(text, SUPPORTED)
            field, expression = _FIELDS[text]
            if field in self.fields:
                parts.append(f"(?:{expression})")
            else:
                self.fields[field] = f"g{len(self.fields)}"
                parts.append(f"(?P<{self.fields[field]}>{expression})")
        if depth:
            raise ValueError("'[' without ']'")
        self.regex = "(?i)^" + "".join(parts) + "$"

    @staticmethod
    @functools.lru_cache(maxsize=64)
    def of(pattern: str) -> DateTimePattern:
        return DateTimePattern(pattern)

    def parse(self, text: pa.Array, kind: pa.DataType, zone: datetime.tzinfo = datetime.timezone.utc) -> pa.Array:
        """``text`` (strings) as ``kind`` (a date or a timestamp): null where a value does not match
        or is out of range. A zone-less timestamp type takes no value with an offset (as Spark); a
        timestamp value without one is read in ``zone``."""
        if isinstance(text, pa.ChunkedArray):
            text = text.combine_chunks()
        text = text.cast(pa.string())
        parts = pc.extract_regex(text, self.regex)  # null where the value does not match
        ok = parts.is_valid()

        def group(field: str) -> pa.Array | None:  # "" where an optional section left it out
            return pc.struct_field(parts, self.fields[field]) if field in self.fields else None

        def number(field: str, default: int) -> pa.Array:
            strings = group(field)
            if strings is None:
                return pa.repeat(pa.scalar(default, pa.int64()), len(text))
            return pc.fill_null(pc.if_else(pc.equal(strings, ""), None, strings).cast(pa.int64()), default)

        def within(values, low: int, high: int) -> None:
            nonlocal ok
            ok = pc.and_kleene(ok, pc.and_(pc.greater_equal(values, low), pc.less_equal(values, high)))

        year = number("year", 1970)
        if "year2" in self.fields:  # yy: 2000 to 2099, as Java's reduced two-digit year
            year = pc.add(number("year2", 0), 2000)
        if "month_short" in self.fields or "month_long" in self.fields:
            short = "month_short" in self.fields
            names = pa.array([m[:3] for m in _MONTHS] if short else _MONTHS)
            found = pc.index_in(pc.utf8_lower(group("month_short" if short else "month_long")), names)
            month = pc.fill_null(pc.add(found.cast(pa.int64()), 1), 1)
        else:
            month = number("month", 1)
        day = number("day", 1)
        within(month, 1, 12)
        within(day, 1, 31)
        if "clock_hour" in self.fields:
            clock = number("clock_hour", 12)
            within(clock, 1, 12)
            hour = pc.modulo(clock, 12)
            if "am_pm" in self.fields:
                hour = pc.add(hour, pc.if_else(pc.equal(pc.utf8_lower(group("am_pm")), "pm"), 12, 0))
        else:
            hour = number("hour", 0)
        minute, second = number("minute", 0), number("second", 0)
        within(hour, 0, 23)
        within(minute, 0, 59)
        within(second, 0, 59)
        # A month out of range would make nonsense of the day count: count from January instead.
        month = pc.if_else(pc.fill_null(ok, False), month, 1)
        days = _days_from_civil(year, month, day)
        # Day 31 of a 30-day month lands in the next month: out of range, as STRICT resolving says.
        date = days.cast(pa.int32()).cast(pa.date32())
        ok = pc.and_kleene(ok, pc.equal(pc.month(date), month))
        if pa.types.is_date(kind):
            return pc.if_else(pc.fill_null(ok, False), date, pa.scalar(None, pa.date32())).cast(kind)

        micros = pc.multiply(days, _DAY_MICROS)
        seconds = pc.add(pc.add(pc.multiply(hour, 3600), pc.multiply(minute, 60)), second)
        if "offset" in self.fields:
            if kind.tz is None:
                ok = pc.and_kleene(ok, pc.equal(group("offset"), ""))
            offset = self._offset_seconds(group("offset"))
            ok = pc.and_kleene(ok, pc.is_valid(offset))
            seconds = pc.subtract(seconds, offset)
        micros = pc.add(micros, pc.multiply(seconds, 1_000_000))
        if "fraction" in self.fields:  # digits of a second, right-padded to microseconds (Spark keeps no more)
            digits = pc.utf8_slice_codeunits(pc.utf8_rpad(group("fraction"), 6, "0"), 0, 6)
            micros = pc.add(micros, digits.cast(pa.int64()))
        unit = pa.timestamp("us", kind.tz)
        stamps = pc.if_else(pc.fill_null(ok, False), micros, pa.scalar(None, pa.int64())).cast(unit)
        if kind.tz is not None and zone is not datetime.timezone.utc:  # micros is the local time where no offset
            local = local_instants(stamps.cast(pa.timestamp("us")), zone).cast(unit)
            stamps = local if "offset" not in self.fields else pc.if_else(pc.equal(group("offset"), ""), local, stamps)
        return stamps.cast(kind)

    @staticmethod
    def _offset_seconds(text: pa.Array) -> pa.Array:
        """``Z``, ``+HH``, ``+HHMM`` or ``+HH:MM`` as seconds east of UTC; null past 18 hours or 59 minutes."""
        text = pc.replace_substring(pc.utf8_upper(text), ":", "")
        text = pc.utf8_rpad(pc.if_else(pc.equal(text, "Z"), "+0000", text), 5, "0")
        hours = pc.utf8_slice_codeunits(text, 1, 3).cast(pa.int64())
        minutes = pc.utf8_slice_codeunits(text, 3, 5).cast(pa.int64())
        valid = pc.and_(pc.less_equal(hours, 18), pc.less_equal(minutes, 59))
        seconds = pc.add(pc.multiply(hours, 3600), pc.multiply(minutes, 60))
        signed = pc.if_else(pc.starts_with(text, "-"), pc.negate(seconds), seconds)
        return pc.if_else(valid, signed, pa.scalar(None, pa.int64()))


def local_instants(local: pa.Array, zone: datetime.tzinfo) -> pa.Array:
    """Zone-less timestamps as the instants they are in ``zone`` (a ``datetime.timezone`` or a
    ``ZoneInfo``), of type timestamp with zone UTC: as Java's ``ZonedDateTime.of``, a time that a gap
    skips is moved on by the gap, one that an overlap repeats takes the earlier offset."""
    utc = pa.timestamp(local.type.unit, "UTC")
    if zone is datetime.timezone.utc:
        return local.cast(utc)
    if isinstance(zone, datetime.timezone):
        return pc.subtract(local, pa.scalar(zone.utcoffset(None), pa.duration(local.type.unit))).cast(utc)
    # Arrow puts a time in a gap at the instant before the gap (the offset before it); Java moves
    # it by that offset: that instant plus what the time is past the local time of it
    before = pc.assume_timezone(local, zone.key, ambiguous="earliest", nonexistent="earliest")
    past = pc.subtract(local, pc.local_timestamp(before))
    return pc.add(before, past).cast(utc)


def _days_from_civil(year, month, day) -> pa.Array:
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm), year >= 0;
    a day past the month's end counts on into the next month."""
    march_based = pc.subtract(year, pc.if_else(pc.less_equal(month, 2), 1, 0))
    shifted = pc.add(march_based, 400)  # keeps the year-0 January positive for integer division
    era = pc.divide(shifted, 400)
    year_of_era = pc.subtract(shifted, pc.multiply(era, 400))
    month_from_march = pc.modulo(pc.add(month, 9), 12)
    day_of_year = pc.add(pc.divide(pc.add(pc.multiply(month_from_march, 153), 2), 5), pc.subtract(day, 1))
    day_of_era = pc.add(
        pc.add(pc.multiply(year_of_era, 365), pc.divide(year_of_era, 4)),
        pc.subtract(day_of_year, pc.divide(year_of_era, 100)),
    )
    return pc.subtract(pc.add(pc.multiply(era, 146_097), day_of_era), 719_468 + 146_097)


# Formatting (the file sink's timestampFormat, timestampNTZFormat and dateFormat). Padded numbers
# are cut from Arrow's text of the whole second, "yyyy-MM-dd HH:mm:ss" (a cast: pc.strftime took
# 0.5 s per directive per million values): letters -> (field, width, position in that text).
_PADDED = {"yyyy": ("year", 4, 0), "yy": ("year2", 2, 2), "MM": ("month", 2, 5), "dd": ("day", 2, 8),
           "HH": ("hour", 2, 11), "mm": ("minute", 2, 14), "ss": ("second", 2, 17)}  # fmt: skip
# Numbers not in that text: letters -> (field, width; 0 unpadded).
_NUMBERS = {"y": ("year", 0), "M": ("month", 0), "d": ("day", 0), "H": ("hour", 0), "m": ("minute", 0),
            "s": ("second", 0), "h": ("clock_hour", 0), "hh": ("clock_hour", 2), "DDD": ("day_of_year", 3)}  # fmt: skip
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")  # Arrow's day_of_week order
# Names, in English as Spark's default locale: letters -> (field, names).
_NAMES = {"MMM": ("month", tuple(m[:3].title() for m in _MONTHS)), "MMMM": ("month", tuple(m.title() for m in _MONTHS)),
          **{"E" * n: ("day_of_week", tuple(d[:3] for d in _DAYS)) for n in (1, 2, 3)},
          "EEEE": ("day_of_week", _DAYS), "a": ("am_pm", ("AM", "PM"))}  # fmt: skip
# Offsets: always UTC's, since the sink writes instants in UTC (X prints Z for a zero offset).
_UTC_OFFSETS = {"X": "Z", "XX": "Z", "XXX": "Z", "x": "+00", "xx": "+0000", "xxx": "+00:00",
                "Z": "+0000", "ZZ": "+0000", "ZZZ": "+0000"}  # fmt: skip
_TIME_LETTERS = set("HhamsSXxZ")
FORMAT_SUPPORTED = ("y, yy, yyyy, M, MM, MMM, MMMM, d, dd, DDD, E to EEEE, H, HH, h, hh, a, m, mm, s, ss, "
                    "S to SSSSSSSSS, X, XX, XXX, x, xx, xxx, Z to ZZZ, [optional] or 'quoted text'")  # fmt: skip
_ISO_TEXT = "yyyy-MM-dd HH:mm:ss"
TEXT = pa.large_string()
# Years Arrow writes with four digits, as seconds since 1970: 0001-01-01 up to 9999-12-31.
_FOUR_DIGIT_YEARS = (-62_135_596_800, 253_402_300_800)


class DateTimeFormat:
    """A Java date-time pattern that formats Arrow timestamps or dates as Spark's csv and json
    writers do with ``timestampFormat`` / ``timestampNTZFormat`` / ``dateFormat``, in UTC.

    ``kind`` is ``timestamp``, ``timestamp_ntz`` or ``date``; letters the value has no field for
    (an offset for timestamp_ntz, a time for a date) are refused here, where Spark fails in the
    task. Vectorised with Arrow kernels: runs of padded numbers and the literal text between them
    that Arrow's own text of the second holds are one slice of it (Spark's default pattern is two
    slices, the fraction and the offset)."""

    def __init__(self, pattern: str, kind: str = "timestamp"):
        if not pattern:
            raise ValueError("expected a pattern such as yyyy-MM-dd'T'HH:mm:ss.SSSXXX")
        self.pattern, self.kind = pattern, kind
        # ("text", literal) | ("iso", (start, end)) | ("number", (field, width)) | ("name", (field, names))
        # | ("fraction", digits)
        self.parts: list[tuple[str, object]] = []
        for token_kind, text in tokens(pattern):
            if token_kind == "text" and text in "[]":  # optional sections: every field is there to print
                continue
            if token_kind == "text" and text in "{}#":  # reserved by Java
                raise ValueError(f"unsupported pattern character {text!r}; quote it, or use {FORMAT_SUPPORTED}")
            if token_kind != "letters":
                self._add("text", text)
                continue
            if kind == "date" and text[0] in _TIME_LETTERS:
                raise ValueError(f"pattern letter {text[0]!r} is a time field, which a date does not have")
            if kind == "timestamp_ntz" and text in _UTC_OFFSETS:
                raise ValueError(f"pattern letter {text[0]!r} is an offset, which timestamp_ntz does not have")
            if text in _PADDED:
                position = _PADDED[text][2]
                self._add("iso", (position, position + _PADDED[text][1]))
            elif text in _NUMBERS:
                self.parts.append(("number", _NUMBERS[text]))
            elif text in _NAMES:
                self.parts.append(("name", _NAMES[text]))
            elif text in _UTC_OFFSETS:
                self._add("text", _UTC_OFFSETS[text])
            elif set(text) == {"S"} and len(text) <= 9:
                self.parts.append(("fraction", len(text)))
            else:
                raise _unsupported(text, FORMAT_SUPPORTED)
        self._merge_slices()

    def _add(self, part: str, value) -> None:
        if part == "text" and self.parts and self.parts[-1][0] == "text":
            self.parts[-1] = ("text", self.parts[-1][1] + value)
        else:
            self.parts.append((part, value))

    def _merge_slices(self) -> None:
        """A slice, the text Arrow's text holds next and the slice after it: one slice."""
        merged: list[tuple[str, object]] = []
        for part in self.parts:
            if part[0] == "iso" and len(merged) >= 2 and merged[-2][0] == "iso" and merged[-1][0] == "text":
                (start, end), (next_start, next_end) = merged[-2][1], part[1]
                if _ISO_TEXT[end:next_start] == merged[-1][1]:
                    merged[-2:] = [("iso", (start, next_end))]
                    continue
            merged.append(part)
        self.parts = merged

    @staticmethod
    @functools.lru_cache(maxsize=64)
    def of(pattern: str, kind: str = "timestamp") -> DateTimeFormat:
        return DateTimeFormat(pattern, kind)

    def format(self, array: pa.Array) -> pa.Array:
        """The values of ``array`` (a timestamp, its instants as UTC, or a date) as large strings;
        null stays null."""
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        if pa.types.is_date(array.type):
            micros = pc.multiply(array.cast(pa.date32()).cast(pa.int32()).cast(pa.int64()), _DAY_MICROS)
        else:
            micros = array.cast(pa.timestamp(array.type.unit)).cast(pa.timestamp("us")).cast(pa.int64())
        seconds = pc.floor_temporal(micros.cast(pa.timestamp("us")), unit="second")  # a fraction is never negative
        whole = seconds.cast(pa.timestamp("s"))
        low, high = (value.as_py() for value in pc.min_max(whole.cast(pa.int64())).values())
        four_digits = low is None or (low >= _FOUR_DIGIT_YEARS[0] and high < _FOUR_DIGIT_YEARS[1])
        iso = whole.cast(TEXT) if four_digits and any(p == "iso" for p, _ in self.parts) else None
        texts: list[pa.Array | str] = []
        for part, value in self.parts:
            if part == "text":
                texts.append(value)
            elif part == "iso" and iso is not None:
                texts.append(pc.utf8_slice_codeunits(iso, *value))
            elif part == "iso":  # a year of more or fewer than four digits: field by field
                texts += [piece if isinstance(piece, str) else _number(whole, *piece) for piece in _iso_pieces(*value)]
            elif part == "number":
                texts.append(_number(whole, *value))
            elif part == "name":
                field, names = value
                index = pc.if_else(pc.less(pc.hour(whole), 12), 0, 1) if field == "am_pm" else getattr(pc, field)(whole)
                texts.append(pc.take(pa.array(names, TEXT), pc.subtract(index, 1) if field == "month" else index))
            else:  # S..: the fraction's first digits (truncated, as Java), zero-padded past microseconds
                fraction = pc.subtract(micros, seconds.cast(pa.int64())).cast(TEXT)
                digits = pc.utf8_slice_codeunits(pc.utf8_lpad(fraction, 6, "0"), 0, value)
                texts.append(pc.utf8_rpad(digits, value, "0") if value > 6 else digits)
        arrays = [t for t in texts if not isinstance(t, str)]
        if not arrays:  # only literal text
            return pc.if_else(array.is_valid(), pa.scalar("".join(texts), TEXT), pa.scalar(None, TEXT))
        return pc.binary_join_element_wise(*[pa.scalar(t, TEXT) if isinstance(t, str) else t.cast(TEXT) for t in texts],
                                           pa.scalar("", TEXT))  # fmt: skip


def _iso_pieces(start: int, end: int) -> list[str | tuple[str, int]]:
    """``_ISO_TEXT[start:end]`` as its numbers, (field, width), and the literal text between them."""
    at = {position: (field, width) for field, width, position in _PADDED.values()}
    pieces: list[str | tuple[str, int]] = []
    position = start
    while position < end:
        if position in at and position + at[position][1] <= end:
            pieces.append(at[position])
            position += at[position][1]
        else:
            pieces.append(_ISO_TEXT[position])
            position += 1
    return pieces


def _number(whole: pa.Array, field: str, width: int) -> pa.Array:
    """A field of timestamps (whole seconds) as decimal text, zero-padded to ``width``."""
    if field == "clock_hour":  # h: 12, 1, ..., 11
        hour = pc.modulo(pc.hour(whole), 12)
        number = pc.if_else(pc.equal(hour, 0), 12, hour)
    elif field == "year2":
        number = pc.modulo(pc.abs(pc.year(whole)), 100)  # -0002 -> 02, as Java
    else:
        number = getattr(pc, field)(whole)
    text = number.cast(TEXT)
    if not width:
        return text
    if field == "year":  # outside 0000-9999 with a sign, as Java's yyyy: -0002, +10000
        padded = pc.utf8_lpad(pc.abs(number).cast(TEXT), width, "0")
        sign = pc.if_else(pc.less(number, 0), "-", pc.if_else(pc.greater(number, 9999), "+", ""))
        return pc.binary_join_element_wise(sign.cast(TEXT), padded, pa.scalar("", TEXT))
    return pc.utf8_lpad(text, width, "0")
