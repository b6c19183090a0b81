"""A config key is a dataclass field made with `key(...)`: its default, what it means, what it
accepts and whether a resumed run may change it live there, and nowhere else.

The YAML presets hold only what they change; docs/configuration.md's tables are written from
these fields (forge_async/cli/config_reference.py); the keys a resume may override are those marked
`resumable` (forge_async/controller/resume.py).
"""

import copy
import dataclasses
import typing
from collections.abc import Iterator
from typing import Any

HELP, ACCEPTS, RESUMABLE = "help", "accepts", "resumable"


def key(default: Any, *, help: str, accepts: str = "", resumable: bool = False) -> Any:
    """A config field: `default` (a list or mapping is copied for each instance), `help` (its
    meaning), `accepts` (the values it takes, where neither its type nor its choices say it) and
    `resumable` (a resumed run may override it: it does not change the experiment)."""
    metadata = {HELP: help, ACCEPTS: accepts, RESUMABLE: resumable}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass(frozen=True)
class Key:
    """One key of a schema: its dotted name (a list's items as `name[i]`), field and type."""

    name: str
    field: dataclasses.Field
    hint: Any

    @property
    def default(self) -> Any:
        if self.field.default is not dataclasses.MISSING:
            return self.field.default
        factory = self.field.default_factory
        if factory is dataclasses.MISSING:
            raise TypeError(f"config key {self.name} has no default")
        return factory()

    @property
    def help(self) -> str:
        return self.field.metadata.get(HELP, "")

    @property
    def accepts(self) -> str:
        return self.field.metadata.get(ACCEPTS, "")

    @property
    def resumable(self) -> bool:
        return self.field.metadata.get(RESUMABLE, False)


def keys(schema: type, prefix: str = "") -> Iterator[Key]:
    """Every key of the dataclass `schema`, in field order: a section's keys in its place, a list
    of sections as the list's key, then its items' keys (`scorers`, `scorers[i].kind`, ...)."""
    hints = typing.get_type_hints(schema)
    for field in dataclasses.fields(schema):
        name, hint = f"{prefix}{field.name}", hints[field.name]
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            yield from keys(hint, f"{name}.")
            continue
        yield Key(name, field, hint)
        item = typing.get_args(hint)[0] if typing.get_origin(hint) is list else None
        if isinstance(item, type) and dataclasses.is_dataclass(item):
            yield from keys(item, f"{name}[i].")


def resumable_keys(schema: type) -> tuple[str, ...]:
    """The keys of `schema` a resumed run may override."""
    return tuple(k.name for k in keys(schema) if k.resumable)
