"""The schema Hydra composes a run's config against, and the shapes its overrides must have.

Hydra composes in struct mode: a key the schema does not list is refused unless the override
adds it (`+key=...`). A free-form mapping, a field typed `dict[...]` (env.textarena.game_kwargs,
a reasoning-gym dataset's `config`), lists no keys, so `env.textarena.game_kwargs={size: 3}`
would be refused: `open_mappings` leaves those nodes open (and lists, whose items may hold
one). As for any mapping in Hydra, the override is merged into the mapping the config has.

A list given where the schema has a mapping, a mapping where it has a list, or a plain value
for either, fails inside Hydra with a merge error that names neither shape ("Cannot merge
DictConfig with ListConfig"): `check_override_shapes` names the shape the key takes first.
"""

import dataclasses
import types
import typing

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import OverrideParseException
from omegaconf import DictConfig, ListConfig, OmegaConf

from forge_async.config.keys import keys
from forge_async.errors import ConfigError


def open_mappings(schema: type) -> DictConfig:
    """`schema`'s structured config, every free-form mapping in it open to keys of the user's."""
    node = OmegaConf.structured(schema)
    _declared_defaults(node, schema)
    _open_mappings(node)
    return node


def _declared_defaults(node: DictConfig, schema: type) -> None:
    """Each key declared null, null. OmegaConf builds a section by calling its dataclass, whose
    `__post_init__` may resolve a null from other keys (model.tiny.max_seq_len from the tokenizer):
    resolved there, the value would follow the defaults, not the composed config."""
    for key in keys(schema):
        if "[i]" not in key.name and key.field.default is None:
            OmegaConf.update(node, key.name, None, merge=False)


def _open_mappings(node: DictConfig) -> None:
    """Opens the free-form mappings under `node`, and its lists: the items a config or an
    override puts in a list inherit the list's flag, so that their free-form mappings are open
    too (`task.reasoning_gym.datasets.0.config={...}`), while their own keys are still those of
    their dataclass."""
    for child in node.values():
        if isinstance(child, ListConfig) or OmegaConf.get_type(child) is dict:
            OmegaConf.set_struct(child, False)
        elif isinstance(child, DictConfig):
            _open_mappings(child)


def check_override_shapes(schema: type, args: list[str]) -> None:
    """A ConfigError naming the first command-line override whose value is not of the shape its
    key takes (a list, a mapping, a section). Anything else is left to Hydra."""
    parser = OverridesParser.create()
    for arg in args:
        if arg.startswith("-") or "=" not in arg:  # Hydra's flags (--config-name X, --cfg job, -m)
            continue
        try:
            (override,) = parser.parse_overrides([arg])
        except OverrideParseException:
            continue  # Hydra names it
        if override.is_delete() or override.is_sweep_override():
            continue
        expected = _shape(_declared_type(schema, override.key_or_group))
        given = override.value()
        if expected is None or given is None or _is_interpolation(given):
            continue
        takes, example = expected
        if _kind(given) != takes:
            raise ConfigError(f"{arg}: {_kind(given)} where {takes} is expected: {override.key_or_group}='{example}'")


def _declared_type(schema: type, key: str) -> typing.Any:
    """The type `schema` declares at `key` (dotted; list items by index), None where it has no such key."""
    hint: typing.Any = schema
    for part in key.split("."):
        hint = _without_none(hint)
        if dataclasses.is_dataclass(hint):
            hint = typing.get_type_hints(hint).get(part)
            if hint is None:
                return None
        elif typing.get_origin(hint) is list and part.isdigit():
            hint = typing.get_args(hint)[0]
        else:  # inside a free-form mapping, or a scalar: Hydra's to check
            return None
    return _without_none(hint)


def _without_none(hint: typing.Any) -> typing.Any:
    """X for `X | None`."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        kinds = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return kinds[0] if len(kinds) == 1 else typing.Any
    return hint


def _shape(hint: typing.Any) -> tuple[str, str] | None:
    """(what the key takes, an example of its shape); None for a plain value."""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return "a mapping", _fields(hint)
    if typing.get_origin(hint) is dict:
        return "a mapping", "{key: value, ...}"
    if typing.get_origin(hint) is list:
        (item,) = typing.get_args(hint)
        fields = _fields(item) if isinstance(item, type) and dataclasses.is_dataclass(item) else "..."
        return "a list", f"[{fields}, ...]"
    return None


def _fields(section: type) -> str:
    return "{" + ", ".join(f"{field.name}: ..." for field in dataclasses.fields(section)) + "}"


def _kind(value: typing.Any) -> str:
    return "a mapping" if isinstance(value, dict) else "a list" if isinstance(value, list) else "a plain value"


def _is_interpolation(value: typing.Any) -> bool:
    return isinstance(value, str) and value.startswith("${")
