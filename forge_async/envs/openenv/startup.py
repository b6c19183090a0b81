"""An OpenEnv server, read and checked once it is up, before the first episode:

    its actions     the form a turn takes as one (schema.py), said in one line
    its opening     one probe session's first observation, as the model would see it: one that
                    the tokenizer cannot read, or that fills the model's context, stops the run
                    here, naming its size, the limit and the key to raise (every episode would
                    otherwise be dropped for it)

The probe resets with an empty prompt: a server whose opening shows the task's prompt shows
nothing then (the task's prompts fit the context by construction); one whose reset needs the
task's prompt (and fails without it) is not probed.
"""

import asyncio
from dataclasses import replace

from forge_async.observability.console import since_launch
from forge_async.envs.environment import SeatTurn
from forge_async.envs.openenv.actions import ToolCallAction
from forge_async.envs.openenv.client import OpenEnvSessions
from forge_async.envs.openenv.schema import action_form
from forge_async.envs.remote import EnvironmentFailed
from forge_async.envs.runner import EpisodeDropped
from forge_async.errors import ConfigError
from forge_async.tasks.task import Prompt, TaskError, prompt_token_ids

_PROBE = Prompt(token_ids=[], answer="", text="", meta={})


async def ready_sessions(sessions: OpenEnvSessions, tokenizer, context: int | None) -> OpenEnvSessions:
    """`sessions` with the server's action form; its opening checked against `context` (the
    model's) when the tokenizer and context are given."""
    actions = await asyncio.to_thread(action_form, sessions.url, sessions.config, tokenizer, sessions.timeout_s)
    if isinstance(actions, ToolCallAction):
        check_tool_parser(actions)
    print(f"{since_launch()} OpenEnv actions: {actions.describe()}", flush=True)
    sessions = replace(sessions, actions=actions)
    if tokenizer is not None and context is not None:
        await check_opening(sessions, tokenizer, context)
    return sessions


def check_tool_parser(actions: ToolCallAction) -> None:
    if actions.tokenizer is None:
        raise ConfigError("env.name=openenv: the server's actions are MCP tool calls, read with the model's tokenizer")
    try:
        _ = actions.reader  # an unknown parser fails now, not at the first turn
    except KeyError as err:
        raise ConfigError(f"env.openenv.tool_parser={actions.parser!r}: not a vLLM tool parser ({err})") from None


async def check_opening(sessions: OpenEnvSessions, tokenizer, context: int) -> None:
    """A ConfigError if the server's opening observation cannot be read or leaves no room in `context`."""
    episode = sessions()
    try:
        # asyncio.timeout, not wait_for: Python 3.11's wait_for drops a cancellation (Ctrl-C, SIGTERM at
        # start-up) that arrives as the awaited result does, and the run would go on.
        async with asyncio.timeout(sessions.timeout_s):
            opening = await episode.reset(_PROBE)
            # a multi-player game: what its first seat sees
            seen = opening.observation if isinstance(opening, SeatTurn) else opening
    except (TimeoutError, EpisodeDropped, EnvironmentFailed):
        return  # its first episodes show what is wrong, by reason
    finally:
        await episode.close()
    if seen is None:
        return  # nothing to see: its first episodes drop, by reason
    try:
        size = len(seen if not isinstance(seen, str) else prompt_token_ids(tokenizer, seen))
    except TaskError as err:
        raise ConfigError(f"env.name=openenv: the server's opening observation: {err}") from None
    if size >= context:
        raise ConfigError(
            f"env.name=openenv: the server's opening observation is {size} tokens, and the model's context "
            f"is {context} (it must also hold the model's turns): raise the context, model.tiny.max_seq_len "
            "for the tiny model (the bytes tokenizer's is 512 unless set) or generator.max_model_len up to "
            "the checkpoint's, or show less of the observation (env.openenv.render)"
        )
