"""An OpenEnv observation (a dict) as the text the model sees, by default.

    a tool result (MCP)   its text content, or its error ("tool_not_found: Unknown tool: 'x'")
    a message list        (objects with a `content` text: a TextArena game's `messages`) the
                          observation is its messages the model has not seen: the new ones, and
                          what a message that grows with the game (TextArena's history) added
    otherwise             each field that carries content, in the schema's order: a text, a list
                          of texts as lines, a board (a list of lists) as rows of cells; named
                          ("board: ...") when there are several

Left out: the bookkeeping every observation has (done, reward, metadata), and numbers, booleans,
mappings and lists of numbers (scores, player ids, info). One renderer serves one episode (it
remembers the messages shown). env.openenv.observation_field shows one field as it is instead;
env.openenv.render=module:function(observation) -> text renders it your way.
"""

from forge_async.config.callables import load_callable
from forge_async.envs.environment import Observation
from forge_async.envs.config import OpenEnvConfig
from forge_async.envs.runner import EpisodeDropped

_BOOKKEEPING = {"done", "reward", "metadata"}


class ObservationText:
    """One episode's observations as text (or a field's token ids: observation_field)."""

    def __init__(self, config: OpenEnvConfig):
        self.field = config.observation_field
        self.render = None if config.render is None else load_callable(config.render, "env.openenv.render")
        self._messages_shown: list[str] = []

    def __call__(self, observation: dict) -> Observation:
        if self.field is not None:
            return _field(observation, self.field)
        if self.render is not None:
            return self.render(observation)
        if "tool_name" in observation:
            return _tool_result(observation)
        messages = _message_contents(observation)
        if messages is not None:
            return "\n".join(self._unseen(messages))
        return _content_fields(observation)

    def _unseen(self, contents: list[str]) -> list[str]:
        """The messages of `contents` not shown before: past those shown last time (a history the
        server resends), the new part of a last one that grew; all of them otherwise."""
        shown, self._messages_shown = self._messages_shown, contents
        if not shown or len(contents) < len(shown) or contents[: len(shown) - 1] != shown[:-1]:
            return contents
        grown, last = contents[len(shown) - 1], shown[-1]
        if grown == last and len(contents) > len(shown):
            return contents[len(shown) :]
        if grown != last and grown.startswith(last):
            return [grown[len(last) :].strip()] + contents[len(shown) :]
        return contents


def _field(observation: dict, field: str) -> Observation:
    if field not in observation:
        raise EpisodeDropped(
            "openenv_error",
            f"the OpenEnv observation has no field {field!r} (env.openenv.observation_field); "
            f"it has {sorted(observation)}",
        )
    return observation[field]


def _tool_result(observation: dict) -> str:
    error = observation.get("error")
    if error:
        return f"{error.get('error_type', 'error')}: {error.get('message', '')}"
    result = observation.get("result")
    if isinstance(result, dict) and isinstance(result.get("content"), list):
        return "\n".join(part.get("text", "") for part in result["content"] if part.get("type") == "text")
    return "" if result is None else str(result)


def _message_contents(observation: dict) -> list[str] | None:
    """The texts of the observation's message list (its first field that is one); None: none."""
    for name, value in observation.items():
        if name in _BOOKKEEPING or not isinstance(value, list) or not value:
            continue
        if all(isinstance(item, dict) and isinstance(item.get("content"), str) for item in value):
            return [item["content"].strip() for item in value]
    return None


def _content_fields(observation: dict) -> str:
    shown = {name: _text(value) for name, value in observation.items() if name not in _BOOKKEEPING}
    shown = {name: text for name, text in shown.items() if text}
    if len(shown) == 1:
        return next(iter(shown.values()))
    return "\n".join(f"{name}:\n{text}" if "\n" in text else f"{name}: {text}" for name, text in shown.items())


def _text(value) -> str:
    """A field's value as text; "" for one that carries no content."""
    if isinstance(value, str):
        return value.strip()
    if not isinstance(value, list) or not value:
        return ""
    if all(isinstance(item, str) for item in value):
        return "\n".join(value)
    if all(isinstance(row, list) for row in value):
        return "\n".join(" ".join(str(cell) for cell in row) for row in value)
    return ""
