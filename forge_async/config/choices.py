"""Keys whose value is one of a fixed set of strings: typed `Literal[...]`, checked from the annotation.

`check_choices(section, prefix)` checks every such field of a config section in one way: one
ConfigError naming the key, the value and the choices, e.g.
`trainer.lr_schedule='step': one of constant, linear, cosine, sqrt`.

OmegaConf (which Hydra composes with) knows no `Literal`: to it a choice is the string it is,
so a schema reads each `Literal[...]` as `str` (`_resolve_forward` below), and the choice is
checked by the section's `__post_init__`, as every other value.
"""

import dataclasses
import types
import typing

from omegaconf import _utils as omegaconf_utils

from forge_async.errors import ConfigError


def choices(hint: typing.Any) -> tuple[str, ...] | None:
    """The strings a `Literal[...]` (or `Literal[...] | None`) hint allows; None for any other hint."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        inner = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return choices(inner[0]) if len(inner) == 1 else None
    if typing.get_origin(hint) is typing.Literal:
        return typing.get_args(hint)
    return None


def nullable(hint: typing.Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint)


def check_choice(key: str, value: str | None, allowed: tuple[str, ...], *, or_null: bool = False) -> None:
    """Raise ConfigError unless `value` is one of `allowed` (or None, where `or_null`)."""
    if value in allowed or (value is None and or_null):
        return
    raise ConfigError(f"{key}={value!r}: one of {', '.join(allowed)}" + (", or null" if or_null else ""))


def check_choices(section: typing.Any, prefix: str) -> None:
    """Check every `Literal` field of the dataclass `section` (a list of them item by item);
    `prefix` is the section's key (`trainer`, `scorers[0]`; "" at the top level)."""
    hints = typing.get_type_hints(type(section))
    for field in dataclasses.fields(section):
        hint, value = hints[field.name], getattr(section, field.name)
        key = f"{prefix}.{field.name}" if prefix else field.name
        if typing.get_origin(hint) is list and (item_choices := choices(typing.get_args(hint)[0])):
            for item in value:
                check_choice(key, item, item_choices)
        elif (allowed := choices(hint)) is not None:
            check_choice(key, value, allowed, or_null=nullable(hint))


_resolve_forward = omegaconf_utils._resolve_forward


def _literal_as_str(type_: typing.Any, module: str) -> typing.Any:
    return str if typing.get_origin(type_) is typing.Literal else _resolve_forward(type_, module)


omegaconf_utils._resolve_forward = _literal_as_str
