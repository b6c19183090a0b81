"""What an OpenEnv server publishes about its actions, read once at start: how a model turn
becomes one of its actions (actions.py).

    GET  /schema                             {action: JSON schema, observation: ..., state: ...}
    POST /step {action: {type: list_tools}}  an MCP server's tools (no session needed)

The turn goes to
    env.openenv.action=module:function   that function's action, given the turn's text and the schema;
    an MCP tool call                     the action is CallToolAction ({type: call_tool, ...}): the
                                         turn is parsed by env.openenv.tool_parser, the tools listed;
    one field                            env.openenv.action_field, or else the action's one required
                                         string, number, boolean or choice field, in its type.

Anything that cannot work (no such field, several candidates, a required field the turn cannot
fill) is a ConfigError naming the key to set, before the first episode.
"""

import json
import urllib.error
import urllib.request

from forge_async.envs.config import OpenEnvConfig
from forge_async.envs.openenv.actions import ActionForm, CustomAction, FieldAction, ToolCallAction, value_type
from forge_async.envs.openenv.server_process import http_base
from forge_async.errors import ConfigError

_TOOL_CALL = "call_tool"  # the `type` of OpenEnv's CallToolAction


def action_form(url: str, config: OpenEnvConfig, tokenizer, timeout_s: float) -> ActionForm:
    """The form of `url`'s actions, from the schema it publishes (and its tools, for MCP: read
    with `tokenizer`'s parser; None checks the form alone)."""
    schema = _http(url, "/schema", None, timeout_s)["action"]
    if config.action is not None:
        return CustomAction(config.action, schema)
    if _is_tool_call(schema):
        listed = _http(url, "/step", {"action": {"type": "list_tools"}}, timeout_s)["observation"]["tools"]
        return ToolCallAction(tuple(_openai_tool(tool) for tool in listed), config.tool_parser, tokenizer)
    field = config.action_field or _the_turn_field(url, schema)
    field_schema = _field_schema(url, schema, field)
    _check_filled(schema, field, config)
    return FieldAction(field, field_schema, config.token_ids_field)


def _is_tool_call(schema: dict) -> bool:
    return schema.get("properties", {}).get("type", {}).get("const") == _TOOL_CALL


def _the_turn_field(url: str, schema: dict) -> str:
    """The action's one required field that a turn's text can fill."""
    required = schema.get("required", [])
    fields = [name for name in required if value_type(_resolved(schema, schema["properties"][name])) is not None]
    if len(fields) != 1:
        raise ConfigError(
            f"OpenEnv server {url}: its action ({schema.get('title', 'Action')}) has {len(fields)} required "
            f"text or number fields ({', '.join(fields) or 'none'}; required: {', '.join(required) or 'none'}): "
            "name the one the turn goes to with env.openenv.action_field, or build the action with "
            "env.openenv.action=module:function"
        )
    return fields[0]


def _field_schema(url: str, schema: dict, field: str) -> dict:
    properties = schema.get("properties", {})
    if field not in properties:
        raise ConfigError(
            f"env.openenv.action_field={field}: the action of OpenEnv server {url} "
            f"({schema.get('title', 'Action')}) has no such field; its fields: {', '.join(properties)}"
        )
    resolved = _resolved(schema, properties[field])
    if value_type(resolved) is None:
        raise ConfigError(
            f"env.openenv.action_field={field}: a {resolved.get('type', 'structured')} field of OpenEnv server "
            f"{url}'s action; a turn's text fills text, number, boolean or choice fields "
            "(env.openenv.action=module:function builds any action)"
        )
    return resolved


def _check_filled(schema: dict, field: str, config: OpenEnvConfig) -> None:
    """A ConfigError if the action requires a field the turn does not fill."""
    missing = [name for name in schema.get("required", []) if name not in (field, config.token_ids_field)]
    if missing:
        raise ConfigError(
            f"the OpenEnv server's action ({schema.get('title', 'Action')}) also requires {', '.join(missing)}, "
            f"which a turn does not fill (its text goes to {field}): build the action with "
            "env.openenv.action=module:function"
        )


def _resolved(schema: dict, field: dict) -> dict:
    """`field`'s schema with its reference followed and an optional (anyOf [X, null]) made X."""
    if "$ref" in field:
        return _resolved(schema, schema.get("$defs", {}).get(field["$ref"].rsplit("/", 1)[-1], {}))
    choices = [option for option in field.get("anyOf", []) if option.get("type") != "null"]
    return _resolved(schema, choices[0]) if len(choices) == 1 else field


def _openai_tool(tool: dict) -> dict:
    """An MCP tool as the OpenAI tool the parser's request offers."""
    function = {"name": tool["name"], "description": tool.get("description", ""), "parameters": tool["input_schema"]}
    return {"type": "function", "function": function}


def _http(url: str, path: str, body: dict | None, timeout_s: float) -> dict:
    """GET `path` (POST `body` when given) on the server: its JSON reply; a ConfigError naming it."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(http_base(url) + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as reply:
            return json.load(reply)
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise ConfigError(f"OpenEnv server {url}: {path} did not answer with its JSON ({err})") from None
