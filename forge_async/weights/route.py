"""How each published version reaches each generator.

The trainer publishes a version to its *push targets*: its node's shared-memory
channel ("shm"), torchstore, or both. A generator on the trainer's node (shm
transport) reads the channel by itself. Every other generator is served by a
*receiver* that must be told to load each version: the weight relay of its node
(shm transport: one network copy per node, written into that node's channel),
which the weight sender feeds from the trainer's channel (`weights.cross_host=gloo`)
or which fetches from torchstore; or the generator itself (torchstore transport).
"""

from dataclasses import dataclass
from typing import Protocol

from forge_async.weights.config import WeightsConfig
from forge_async.weights.outcomes import LoadOutcome


class VersionLoader(Protocol):
    async def load_version(self, index: int, version: int) -> LoadOutcome: ...


@dataclass(frozen=True)
class Receiver:
    """Member `index` of `loaders` (a generator, or a node's relay): loads a version when told."""

    loaders: VersionLoader
    index: int

    async def load(self, version: int) -> LoadOutcome:
        return await self.loaders.load_version(self.index, version)


@dataclass(frozen=True)
class WeightRoute:
    receivers: list[Receiver]
    receiver_of: list[int | None]  # generator i's receiver; None: it reads the trainer's channel
    receivers_are_generators: bool  # receiver i is generator i (torchstore transport)
    push_targets: tuple[str, ...]  # where the trainer publishes each version

    @property
    def through_store(self) -> bool:
        """Whether receivers load from torchstore (old versions are then deleted from it)."""
        return "torchstore" in self.push_targets


@dataclass(frozen=True)
class Layout:
    """Where the trainer and the trained policy's generators run, as node ranks: what a route is
    planned from (`RunPlan.layout()`)."""

    trainer_hosts: tuple[int, ...]
    generator_hosts: tuple[int, ...]  # by generator index


def relay_nodes(weights: WeightsConfig, layout: Layout) -> list[int]:
    """The generator nodes that need a weight relay: shm transport, and not the trainer's one node."""
    if weights.transport != "shm":
        return []
    trainer_nodes = layout.trainer_hosts
    own = set(trainer_nodes) if len(trainer_nodes) == 1 else set()  # one node: its channel
    return sorted(set(layout.generator_hosts) - own)


def uses_torchstore(weights: WeightsConfig, layout: Layout) -> bool:
    """Whether weights travel through torchstore: its transport, or relays fed from it."""
    return (
        weights.transport == "torchstore" or bool(relay_nodes(weights, layout)) and weights.cross_host == "torchstore"
    )


def plan_route(weights: WeightsConfig, layout: Layout, generators: VersionLoader, relays: VersionLoader) -> WeightRoute:
    count = len(layout.generator_hosts)
    if weights.transport == "torchstore":
        return WeightRoute([Receiver(generators, i) for i in range(count)], list(range(count)), True, ("torchstore",))
    nodes = relay_nodes(weights, layout)
    receiver_of = [nodes.index(node) if node in nodes else None for node in layout.generator_hosts]
    targets: tuple[str, ...]
    if weights.cross_host == "gloo":
        targets = ("shm",)  # the weight sender reads the trainer's channel
    else:
        targets = (("shm",) if None in receiver_of else ()) + (("torchstore",) if nodes else ())
    return WeightRoute([Receiver(relays, j) for j in range(len(nodes))], receiver_of, False, targets)
