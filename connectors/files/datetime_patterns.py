"""Java ``DateTimeFormatter`` patterns, as Flink's bucket format and Spark's ``dateFormat`` /
``timestampFormat`` options write them: :func:`strftime_pattern` formats (the file sink's bucket
directories), :class:`DateTimePattern` parses Arrow string arrays (the file source's csv and json).

Parsing is vectorised: the pattern becomes one RE2 regular expression whose groups pyarrow's
``extract_regex`` cuts out, and the fields are checked and combined with Arrow compute, never row
by row in Python. ``pyarrow.compute.strptime`` is no substitute: it takes no fractions of a second
and silently reads ``2024-02-30`` as March 1st, where Spark (a ``STRICT`` resolver) refuses it.
"""

from __future__ import annotations

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
    A value without an offset is read as UTC."""

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

    def parse(self, text: pa.Array, kind: pa.DataType) -> pa.Array:
        """``text`` (strings) as ``kind`` (a date or a timestamp): null where a value does not match
        or is out of range. A zone-less timestamp type takes no value with an offset (as Spark)."""
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
