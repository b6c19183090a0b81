"""OpenEnv actions and observations from the server's schema (envs/openenv/schema.py, actions.py,
rendering.py, startup.py): conversions and rendering as units; then real OpenEnv servers under
uvicorn (tests/openenv_servers/): a number game whose action is an integer and whose observation
is structured, and an MCP server of FastMCP tools, their episodes played through
`openenv_environments` and `EnvRunner`; the opening too long for the context stopping at start.
Opt-in: OpenEnv's own echo_env, unmodified (FORGE_OPENENV_REPO=<an OpenEnv checkout>/envs)."""

import asyncio
import copy
import json
import os
import zlib

import pytest

from forge_async.cli.subprocess_run import run_app
from forge_async.generation.config import SamplingConfig
from forge_async.config.callables import CallableError
from forge_async.data.episode import ENV_TOKEN
from forge_async.envs.environment import ModelTurn
from forge_async.envs.config import EnvConfig, OpenEnvConfig
from forge_async.envs.openenv import check_openenv, openenv_environments
from forge_async.envs.openenv.actions import FieldAction, NoAction, field_value, opening
from forge_async.envs.openenv.rendering import ObservationText
from forge_async.envs.openenv.schema import action_form
from forge_async.envs.openenv.startup import check_tool_parser
from forge_async.envs.runner import EnvRunner, EpisodeLimits
from forge_async.errors import ConfigError
from forge_async.models.tokenizer import build_byte_tokenizer, build_digit_tokenizer
from forge_async.tasks.task import Prompt, prompt_token_ids
from tests.support.openenv_server import serve
from tests.support.scripted import ScriptedText

pytestmark = pytest.mark.unit

BYTES = build_byte_tokenizer()
NUMBER_BOARD = "tests.openenv_servers.number_board:app"
MCP_TOOLS = "tests.openenv_servers.mcp_tools:app"
INTEGER = {"type": "integer"}


@pytest.mark.parametrize(
    "text, schema, value",
    [
        ("I guess 7", INTEGER, 7),
        ("between 1 and 9: 4.0", INTEGER, 4),
        ("7.5", INTEGER, None),
        ("seven", INTEGER, None),
        ("-2.5e1", {"type": "number"}, -25.0),
        ("12", {"type": "integer", "minimum": 1, "maximum": 9}, None),
        ("9", {"type": "integer", "minimum": 1, "maximum": 9}, 9),
        ("0.5", {"type": "number", "exclusiveMinimum": 0.5}, None),
        ("Yes, I think so", {"type": "boolean"}, True),
        ("true... no", {"type": "boolean"}, False),
        ("maybe", {"type": "boolean"}, None),
        (" Left ", {"enum": ["left", "right"]}, "left"),
        ("not left but RIGHT.", {"enum": ["left", "right"]}, "right"),
        ("leftover", {"enum": ["left", "right"]}, None),
        ("3", {"enum": [1, 3]}, 3),
        ("  any text  ", {"type": "string"}, "  any text  "),
    ],
)
def test_a_turns_text_converts_to_the_fields_type(text, schema, value):
    assert field_value(text, schema) == value and type(field_value(text, schema)) is type(value)


def test_a_turn_with_no_value_of_the_field_is_no_action():
    action = FieldAction("guess", INTEGER, token_ids_field="ids")
    assert action.action(ModelTurn("it is 5", [1, 2], "stop", 0)) == {"guess": 5, "ids": [1, 2]}
    assert action.action(ModelTurn("no idea", [1], "stop", 0)) == NoAction()


def test_a_structured_observation_shows_its_content_and_leaves_out_bookkeeping():
    render = ObservationText(OpenEnvConfig())
    observation = {
        "done": False, "reward": 0.0, "metadata": {"turn": 1}, "board": [[1, 0], [3, 4]], "message": "2: higher",
        "guesses_left": 2, "legal_moves": [1, 3, 4], "info": {"a": 1}, "hint": None, "notes": ["a", "b"],
    }  # fmt: skip
    assert render(observation) == "board:\n1 0\n3 4\nmessage: 2: higher\nnotes:\na\nb"
    assert render({"question": " What is 2+2? ", "score": None, "dataset_metadata": {"x": 1}}) == "What is 2+2?"


