"""`load_callable`: a user's "module:function" named in the config, imported once at start.

Tasks (`task.reward_fn`), scorers (`scorers[i].fn`) and environments (`env.name`) all
name code this way.
"""

import importlib
from collections.abc import Callable

from forge_async.errors import UserError


class CallableError(UserError):
    """A "module:function" in the config that cannot be imported, or is not callable."""


def load_callable(spec: str, key: str) -> Callable:
    """The callable `spec` ("module:function") names; a CallableError naming `key` if there is none
    (task.reward_fn, scorers[i].fn, env.name)."""
    module_name, _, attr = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as err:
        raise CallableError(f"{key} {spec!r} cannot be imported: {err}") from err
    if not callable(fn):
        raise CallableError(f"{key} {spec!r} is not callable")
    return fn
