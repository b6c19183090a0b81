"""tool_lookup's OpenEnv server (forge_async/envs/servers/tool_lookup_openenv.py), holding a fixed
number of sessions, counting those open at once, and showing what its reset() received.

    one_session              holds 1 session at a time (OpenEnv's default)
    four_sessions            holds 4
    one_session_no_low_keys  holds 1; its reset fails for keys 0-2 (episodes that never start)
    no_sessions              its environments cannot be made (every session fails: FACTORY_ERROR)

With FORGE_TEST_SESSIONS_FILE set, the server writes there the most sessions it held at once
(whenever that grows), and the arguments of every reset it played, one JSON line each.
An observation's `received` field is the JSON of its reset's arguments beyond the prompt's.
"""

import json
import os
import threading
from typing import Any

from forge_async.envs.servers.tool_lookup_openenv import TextObservation, ToolLookupServerEnv, TurnAction
from openenv.core.env_server import create_app

LOG_VARIABLE = "FORGE_TEST_SESSIONS_FILE"
_PROMPT_ARGUMENTS = {"prompt", "meta", "eos_token_id", "episode_id"}

_lock = threading.Lock()
_open, _peak = 0, 0


class ReceivedObservation(TextObservation):
    received: str = ""


class CountedSessionsEnv(ToolLookupServerEnv):
    def __init__(self):
        super().__init__()
        _count(+1)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> ReceivedObservation:
        observation = super().reset(seed, episode_id, **{k: v for k, v in kwargs.items() if k in _PROMPT_ARGUMENTS})
        received = {"seed": seed, **{k: v for k, v in kwargs.items() if k not in _PROMPT_ARGUMENTS}}
        _log({"reset": received})
        return ReceivedObservation(message=observation.message, received=json.dumps(received, sort_keys=True))

    def close(self) -> None:
        _count(-1)


class NoLowKeysEnv(CountedSessionsEnv):
    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> ReceivedObservation:
        key = (kwargs.get("meta") or {}).get("key")
        if key < 3:
            raise RuntimeError(f"no table for key {key}")
        return super().reset(seed, episode_id, **kwargs)


class UnmadeEnv(CountedSessionsEnv):
    def __init__(self):
        raise RuntimeError("no license for this environment")


def _count(change: int) -> None:
    global _open, _peak
    with _lock:
        _open += change
        if _open > _peak:
            _peak = _open
            _log({"peak": _peak})


def _log(record: dict) -> None:
    path = os.environ.get(LOG_VARIABLE)
    if path:
        with open(path, "a") as log:
            log.write(json.dumps(record) + "\n")


def _app(environment: type[CountedSessionsEnv], sessions: int):
    return create_app(
        environment, TurnAction, ReceivedObservation, env_name="counted_sessions", max_concurrent_envs=sessions
    )


one_session = _app(CountedSessionsEnv, 1)
four_sessions = _app(CountedSessionsEnv, 4)
one_session_no_low_keys = _app(NoLowKeysEnv, 1)
no_sessions = _app(UnmadeEnv, 4)
