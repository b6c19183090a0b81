"""docs/configuration.md's key tables, written from the config fields (forge_async/config/keys.py).

    python -m forge_async.cli.config_reference          # rewrite the tables in docs/configuration.md
    python -m forge_async.cli.config_reference --check  # exit 1 if they differ from the fields

Each table sits between `<!-- keys: SELECTORS -->` and `<!-- /keys -->`: the keys a selector
names (`steps`; `model`: every `model.*` key; `scorers`: the list and its items' keys), one row
each, in field order. Every key of GRPOConfig is in exactly one table. The keys a resume may
override are listed between `<!-- resumable -->` and `<!-- /resumable -->`. The prose around
the markers is the doc's own.
"""

import dataclasses
import re
import sys
import typing
from pathlib import Path

from forge_async.config.choices import choices, nullable
from forge_async.config.keys import Key, keys
from forge_async.controller.config import GRPOConfig
from forge_async.process.interpreter import python

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
TABLE = re.compile(r"(<!-- keys: (?P<selectors>[^>]*?) -->\n).*?(?=<!-- /keys -->)", re.S)
RESUMABLE = re.compile(r"(<!-- resumable -->\n).*?(?=<!-- /resumable -->)", re.S)
HEADER = "| key | default | accepts | meaning |\n|---|---|---|---|\n"


def selected(key: str, selectors: list[str]) -> bool:
    return any(key == s or key.startswith((f"{s}.", f"{s}[")) for s in selectors)


def table(schema_keys: list[Key], selectors: list[str]) -> str:
    rows = [
        (f"`{k.name}`", default_text(k.default), accepts_text(k), k.help)
        for k in schema_keys
        if selected(k.name, selectors)
    ]
    return HEADER + "".join("| " + " | ".join(cell.replace("|", r"\|") for cell in row) + " |\n" for row in rows)


def default_text(value: typing.Any) -> str:
    """A number, true/false or null as it is; text, lists and mappings as code."""
    if value is None or isinstance(value, (bool, int, float)):
        return flow(value)
    return f"`{flow(value)}`"


def flow(value: typing.Any) -> str:
    """`value` as YAML's flow style writes it; a section by its first field and those that differ
    from their defaults (`{kind: reference_kl, coef: 0.02}`)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str) and value in ("", "null", "true", "false") or _numeric(value):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(flow(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {flow(v)}" for k, v in value.items()) + "}"
    if dataclasses.is_dataclass(value):
        first, *rest = dataclasses.fields(value)
        shown = [first] + [f for f in rest if getattr(value, f.name) != _field_default(f)]
        return flow({f.name: getattr(value, f.name) for f in shown})
    return str(value)


def _numeric(value: typing.Any) -> bool:
    """A string YAML would read as a number."""
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return isinstance(value, str)


def _field_default(field: dataclasses.Field) -> typing.Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    raise TypeError(f"{field.name}: a config key without a default")


def accepts_text(key: Key) -> str:
    """What the key accepts: as its field says, else its choices, else its type's values."""
    if key.accepts:
        return key.accepts
    hint, or_null = key.hint, ", or null" if nullable(key.hint) else ""
    if (allowed := choices(hint)) is not None:
        return ", ".join(f"`{c}`" for c in allowed) + or_null
    if typing.get_origin(hint) is list:
        item = typing.get_args(hint)[0]
        if (allowed := choices(item)) is not None:
            return "a list of " + ", ".join(f"`{c}`" for c in allowed)
        return "a list" + or_null
    kind = next(a for a in typing.get_args(hint) if a is not type(None)) if or_null else hint
    names = {bool: "true, false", int: "an integer", float: "a number", str: "text", dict: "a mapping"}
    return names.get(typing.get_origin(kind) or kind, "") + or_null


def resumable_text(schema_keys: list[Key]) -> str:
    names = ", ".join(f"`{k.name}`" for k in schema_keys if k.resumable)
    return f"On resume only {names} may be overridden; any other override fails naming the key.\n"


def render(doc: str, schema: type = GRPOConfig) -> str:
    """`doc` with its tables and resumable list written from `schema`'s fields."""
    schema_keys = list(keys(schema))
    claimed = [k.name for m in TABLE.finditer(doc) for k in schema_keys if selected(k.name, m["selectors"].split())]
    if missing := [k.name for k in schema_keys if k.name not in claimed]:
        raise ValueError(f"keys in no table of {DOC.name}: {', '.join(missing)}")
    if twice := sorted({name for name in claimed if claimed.count(name) > 1}):
        raise ValueError(f"keys in more than one table of {DOC.name}: {', '.join(twice)}")
    doc = TABLE.sub(lambda m: m[1] + table(schema_keys, m["selectors"].split()), doc)
    return RESUMABLE.sub(lambda m: m[1] + resumable_text(schema_keys), doc)


def main() -> None:
    doc = DOC.read_text()
    written = render(doc)
    if "--check" in sys.argv[1:]:
        if written != doc:
            sys.exit(f"{DOC} is not what the config fields write: {python()} -m forge_async.cli.config_reference")
        return
    DOC.write_text(written)


if __name__ == "__main__":
    main()