def test_a_message_history_shows_what_is_new_since_the_last_observation():
    render = ObservationText(OpenEnvConfig())
    opening = "[GAME] Guess a number."
    message = {"sender_id": -1, "content": "\n" + opening, "category": "MESSAGE"}
    textarena = {"prompt": "GuessTheNumber-v0", "messages": [message]}
    assert render(textarena) == opening
    textarena["messages"][0]["content"] += "\n[Player] [5]\n[GAME] higher."  # TextArena's history in one message
    assert render(textarena) == "[Player] [5]\n[GAME] higher."
    # A server that sends each turn's messages alone: each is shown, a repeated one too.
    render = ObservationText(OpenEnvConfig())
    for messages, shown in [(["a"], "a"), (["b", "c"], "b\nc"), (["b", "c"], "b\nc"), (["b", "c", "d"], "d")]:
        assert render({"messages": [{"content": m} for m in messages]}) == shown


def test_a_tool_result_shows_its_text_or_its_error():
    render = ObservationText(OpenEnvConfig())
    result = {"content": [{"type": "text", "text": "5"}], "structured_content": {"result": 5}, "is_error": False}
    assert render({"tool_name": "add", "result": result, "error": None}) == "5"
    error = {"error_type": "tool_not_found", "message": "Unknown tool: 'x'"}
    assert render({"tool_name": "x", "result": None, "error": error}) == "tool_not_found: Unknown tool: 'x'"


def board_text(observation: dict) -> str:
    """A render= function: the board's cells in one line."""
    return "".join(str(cell) for row in observation["board"] for cell in row)


def say_guess(text: str, schema: dict) -> dict | None:
    """An action= function: the first digit of the text, as GuessAction's guess."""
    digits = [c for c in text if c.isdigit()]
    return {"guess": int(digits[0])} if digits and "guess" in schema["properties"] else None


@pytest.mark.procs
def test_render_and_action_functions_replace_the_defaults_and_must_exist(number_board):
    render = ObservationText(OpenEnvConfig(render=f"{__name__}:board_text"))
    assert render({"board": [[1, 2], [3, 0]], "message": "m"}) == "1230"
    config = OpenEnvConfig(url=number_board.url, action=f"{__name__}:say_guess")
    custom = action_form(number_board.url, config, None, 10)
    assert custom.action(ModelTurn("4 or 7", [], "stop", 0)) == {"guess": 4}
    assert custom.action(ModelTurn("none", [], "stop", 0)) == NoAction()
    with pytest.raises(CallableError, match=r"env.openenv.render 'tests.nowhere:render' cannot be imported"):
        check_openenv(OpenEnvConfig(url=number_board.url, render="tests.nowhere:render"))
    with pytest.raises(ConfigError, match="env.openenv.render and env.openenv.observation_field are both set"):
        EnvConfig(name="openenv", openenv=OpenEnvConfig(app=NUMBER_BOARD, render="a:b", observation_field="message"))


@pytest.mark.procs
def test_the_action_field_comes_from_the_schema_and_a_wrong_one_is_named_at_start(number_board):
    form = action_form(number_board.url, OpenEnvConfig(url=number_board.url), None, 10)
    assert (form.field, form.schema["type"]) == ("guess", "integer")
    assert form.describe() == "the turn's text as guess (integer)"
    with pytest.raises(ConfigError, match=r"action_field=move: .*no such field; its fields: metadata, guess"):
        check_openenv(OpenEnvConfig(url=number_board.url, action_field="move"))
    with pytest.raises(ConfigError, match=r"action_field=metadata: a object field"):
        action_form(number_board.url, OpenEnvConfig(url=number_board.url, action_field="metadata"), None, 10)


@pytest.fixture(scope="module")
def number_board(tmp_path_factory):
    process = serve(NUMBER_BOARD, tmp_path_factory.mktemp("number_board"))
    yield process
    process.stop()


@pytest.fixture(scope="module")
def mcp_tools(tmp_path_factory):
    process = serve(MCP_TOOLS, tmp_path_factory.mktemp("mcp_tools"))
    yield process
    process.stop()


