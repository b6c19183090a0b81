"""How each published version reaches each generator.

The trainer publishes a version to its *push targets*: its node's shared-memory
channel ("shm"), torchstore, or both. A generator on the trainer's node (shm
transport) reads the channel by itself. Every other generator is served by a
*receiver* that must be told to load each version from torchstore: the weight
relay of its node (shm transport: one network copy per node, written into that
node's channel), or the generator itself (torchstore transport).
"""

from dataclasses import dataclass
from typing import Protocol

from forge_async.config import GRPOConfig


class VersionLoader(Protocol):
    async def load_version(self, index: int, version: int) -> dict: ...


@dataclass(frozen=True)
class Receiver:
    """Member `index` of `loaders` (a generator, or a node's relay): loads a version when told."""

    loaders: VersionLoader
    index: int

    async def load(self, version: int) -> dict:
        return await self.loaders.load_version(self.index, version)


@dataclass(frozen=True)
class WeightRoute:
    receivers: list[Receiver]
    receiver_of: list[int | None]  # generator i's receiver; None: it reads the trainer's channel
    receivers_are_generators: bool  # receiver i is generator i (torchstore transport)
    push_targets: tuple[str, ...]  # where the trainer publishes each version


def relay_nodes(config: GRPOConfig) -> list[int]:
    """The generator nodes that need a weight relay: shm transport, and not the trainer's one node."""
    if config.weights.transport != "shm":
        return []
    trainer_nodes = config.placement.trainer_hosts
    own = set(trainer_nodes) if len(trainer_nodes) == 1 else set()  # one node: its channel
    return sorted({config.placement.generator_host(i) for i in range(config.generator.count)} - own)


def uses_torchstore(config: GRPOConfig, nnodes: int) -> bool:
    """Whether weights may travel through torchstore: its transport, or relays to other nodes."""
    return config.weights.transport == "torchstore" or nnodes > 1


def plan_route(config: GRPOConfig, generators: VersionLoader, relays: VersionLoader) -> WeightRoute:
    count = config.generator.count
    if config.weights.transport == "torchstore":
        return WeightRoute([Receiver(generators, i) for i in range(count)], list(range(count)), True, ("torchstore",))
    nodes = relay_nodes(config)
    receiver_of = [
        nodes.index(node) if (node := config.placement.generator_host(i)) in nodes else None for i in range(count)
    ]
    targets = (("shm",) if None in receiver_of else ()) + (("torchstore",) if nodes else ())
    return WeightRoute([Receiver(relays, j) for j in range(len(nodes))], receiver_of, False, targets)
