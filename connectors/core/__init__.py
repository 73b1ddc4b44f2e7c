"""What every connector needs: options, Arrow conversion, commit/idempotence helpers, retries."""

from connectors.core import worker_gc
from connectors.core.options import OptionError, Options, option

__all__ = ["OptionError", "Options", "option"]

# Every connector's code imports this package first in each Python worker it runs in.
worker_gc.install()