def play(url: str, prompt: Prompt, turns: list[str], tokenizer=BYTES, context: int = 512):
    """One episode on the server at `url`, the model saying `turns`, through openenv_environments
    and EnvRunner as a run plays it."""
    config = EnvConfig(name="openenv", max_turns=len(turns), openenv=OpenEnvConfig(url=url))

    async def episode():
        async with openenv_environments(config, tokenizer.eos_token_id, 1, None, tokenizer, context) as sessions:
            limits = EpisodeLimits(len(turns), 400, context)
            runner = EnvRunner(sessions, tokenizer, SamplingConfig(max_tokens=60), limits, timeout_s=30.0)
            return await runner.play(prompt, ScriptedText(turns))

    return asyncio.run(episode())


def observations(completion) -> str:
    return BYTES.decode([t for t, v in zip(completion.token_ids, completion.versions) if v == ENV_TOKEN])


def seeded_prompt(target: int) -> Prompt:
    """A prompt whose episode seed (drawn from it) hides `target` on the number board."""
    for n in range(1000):
        prompt = Prompt(token_ids=[], answer="", text=f"game {n}", meta={})
        if _board_target(prompt) == target:
            return prompt
    raise AssertionError("no prompt hides it")


def _board_target(prompt: Prompt) -> int:
    return zlib.crc32(json.dumps([prompt.text, prompt.meta], sort_keys=True, default=str).encode()) % 9 + 1


@pytest.mark.procs
def test_integer_actions_and_a_board_observation_over_a_real_server(number_board):
    target = 6
    done = play(number_board.url, seeded_prompt(target), ["I guess 2", "then 8", f"it is {target}"])
    assert (done.turns, done.env_reward, done.finish_reason) == (3, 1.0, "done")
    opening = "board:\n1 2 3\n4 5 6\n7 8 9\nmessage: Find the hidden number: answer with one number."
    assert BYTES.decode(done.prompt_ids) == f"<bos><|user|>{opening}<|assistant|>"
    shown = observations(done)
    assert "<|tool|>board:\n1 0 3\n4 5 6\n7 8 9\nmessage: 2: higher<|assistant|>" in shown
    assert "board:\n1 0 3\n4 5 6\n7 0 9\nmessage: 8: lower" in shown
    assert "guesses_left" not in shown and "legal_moves" not in shown and "Find the hidden" not in shown
    # A turn with no number is the game's invalid move: the episode ends there, unrewarded, nothing sent.
    invalid = play(number_board.url, seeded_prompt(target), ["a guess", "6"])
    assert (invalid.turns, invalid.env_reward, invalid.finish_reason, invalid.answer) == (1, 0.0, "done", None)


@pytest.mark.procs
def test_mcp_tool_calls_over_a_real_server(mcp_tools):
    prompt = Prompt(token_ids=[], answer="5", text="What is 2 + 3? Use the tools.", meta={})
    call = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
    unknown = '<tool_call>\n{"name": "multiply", "arguments": {"a": 2}}\n</tool_call>'
    done = play(mcp_tools.url, prompt, [call, unknown, "5"])
    # The reset shows nothing: the prompt opens; the tool results are the observations; a turn
    # with no tool call is the answer the task's reward scores.
    assert BYTES.decode(done.prompt_ids) == "<bos><|user|>What is 2 + 3? Use the tools.<|assistant|>"
    assert observations(done) == "<|tool|>5<|assistant|><|tool|>tool_not_found: Unknown tool: 'multiply'<|assistant|>"
    assert (done.turns, done.answer, done.finish_reason) == (3, "5", "done")


@pytest.mark.procs
def test_the_tools_are_listed_at_start(mcp_tools):
    check_openenv(OpenEnvConfig(url=mcp_tools.url))  # before any proc starts: no tokenizer yet
    with pytest.raises(ConfigError, match=r"env.openenv.tool_parser='nope': not a vLLM tool parser"):
        check_tool_parser(action_form(mcp_tools.url, OpenEnvConfig(url=mcp_tools.url, tool_parser="nope"), BYTES, 10))
    form = action_form(mcp_tools.url, OpenEnvConfig(url=mcp_tools.url), BYTES, 10)
    assert form.describe() == "MCP tool calls read by the hermes parser (tools: add, shout)"
    call = ModelTurn('<tool_call>{"name": "shout", "arguments": {"text": "a"}}</tool_call>', [], "stop", 0)
    assert form.action(call) == {"type": "call_tool", "tool_name": "shout", "arguments": {"text": "a"}}
    assert form.action(ModelTurn("just text", [], "stop", 0)) == NoAction(answer="just text")


