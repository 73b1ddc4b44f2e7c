"""Typed, validated connector options.

Spark hands a data source its options as a case-insensitive dict of strings. Every connector
declares its options once, as a frozen dataclass whose fields carry an :func:`option` spec; the
same class parses the strings (``from_options``), validates them, and renders a typed config back
to strings (``to_options``), so the Spark API, the foreachBatch callables and the Flink-style
config objects all go through one validation path.

Value conventions shared by every connector: option names as Spark spells them (camelCase,
matched case-insensitively), durations as ``10s``, ``5min``, ``1h`` or plain milliseconds, sizes
as ``128MB`` (binary units, as Spark) or plain bytes, booleans ``true``/``false``.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any, ClassVar, Self, TypeVar

T = TypeVar("T")

_REQUIRED = object()


# Words in an option name (ours, or a client setting passed through such as kafka.sasl.password)
# that mark its value as a secret.
_SECRET_NAME = re.compile(r"pass|secret|credential|token|jaas|auth|private|key\.pem|keystore|storageoption", re.I)


def is_secret_name(name: str) -> bool:
    """Whether an option called ``name`` may hold a secret (its value is then never shown)."""
    return bool(_SECRET_NAME.search(name))


class OptionError(ValueError):
    """A bad option value or name. Raised when the query starts, before any task runs.

    The value is shown unless it is None, ``secret`` or the option's name looks secret."""

    def __init__(self, source: str, option: str, value: object, reason: str, secret: bool = False):
        hidden = secret or is_secret_name(option)
        shown = "" if value is None else " = '***'" if hidden else f" = {value!r}"
        super().__init__(f"{source}: option '{option}'{shown}: {reason}")
        self.source, self.option, self.reason = source, option, reason


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with each secret replaced by ``***``, and in each double-quoted token, each piece
    of one 4 characters or longer: clients quote the part of a setting where their parsing failed
    (libpq: ``could not translate host name "<end of a password>@host"``)."""
    ordered = sorted({s for s in secrets if s}, key=len, reverse=True)
    for secret in ordered:
        text = text.replace(secret, "***")
    return re.sub(r'"([^"]*)"', lambda quoted: f'"{_mask_pieces(quoted.group(1), ordered)}"', text)


def _mask_pieces(token: str, secrets: list[str]) -> str:
    for secret in secrets:
        shortest, out, i = min(4, len(secret)), [], 0
        while i < len(token):
            j = i
            while j < len(token) and token[i : j + 1] in secret:
                j += 1
            if j - i >= shortest:
                out.append("***")
                i = j
            else:
                out.append(token[i])
                i += 1
        token = "".join(out)
    return token


# ---------------------------------------------------------------------------------------------
# Parsers: str -> typed value. They raise ValueError with a short reason; the caller adds the
# option name and value.


def parse_int(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError("expected an integer") from None


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ValueError("expected true or false")


def parse_str(text: str) -> str:
    return text


_DURATION_UNITS = {
    "ms": 0.001, "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hour": 3600, "hours": 3600, "d": 86400, "day": 86400, "days": 86400,
}  # fmt: skip
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$")


def parse_duration(text: str) -> timedelta:
    """``500ms``, ``10s``, ``5min``, ``1h``, ``2d``, or a plain number of milliseconds."""
    match = _DURATION.match(text.lower())
    if not match or match.group(2) not in ("", *_DURATION_UNITS):
        raise ValueError("expected a duration such as 500ms, 10s, 5min, 1h or plain milliseconds")
    number, unit = float(match.group(1)), match.group(2)
    return timedelta(seconds=number * (_DURATION_UNITS[unit] if unit else 0.001))


_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$")


def parse_size(text: str) -> int:
    """``128MB``, ``64MiB``, ``1g``, ``512k`` (binary units, as Spark) or plain bytes."""
    match = _SIZE.match(text.lower())
    if not match:
        raise ValueError("expected a size such as 128MB, 64k or plain bytes")
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2)])


def parse_list(text: str) -> tuple[str, ...]:
    """A comma-separated list; blanks around items are ignored."""
    items = tuple(item.strip() for item in text.split(",") if item.strip())
    if not items:
        raise ValueError("expected a comma-separated list with at least one item")
    return items


def choice(*allowed: str) -> Callable[[str], str]:
    """A parser accepting one of ``allowed`` (case-insensitive), returned in canonical spelling."""
    canonical = {a.lower(): a for a in allowed}

    def parse(text: str) -> str:
        try:
            return canonical[text.strip().lower()]
        except KeyError:
            raise ValueError(f"expected one of {', '.join(allowed)}") from None

    return parse


def supported_choice(allowed: tuple[str, ...], supported: str, why: str) -> Callable[[str], str]:
    """A parser of a Spark option's values ``allowed`` of which only ``supported`` is implemented:
    the others are refused, saying ``why``."""
    parse = choice(*allowed)

    def parse_supported(text: str) -> str:
        value = parse(text)
        if value != supported:
            raise ValueError(f"only {supported} {why}")
        return value

    return parse_supported


# Checks: typed value -> None, or raise ValueError with a short reason.


def single_char(value: str) -> None:
    if len(value) != 1:
        raise ValueError("expected a single character")


def positive(value: float | int | timedelta) -> None:
    if (value.total_seconds() if isinstance(value, timedelta) else value) <= 0:
        raise ValueError("must be greater than 0")


def non_negative(value: float | int | timedelta) -> None:
    if (value.total_seconds() if isinstance(value, timedelta) else value) < 0:
        raise ValueError("must not be negative")


# Renderers: typed value -> option string (the inverse of the parsers, for to_options()).


def render(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, timedelta):
        return f"{round(value.total_seconds() * 1000)}ms"
    if isinstance(value, (tuple, list)) and all(isinstance(v, str) for v in value):
        return ",".join(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class OptionSpec:
    name: str
    parse: Callable[[str], Any]
    checks: tuple[Callable[[Any], None], ...]
    secret: bool
    doc: str


def option(
    name: str,
    parse: Callable[[str], Any] = parse_str,
    *,
    default: Any = _REQUIRED,
    checks: Iterable[Callable[[Any], None]] = (),
    secret: bool = False,
    doc: str = "",
) -> Any:
    """Declare a dataclass field as the option ``name``.

    ``default=None`` means optional with no value; omitting ``default`` makes it required.
    ``secret`` options are never echoed in errors or ``repr``.
    """
    spec = OptionSpec(name, parse, tuple(checks), secret, doc)
    field_kwargs: dict[str, Any] = {"metadata": {"option": spec}, "repr": not secret}
    if default is not _REQUIRED:
        field_kwargs["default"] = default
    return dataclasses.field(**field_kwargs)


class Options:
    """Base class of every connector's options dataclass.

    Subclasses set ``source_name`` (the format name, used in errors), optionally
    ``passthrough_prefixes`` (e.g. ``("kafka.",)``: options kept verbatim in ``extra``) and
    ``ignored`` (options Spark itself adds), and put cross-field rules in ``validate()``.
    """

    source_name: ClassVar[str] = "connectors"
    passthrough_prefixes: ClassVar[tuple[str, ...]] = ()
    # Spark adds these itself: load()/save() paths, and a stream writer also gets its query's
    # checkpointLocation and queryName as options.
    ignored: ClassVar[frozenset[str]] = frozenset({"path", "paths", "checkpointlocation", "queryname"})

    @classmethod
    def specs(cls) -> dict[str, OptionSpec]:
        """Field name -> spec for every declared option."""
        return {
            f.name: f.metadata["option"] for f in dataclasses.fields(cls) if "option" in f.metadata  # type: ignore[arg-type]
        }

    @classmethod
    def from_options(cls, raw: Mapping[str, str]) -> Self:
        """Parse and validate Spark's string options; unknown names get a did-you-mean."""
        by_lower = {str(k).lower(): (str(k), v) for k, v in raw.items() if v is not None}
        specs = cls.specs()
        known = {spec.name.lower() for spec in specs.values()}
        kwargs: dict[str, Any] = {
            field_name: cls._parse_one(spec, str(by_lower[spec.name.lower()][1]))
            for field_name, spec in specs.items()
            if spec.name.lower() in by_lower
        }
        extra: dict[str, str] = {}
        for lower, (original, value) in by_lower.items():
            if lower in known or lower in cls.ignored:
                continue
            if cls.passthrough_prefixes and lower.startswith(cls.passthrough_prefixes):
                extra[original] = value
                continue
            names = sorted(spec.name for spec in specs.values())
            close = difflib.get_close_matches(lower, [n.lower() for n in names], n=1, cutoff=0.6)
            hint = (
                f"did you mean '{next(n for n in names if n.lower() == close[0])}'?"
                if close
                else f"known options: {', '.join(names)}"
            )
            # Never the value: an unknown name may be a misspelt secret (pasword, storageOption).
            raise OptionError(cls.source_name, original, None, f"unknown option; {hint}")
        for f in dataclasses.fields(cls):
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            if f.name in specs and required and f.name not in kwargs:
                raise OptionError(cls.source_name, specs[f.name].name, None, "required option is missing")
        if extra:
            kwargs["extra"] = extra
        return cls(**kwargs)

    @classmethod
    def _parse_one(cls, spec: OptionSpec, text: str) -> Any:
        try:
            value = spec.parse(text)
            for check in spec.checks:
                check(value)
        except ValueError as exc:
            raise OptionError(cls.source_name, spec.name, text, str(exc), spec.secret) from None
        return value

    def __post_init__(self) -> None:
        # Typed construction (PyFlink-style config objects) is validated like string options.
        for field_name, spec in self.specs().items():
            value = getattr(self, field_name)
            if value is None:
                continue
            if isinstance(value, str) and spec.parse is not parse_str:
                object.__setattr__(self, field_name, self._parse_one(spec, value))
                continue
            try:
                for check in spec.checks:
                    check(value)
            except ValueError as exc:
                raise OptionError(self.source_name, spec.name, value, str(exc), spec.secret) from None
        self.validate()

    def validate(self) -> None:
        """Cross-field rules; raise :meth:`error` on a violation."""

    def error(self, option_name: str, reason: str) -> OptionError:
        """An OptionError for the option named ``option_name`` (its Spark name), with its value."""
        for field_name, spec in self.specs().items():
            if spec.name == option_name:
                value = getattr(self, field_name)
                shown = render(value) if isinstance(value, bool) else value  # as written: 'true', not True
                return OptionError(self.source_name, spec.name, shown, reason, spec.secret)
        return OptionError(self.source_name, option_name, None, reason)

    def to_options(self) -> dict[str, str]:
        """Render back to Spark string options (only values that differ from the defaults)."""
        out: dict[str, str] = {}
        for f in dataclasses.fields(self):
            spec = f.metadata.get("option")
            value = getattr(self, f.name)
            if spec is None or value is None or (f.default is not dataclasses.MISSING and value == f.default):
                continue
            out[spec.name] = render(value)
        out.update(getattr(self, "extra", None) or {})
        return out
