"""Versioned policy weights in torchstore.

Each pushed policy version lives under its own key prefix, `policy/v<version>`,
as a state dict in Hugging Face names (what vLLM loads). Writers may put DTensor
shards (one per trainer rank); readers get full tensors back.

torchstore 0.1.2's Controller mixes sync and async endpoints, which Monarch 0.6
refuses. `AsyncController` re-declares the sync ones as async; spawning it first
under the store's name makes `torchstore.initialize` reuse it.
"""

import re

import torch
import torchstore as ts
from monarch.actor import endpoint, get_or_spawn_controller
from torchstore.controller import Controller

STORE_NAME = "forge_async"
_POLICY_PREFIX = "policy"
_VERSION_KEY = re.compile(rf"^{_POLICY_PREFIX}/v(\d+)/")


class AsyncController(Controller):
    """torchstore's Controller with every endpoint async (Monarch 0.6 forbids mixing)."""

    @endpoint
    async def get_controller_strategy(self, *args, **kwargs):
        return Controller.get_controller_strategy._method(self, *args, **kwargs)

    @endpoint
    async def keys(self, *args, **kwargs):
        return Controller.keys._method(self, *args, **kwargs)

    @endpoint
    async def locate_volumes(self, *args, **kwargs):
        return Controller.locate_volumes._method(self, *args, **kwargs)

    @endpoint
    async def notify_delete(self, *args, **kwargs):
        return Controller.notify_delete._method(self, *args, **kwargs)

    @endpoint
    async def notify_put(self, *args, **kwargs):
        return Controller.notify_put._method(self, *args, **kwargs)


async def start_store(store_name: str = STORE_NAME) -> None:
    """Spawn the store's controller and storage volume (once per process tree)."""
    await get_or_spawn_controller(store_name, AsyncController)
    await ts.initialize(store_name=store_name)


async def stop_store(store_name: str = STORE_NAME) -> None:
    await ts.shutdown(store_name)


def policy_key(version: int) -> str:
    return f"{_POLICY_PREFIX}/v{version}"


async def put_policy(state_dict: dict[str, torch.Tensor], version: int, store_name: str = STORE_NAME) -> None:
    await ts.put_state_dict(state_dict, policy_key(version), store_name=store_name)


async def get_policy(version: int, store_name: str = STORE_NAME) -> dict[str, torch.Tensor]:
    return await ts.get_state_dict(policy_key(version), store_name=store_name)


async def _policy_keys(store_name: str) -> dict[str, int]:
    """Every policy key in the store, with its version.

    torchstore's own prefix filter splits keys on "." (a parameter name's
    separator), so prefixes are matched here instead.
    """
    keys = await (await ts.client(store_name)).keys()
    return {key: int(m.group(1)) for key in keys if (m := _VERSION_KEY.match(key))}


async def stored_versions(store_name: str = STORE_NAME) -> list[int]:
    return sorted(set((await _policy_keys(store_name)).values()))


async def delete_versions_before(version: int, store_name: str = STORE_NAME) -> list[int]:
    """Delete every stored policy version older than `version`; returns the ones deleted."""
    client = await ts.client(store_name)
    doomed = {key: v for key, v in (await _policy_keys(store_name)).items() if v < version}
    for key in doomed:
        await client.delete(key)
    return sorted(set(doomed.values()))