@pytest.mark.procs
def test_an_mcp_episode_opens_with_the_tools_in_the_chat_template(mcp_tools):
    tokenizer = copy.deepcopy(BYTES)  # a template that shows the tools, as a chat model's does
    tokenizer.chat_template = (
        "{% for t in tools %}{{ '<|system|>' ~ t['function']['name'] }}{% endfor %}"
        "{% for m in messages %}{{ '<|' ~ m['role'] ~ '|>' ~ m['content'] }}{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    form = action_form(mcp_tools.url, OpenEnvConfig(url=mcp_tools.url), tokenizer, 10)
    assert tokenizer.decode(opening(form, "hi")) == "<|system|>add<|system|>shout<|user|>hi<|assistant|>"
    # A template that has no place for tools: the text as any prompt.
    without = action_form(mcp_tools.url, OpenEnvConfig(url=mcp_tools.url), BYTES, 10)
    assert opening(without, "hi") == prompt_token_ids(BYTES, "hi")


@pytest.mark.procs
def test_an_opening_too_long_for_the_context_stops_at_start_naming_the_key(number_board):
    prompt = seeded_prompt(1)
    too_long = r"opening observation is \d+ tokens, and the model's context is 40 .*model.tiny.max_seq_len"
    with pytest.raises(ConfigError, match=too_long):
        play(number_board.url, prompt, ["1"], context=40)
    with pytest.raises(ConfigError, match=r"opening observation: the tokenizer has no tokens .*tokenizer=bytes"):
        play(number_board.url, prompt, ["1"], tokenizer=build_digit_tokenizer())


@pytest.mark.e2e
def test_a_run_whose_opening_does_not_fit_stops_at_start_in_one_line(tmp_path):
    # The board and its message fill 64 tokens; the message alone would fit (a field picked by
    # default would not show the board).
    run = run_app(
        tmp_path / "run", "env.name=openenv", f"env.openenv.app={NUMBER_BOARD}", "model.tiny.tokenizer=bytes",
        "model.tiny.max_seq_len=64", "steps=1",
    )  # fmt: skip
    assert run.returncode == 2, run.output
    assert "OpenEnv actions: the turn's text as guess (integer)" in run.output
    assert "the model's context is 64" in run.output and "Traceback" not in run.output
    assert "step    1" not in run.output


OPENENV_REPO = os.environ.get("FORGE_OPENENV_REPO")


@pytest.mark.procs
@pytest.mark.skipif(OPENENV_REPO is None, reason="FORGE_OPENENV_REPO: an OpenEnv checkout's envs/ directory")
def test_openenv_echo_env_unmodified(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", f"{OPENENV_REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    server = serve("echo_env.server.app:app", tmp_path)
    try:
        call = '<tool_call>{"name": "echo_with_length", "arguments": {"message": "hi"}}</tool_call>'
        done = play(server.url, Prompt(token_ids=[], answer="", text="Say hi.", meta={}), [call, "done"])
    finally:
        server.stop()
    assert observations(done) == '<|tool|>{"message":"hi","length":2}<|assistant|>' and done.answer == "done"


@pytest.mark.procs
@pytest.mark.skipif(OPENENV_REPO is None, reason="FORGE_OPENENV_REPO: an OpenEnv checkout's envs/ directory")
def test_openenv_textarena_env_unmodified(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", f"{OPENENV_REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setenv("TEXTARENA_ENV_ID", "GuessTheNumber-v0")
    monkeypatch.setenv("TEXTARENA_DOWNLOAD_NLTK", "0")
    server = serve("textarena_env.server.app:app", tmp_path)
    try:
        done = play(server.url, Prompt(token_ids=[], answer="", text="", meta={}), ["[10]", "[15]"], context=1024)
    finally:
        server.stop()
    assert BYTES.decode(done.prompt_ids).startswith("<bos><|user|>[GAME] You are Player 0. You are playing Guess")
    # Each turn: the game's reply to it, not its history again.
    replies = observations(done).split("<|tool|>")[1:]
    assert replies[0].startswith("[Player] [10]\n[GAME] ") and "You are Player 0" not in observations(done)
