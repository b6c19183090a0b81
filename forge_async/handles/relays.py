"""Weight relays: one on each generator node that cannot read the trainer's own
shared-memory channel. Each takes a version from torchstore once for its node and
writes it into that node's channel (actors/weight_relay.py).

A relay whose proc dies ends the run with a GeneratorFailed: the generators of
its node would never get another version.
"""

import asyncio

from forge_async.handles.generators import GeneratorFailed
from forge_async.handles.procs_file import ProcsFile, located
from forge_async.handles.supervision import STOP_TIMEOUT_S, stop_quietly, supervised, within
from forge_async.launch import roles
from forge_async.launch.spawner import RoleSpawner


class WeightRelays:
    def __init__(self, spawner: RoleSpawner, procs_file: ProcsFile, nodes: list[int]):
        self.spawner = spawner
        self.procs_file = procs_file
        self.nodes = nodes  # relay j serves node nodes[j]
        self._procs: list = []
        self._relays: list = []

    async def start(self) -> None:
        for node in self.nodes:
            procs, relay = await self.spawner.weight_relay(node)
            self.procs_file.record(roles.weight_relay(node), await relay.where.call_one())
            self._procs.append(procs)
            self._relays.append(relay)

    async def load_version(self, index: int, version: int) -> dict:
        """Relay `index` fetches `version` and writes it into its node's channel."""
        role = roles.weight_relay(self.nodes[index])

        async def failed(err: Exception) -> None:
            raise GeneratorFailed(f"the weight relay ({located(self.procs_file.where[str(role)])}) failed: {err}") from None

        return await supervised(lambda: self._relays[index].load_version.call_one(version), failed)

    async def stop(self) -> None:
        """Each reachable relay removes its node's channel, then every relay proc stops."""
        reachable = [j for j, node in enumerate(self.nodes) if self.procs_file.reachable(roles.weight_relay(node))]
        await asyncio.gather(*(self._remove_channel(j) for j in reachable))
        await asyncio.gather(*(stop_quietly(self._procs[j]) for j in reachable))

    async def _remove_channel(self, index: int) -> None:
        """A relay's node keeps its shared-memory channel until told to remove it."""
        try:
            await within(self._relays[index].remove_channel.call_one(), STOP_TIMEOUT_S)
        except Exception:
            pass
