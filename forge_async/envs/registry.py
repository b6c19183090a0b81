"""What `task.name` and `env.name` name: the task a run's prompts come from, and the
environments its episodes are played in.

`task.name`: a task of tasks/ (tasks/registry.py), or `tool_lookup`, a built-in game that deals
its own prompts (envs/games/). `env.name`:

    module:callable        your own Environment class, or a function returning one
    openenv                an OpenEnv environment server (env.openenv.*; envs/openenv/)
    textarena:GAME         a TextArena game, of one player or of env.seats' (env.textarena.*; envs/textarena.py)
    nim                    a built-in two-player game, played by env.seats (envs/games/)
    agent:module:function  your async agent program, driving each episode through an OpenAI
                           client (env.agent.*; envs/agent/)

`open_environments` yields the factory of one environment per episode, with whatever
the source runs for the length of the run (an OpenEnv server process, the agents'
endpoint) stopped after, however the run ends. `check_environment_name` fails at start on a name that cannot work.
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from forge_async.config.callables import load_callable
from forge_async.envs.agent.config import AGENT_PREFIX
from forge_async.envs.config import EnvConfig
from forge_async.envs.games import GAME_TASKS, GAMES, check_game_seats
from forge_async.envs.runner import EnvFactory
from forge_async.envs.seats import check_seats
from forge_async.envs.textarena import TEXTARENA, check_game, textarena_environments
from forge_async.tasks.config import TaskConfig
from forge_async.tasks.registry import TASKS
from forge_async.tasks.task import Task, TaskError

BUILT_IN_TASKS = {**TASKS, **GAME_TASKS}  # task.name -> its builder


def build_task(config: TaskConfig, tokenizer, max_prompt_tokens: int) -> Task:
    """The task `config` names, every prompt checked to fit in `max_prompt_tokens`.

    `max_prompt_tokens` is the context length minus sampling.max_tokens: what a prompt
    may take so that a full-length completion still fits.
    """
    if max_prompt_tokens < 1:
        raise TaskError(f"sampling.max_tokens leaves no room for a prompt in the context ({max_prompt_tokens} tokens)")
    if config.name not in BUILT_IN_TASKS:
        raise TaskError(f"unknown task {config.name!r}; built-in tasks: {', '.join(BUILT_IN_TASKS)}")
    return BUILT_IN_TASKS[config.name](config, tokenizer, max_prompt_tokens)


def check_environment_name(config: EnvConfig) -> None:
    """A CallableError (or ConfigError) naming env.name if it cannot make environments, or
    env.seats if a seat cannot be played."""
    check_seats(config.seats)
    name = config.name
    if name is None:  # no environment to make
        return
    if name == "openenv":
        from forge_async.envs.openenv import check_openenv  # openenv: only for env.name=openenv

        check_openenv(config.openenv)
        return
    if name.startswith(AGENT_PREFIX):
        from forge_async.envs.agent.environment import load_agent  # aiohttp and vLLM's schema: only for agents

        load_agent(name)
        return
    if name.startswith(TEXTARENA):
        check_game(name.removeprefix(TEXTARENA), config.textarena, max(len(config.seats), 1))
        return
    if name in GAMES:
        check_game_seats(name, config.seats)
        return
    load_callable(name, "env.name")


@asynccontextmanager
async def open_environments(
    config: EnvConfig, tokenizer, episodes_in_flight: int = 1, run_dir: Path | None = None, context: int | None = None
) -> AsyncIterator[EnvFactory | None]:
    """The factory of env.name's environments (None without env.name), open for the block.
    `episodes_in_flight`: the most the run plays at once (an OpenEnv server's sessions);
    `run_dir`: where a server the run starts writes its log; `context`: the model's, which an
    OpenEnv server's opening observation is checked against."""
    if config.name is None:
        yield None
    elif config.name == "openenv":
        from forge_async.envs.openenv import openenv_environments

        log_dir = None if run_dir is None else run_dir / "logs"
        async with openenv_environments(
            config, tokenizer.eos_token_id, episodes_in_flight, log_dir, tokenizer, context
        ) as sessions:
            yield sessions
    elif config.name.startswith(AGENT_PREFIX):
        from forge_async.envs.agent.environment import agent_environments

        async with agent_environments(config.name, config.agent, tokenizer) as episodes:
            yield episodes
    elif config.name.startswith(TEXTARENA):
        game = config.name.removeprefix(TEXTARENA)
        async with textarena_environments(game, config.textarena, max(len(config.seats), 1)) as factory:
            yield factory
    elif config.name in GAMES:
        yield GAMES[config.name]
    else:
        yield load_callable(config.name, "env.name")
