"""A model turn as an action of an OpenEnv server, in the form its schema gives (schema.py).

    FieldAction     {field: the turn's text in the field's type}: text as it is; an integer or a
                    number: the last number in the text ("I guess 7" -> 7), within the field's
                    bounds (minimum, maximum); a boolean: the last true/false/yes/no; a choice
                    (enum, Literal): the option the text is, or else the one it names last
                    (case ignored)
    ToolCallAction  {type: call_tool, tool_name, arguments}: the turn's first tool call, read by
                    the vLLM tool parser env.openenv.tool_parser, as the agent endpoint reads them;
                    the episode opens with the tools in the chat template (`opening`)
    CustomAction    env.openenv.action=module:function(turn text, action schema) -> the action

A turn that is no action (no number for an integer field, or one out of its bounds; a custom
function's None) is the game's invalid move: the episode ends there with no reward, and is
trained on; nothing is sent.
A turn with no tool call is the model's final answer: the episode ends there, the task's reward
scores it (as an agent program's returned text is).
"""

import json
import math
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from forge_async.config.callables import load_callable
from forge_async.envs.agent.replies import ToolCallReader
from forge_async.envs.environment import ModelTurn, Observation
from forge_async.tasks.task import known_tokens

_TYPES = ("string", "integer", "number", "boolean")
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_BOOLEANS = {"true": True, "yes": True, "false": False, "no": False}


@dataclass(frozen=True)
class NoAction:
    """A turn that is not an action: the episode ends there; `answer`, when given, is scored."""

    answer: str | None = None


def value_type(field_schema: dict) -> str | None:
    """What a turn's text becomes for a field of this JSON schema: "choice", or one of _TYPES;
    None: nothing a text can fill (a list, an object)."""
    if "enum" in field_schema or "const" in field_schema:
        return "choice"
    kind = field_schema.get("type")
    return kind if kind in _TYPES else None


def field_value(text: str, field_schema: dict):
    """`text` as a value of the field; None when it holds none."""
    kind = value_type(field_schema)
    if kind == "string":
        return text
    if kind == "choice":
        return _choice(text, field_schema.get("enum", [field_schema.get("const")]))
    if kind == "boolean":
        said = [_BOOLEANS[word] for word in re.findall(r"[a-z]+", text.lower()) if word in _BOOLEANS]
        return said[-1] if said else None
    numbers = _NUMBER.findall(text)
    if not numbers or not _within(float(numbers[-1]), field_schema):
        return None
    number = float(numbers[-1])
    if kind == "number":
        return number
    return int(number) if number.is_integer() else None


def _within(number: float, field_schema: dict) -> bool:
    """Whether `number` is within the field's bounds (pydantic's ge, gt, le, lt)."""
    return (
        number >= field_schema.get("minimum", -math.inf)
        and number > field_schema.get("exclusiveMinimum", -math.inf)
        and number <= field_schema.get("maximum", math.inf)
        and number < field_schema.get("exclusiveMaximum", math.inf)
    )


def _choice(text: str, options: list):
    """The option `text` is (case ignored), or else the one it names last as a word; None: none."""
    said = text.strip().lower()
    exact = [option for option in options if str(option).lower() == said]
    if exact:
        return exact[0]
    named = [
        (match.start(), option)
        for option in options
        for match in re.finditer(rf"(?<!\w){re.escape(str(option))}(?!\w)", text, re.IGNORECASE)
    ]
    return max(named, key=lambda found: found[0])[1] if named else None


@dataclass(frozen=True)
class FieldAction:
    field: str
    schema: dict  # the field's JSON schema
    token_ids_field: str | None = None  # env.openenv.token_ids_field: the turn's token ids go there too

    def action(self, turn: ModelTurn) -> dict | NoAction:
        value = field_value(turn.text, self.schema)
        if value is None:
            return NoAction()
        action = {self.field: value}
        if self.token_ids_field is not None:
            action[self.token_ids_field] = turn.token_ids
        return action

    def describe(self) -> str:
        kind = value_type(self.schema)
        options = f" of {', '.join(map(str, self.schema.get('enum', [])))}" if kind == "choice" else ""
        return f"the turn's text as {self.field} ({kind}{options})"


@dataclass(frozen=True)
class ToolCallAction:
    tools: tuple[dict, ...]  # the server's MCP tools, as OpenAI tools
    parser: str  # env.openenv.tool_parser
    tokenizer: Any = field(compare=False)  # the model's Hugging Face tokenizer

    def action(self, turn: ModelTurn) -> dict | NoAction:
        _, calls = self.reader.tool_calls(turn.text, self._request)
        if not calls:
            return NoAction(answer=turn.text)
        call = calls[0]["function"]
        return {"type": "call_tool", "tool_name": call["name"], "arguments": json.loads(call["arguments"] or "{}")}

    def opening(self, text: str) -> Observation:
        """The episode's first observation with the tools in it, as the chat template shows a chat
        model the tools it may call (a template without tools shows the text alone)."""
        if not self.tokenizer.chat_template:
            return text
        messages = [{"role": "user", "content": text}]
        ids = self.tokenizer.apply_chat_template(messages, tools=list(self.tools), add_generation_prompt=True)
        return known_tokens(self.tokenizer, list(ids["input_ids"] if hasattr(ids, "keys") else ids), text)

    def describe(self) -> str:
        names = ", ".join(tool["function"]["name"] for tool in self.tools)
        return f"MCP tool calls read by the {self.parser} parser (tools: {names or 'none'})"

    @cached_property
    def reader(self) -> ToolCallReader:
        return ToolCallReader(self.parser, self.tokenizer)

    @cached_property
    def _request(self):
        """The request the parser reads a turn for: it offers the server's tools."""
        from vllm.entrypoints.openai.chat_completion.protocol import (
            ChatCompletionRequest,
        )  # seconds to import: MCP only

        return ChatCompletionRequest(model="policy", messages=[{"role": "user", "content": ""}], tools=list(self.tools))

    def __getstate__(self) -> dict:  # the parser and request are made again where it lands (env.procs)
        return {"tools": self.tools, "parser": self.parser, "tokenizer": self.tokenizer}


@dataclass(frozen=True)
class CustomAction:
    function: str  # env.openenv.action
    schema: dict  # the server's action schema, which the function is given

    def action(self, turn: ModelTurn) -> dict | NoAction:
        action = self._build(turn.text, self.schema)
        return NoAction() if action is None else action

    def describe(self) -> str:
        return f"built by {self.function}"

    @cached_property
    def _build(self):
        """The function, imported once (where the form lands: env.procs)."""
        return load_callable(self.function, "env.openenv.action")

    def __getstate__(self) -> dict:
        return {"function": self.function, "schema": self.schema}


ActionForm = FieldAction | ToolCallAction | CustomAction


def opening(actions: ActionForm | None, observation: Observation) -> Observation:
    """An episode's first observation: with an MCP server's tools when its actions are tool calls
    (and it is text: token ids are the model's input as they are); as it is before they are read."""
    if isinstance(actions, ToolCallAction) and isinstance(observation, str):
        return actions.opening(observation)
    return observation
