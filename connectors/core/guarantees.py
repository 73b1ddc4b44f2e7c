"""Flink's DeliveryGuarantee, shared by every sink."""

from __future__ import annotations

import enum

from connectors.core.options import choice


class DeliveryGuarantee(enum.Enum):
    """What a sink promises across failures (Flink's ``DeliveryGuarantee``).

    The option value is the lower-case, dashed spelling: ``none``, ``at-least-once``,
    ``exactly-once``.
    """

    NONE = "none"
    AT_LEAST_ONCE = "at-least-once"
    EXACTLY_ONCE = "exactly-once"

    def __str__(self) -> str:  # rendered by Options.to_options()
        return self.value


_parse_name = choice(*(g.value for g in DeliveryGuarantee))


def parse_guarantee(text: str) -> DeliveryGuarantee:
    """Option parser: ``exactly-once`` (also ``EXACTLY_ONCE``) -> DeliveryGuarantee.EXACTLY_ONCE."""
    return DeliveryGuarantee(_parse_name(text.strip().replace("_", "-")))
