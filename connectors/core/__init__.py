"""What every connector needs: options, Arrow conversion, commit/idempotence helpers, retries."""

from connectors.core.options import OptionError, Options, option

__all__ = ["OptionError", "Options", "option"]
