"""env.openenv.reset_kwargs: arguments merged into an OpenEnv server's reset(), from the config
and from the task's prompt.

    reset_kwargs: {dataset_name: chain_sum, size: 100, seed: "{seed}", difficulty: "{meta.level}"}

A string that is one reference, "{seed}", takes that field of the prompt as it is (a number
stays a number); references within longer text are put in as text ("level-{meta.level}").
Fields: seed (the episode's seed, drawn from the prompt), text, answer, and meta.KEY[.KEY...]
(the prompt's metadata). Values nested in mappings and lists are filled in the same way. A
reference to a field the prompt lacks ends the run at the first reset, naming the key.
"""

import re
from typing import Any

from forge_async.envs.remote import EnvironmentFailed
from forge_async.errors import ConfigError
from forge_async.tasks.task import Prompt

_REFERENCE = re.compile(r"\{([A-Za-z_][\w.]*)\}")
_FIELDS = ("seed", "text", "answer")
_KEY = "env.openenv.reset_kwargs"


def check_reset_kwargs(reset_kwargs: dict[str, Any]) -> None:
    """At start: each reference names a field a prompt has (seed, text, answer, meta.KEY)."""
    if not isinstance(reset_kwargs, dict):
        raise ConfigError(f"{_KEY}={reset_kwargs!r}: must be a mapping, e.g. {_KEY}={{size: 100, seed: '{{seed}}'}}")
    for path, text in _strings(reset_kwargs, _KEY):
        for name in _REFERENCE.findall(text):
            root = name.split(".")[0]
            if root not in _FIELDS and not (root == "meta" and "." in name):
                raise ConfigError(
                    f"{path}={text!r}: {{{name}}} is no field of a prompt; "
                    "a reference is {seed}, {text}, {answer} or {meta.KEY}"
                )


def reset_arguments(reset_kwargs: dict[str, Any], prompt: Prompt, seed: int) -> dict[str, Any]:
    """`reset_kwargs` with its references filled from `prompt` (and the episode's `seed`)."""
    fields = {"seed": seed, "text": prompt.text, "answer": prompt.answer, "meta": prompt.meta}
    return {key: _filled(value, fields, f"{_KEY}.{key}") for key, value in reset_kwargs.items()}


def _filled(value: Any, fields: dict[str, Any], path: str) -> Any:
    if isinstance(value, dict):
        return {k: _filled(v, fields, f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_filled(v, fields, f"{path}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value
    whole = _REFERENCE.fullmatch(value)
    if whole is not None:
        return _field(whole.group(1), fields, path)
    return _REFERENCE.sub(lambda m: str(_field(m.group(1), fields, path)), value)


def _field(name: str, fields: dict[str, Any], path: str) -> Any:
    value: Any = fields
    for part in name.split("."):
        if not isinstance(value, dict) or part not in value:
            has = sorted(value) if isinstance(value, dict) else type(value).__name__
            raise EnvironmentFailed(f"{path}: the task's prompt has no {name} ({part!r} is not among {has})")
        value = value[part]
    return value


def _strings(value: Any, path: str):
    """(path, string) of every string in `value`, however deep."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, f"{path}[{i}]")
