"""Weight relays: one on each generator node that cannot read the trainer's own
shared-memory channel. Each brings a version to its node once and writes it into that
node's channel (actors/weight_relay.py), fed by the weight sender on the trainer's
node over a gloo pair (`weights.cross_host=gloo`, actors/weight_sender.py) or from
torchstore. Over gloo, nothing is called per version: the sender sends each version as
the trainer publishes it and reports its arrival on one port, which `load_version` waits on.

A relay or sender whose proc dies ends the run with a GeneratorFailed: the generators
of the node(s) it serves would never get another version; unless the relay's node is
gone (`load_version` returns ReceiverLost: its generators are lost with it, handles/
generators/, and the run goes on without them). A link that fails mid-version
is not a proc failure: `load_version` returns LinkFailed (delivery reports it and tries
again with a fresh pair).
"""

import asyncio
import re
from typing import Any

from monarch.actor import Channel, ProcMesh

from forge_async.handles.generators import GeneratorFailed
from forge_async.handles.handle import RoleHandle
from forge_async.handles.procs_file import ProcsFile
from forge_async.mesh.supervision import STOP_TIMEOUT_S, within
from forge_async.mesh import roles
from forge_async.handles.spawner import RoleSpawner
from forge_async.mesh.reply_port import ReplyPort, answered
from forge_async.weights.outcomes import LinkFailed, LoadOutcome, Loaded, ReceiverLost, Sent


class _ServingGenerators(RoleHandle):
    """The weight sender or a weight relay: if its proc dies, the generators it serves would
    never get another version (GeneratorFailed)."""

    async def _failed(self, err: Exception, called: Any) -> None:
        raise GeneratorFailed(
            f"the {self.role.kind.value.replace('_', ' ')} ({self.located()}) failed: {err}"
        ) from None


class WeightSender(_ServingGenerators):
    def __init__(self, spawner: RoleSpawner, procs_file: ProcsFile):
        super().__init__(spawner, procs_file, roles.WEIGHT_SENDER)

    async def _spawn(self) -> tuple[ProcMesh, Any]:
        return await self.spawner.weight_sender()

    async def rendezvous(self) -> Any:
        return await self.actor.rendezvous.call_one()

    async def open_pair(self, node: int, attempt: int, reports: Any) -> LinkFailed | None:
        return await self._call(lambda: self.actor.open_pair.call_one(node, attempt, reports))

    async def reported(self, report: asyncio.Future) -> Sent | LinkFailed:
        """`report`, awaited while the sender's proc is watched (a dead sender reports nothing)."""
        return await self._call(lambda: answered(report, alive=self.actor.where))


class WeightRelay(_ServingGenerators):
    def __init__(self, spawner: RoleSpawner, procs_file: ProcsFile, node: int):
        super().__init__(spawner, procs_file, roles.weight_relay(node))
        self.node = node
        self._replies = ReplyPort()  # torchstore, a call a version: answered on one port (mesh/reply_port.py)

    async def _spawn(self) -> tuple[ProcMesh, Any]:
        return await self.spawner.weight_relay(self.node)

    async def join(self, point: Any, timeout_s: float) -> None:
        await self.actor.join.call_one(point, timeout_s)

    async def load_version(self, version: int) -> LoadOutcome:
        """torchstore: `version` loaded into its node's channel."""
        return await self._call(
            lambda: self._replies.call_one(self.actor.load_version, version, alive=self.actor.where)
        )

    async def open_pair(self, attempt: int) -> LinkFailed | None:
        return await self._call(lambda: self.actor.open_pair.call_one(attempt))

    async def remove_channel(self) -> None:
        """Its node keeps its shared-memory channel until told to remove it."""
        try:
            await within(self.actor.remove_channel.call_one(), STOP_TIMEOUT_S)
        except Exception:
            pass


class WeightRelays:
    def __init__(self, spawner: RoleSpawner, procs_file: ProcsFile, nodes: list[int]):
        self.spawner = spawner
        self.procs_file = procs_file
        self.nodes = nodes  # relay j serves node nodes[j]
        self.gloo = bool(nodes) and spawner.plan.weights.cross_host == "gloo"
        self._relays = [WeightRelay(spawner, procs_file, node) for node in nodes]
        self._sender = WeightSender(spawner, procs_file) if self.gloo else None
        self._point: Any = None  # the sender's rendezvous, where relays join
        self._attempts = [0] * len(nodes)  # pairs opened for relay j
        self._paired = [False] * len(nodes)
        self._reports: Any = None  # gloo: the port the sender reports each version's arrival to
        self._reader: asyncio.Task | None = None
        self._arrived: list[Sent | LinkFailed | None] = [None] * len(nodes)  # the newest report of relay j's pair
        self._waiting: list[tuple[int, asyncio.Future] | None] = [None] * len(nodes)  # (version, its future)

    @property
    def sender(self) -> WeightSender:
        """The weight sender (weights.cross_host=gloo)."""
        if self._sender is None:
            raise RuntimeError("the weight sender is asked for, but weights do not cross hosts over gloo here")
        return self._sender

    async def start(self) -> None:
        if self.gloo:
            await self.sender.start()
            self._point = await self.sender.rendezvous()
            self._reports, receiver = Channel.open()
            self._reader = asyncio.create_task(self._read_reports(receiver))
        await asyncio.gather(*(self.spawn(j) for j in range(len(self.nodes))))

    async def spawn(self, index: int) -> None:
        """Relay `index` on its node, joined to the sender's rendezvous (gloo); again when its
        node comes back after it was lost (handles/returning_nodes.py)."""
        relay = self._relays[index]
        await relay.start()
        if self.gloo:
            await relay.join(self._point, self.spawner.plan.weights.link_timeout_s)
            self._paired[index] = False  # a new relay: a new pair

    async def load_version(self, index: int, version: int) -> LoadOutcome:
        """Bring relay `index`'s node the newest version (gloo: the sender's newest, at least
        `version`; torchstore: `version`) into its channel: Loaded, LinkFailed, or ReceiverLost
        (the relay died with its node)."""
        try:
            return await self._load_version(index, version)
        except GeneratorFailed:
            relay = self._relays[index]
            if self.procs_file.reachable(relay.role):
                raise
            return ReceiverLost(f"the weight relay ({relay.located()}) is lost with its node")

    async def _load_version(self, index: int, version: int) -> LoadOutcome:
        if not self.gloo:
            return await self._relays[index].load_version(version)
        if not self._paired[index] and (failed := await self._open_pair(index)) is not None:
            return self._link_error(index, failed.why)
        report = await self._arrival(index, version)
        if isinstance(
            report, LinkFailed
        ):  # the relay's end of the pair ends with it; a dead relay shows at the next open
            self._paired[index] = False
            return self._link_error(index, report.why)
        return Loaded(report.version)  # the relay has it in its channel (weights/link.py)

    async def _arrival(self, index: int, version: int) -> Sent | LinkFailed:
        """The sender's report of `version` or a newer one in relay `index`'s channel, or of its pair's
        failure; the sender's proc is watched meanwhile (a dead sender reports nothing)."""
        report = self._arrived[index]
        if report is not None and _answers(report, version):
            return report
        future = asyncio.get_running_loop().create_future()
        self._waiting[index] = (version, future)
        try:
            return await self.sender.reported(future)
        finally:
            self._waiting[index] = None

    async def _read_reports(self, receiver) -> None:
        """Each report of the sender's pairs (actors/weight_sender.py), to whoever waits for it."""
        while True:
            node, attempt, report = await receiver.recv()
            index = self.nodes.index(node)
            if attempt != self._attempts[index]:  # a replaced pair's
                continue
            self._arrived[index] = report
            waiting = self._waiting[index]
            if waiting is not None and not waiting[1].done() and _answers(report, waiting[0]):
                waiting[1].set_result(report)

    async def _open_pair(self, index: int) -> LinkFailed | None:
        self._attempts[index] += 1
        self._arrived[index] = None
        node, attempt = self.nodes[index], self._attempts[index]
        opened = await asyncio.gather(
            self.sender.open_pair(node, attempt, self._reports),
            self._relays[index].open_pair(attempt),
        )
        failures = [o for o in opened if o is not None]
        self._paired[index] = not failures
        return failures[0] if failures else None

    def _link_error(self, index: int, error: str) -> LinkFailed:
        where = self._relays[index].located()
        return LinkFailed(f"a version to the weight relay ({where}) did not arrive: {gloo_reason(error)}")

    async def stop(self) -> None:
        """Each reachable relay removes its node's channel, then every relay proc (and the sender's) stops."""
        if self._reader is not None:
            self._reader.cancel()
        reachable = [relay for relay in self._relays if self.procs_file.reachable(relay.role)]
        await asyncio.gather(*(relay.remove_channel() for relay in reachable))
        await asyncio.gather(*(relay.stop() for relay in reachable), *([self._sender.stop()] if self._sender else []))


def _answers(report: Sent | LinkFailed, version: int) -> bool:
    """Whether a sender's report answers a wait for `version`: it failed, or brought that one or newer."""
    return isinstance(report, LinkFailed) or report.version >= version


def gloo_reason(error: str) -> str:
    """What went wrong, from a gloo error: "[.../pair.cc:537] Read error [ADDR]:PORT: Connection
    reset by peer. This is typically caused by ..." -> "Read error [ADDR]:PORT: Connection reset by peer"."""
    line = re.sub(r"^\[[^\]]*\] ", "", error.strip().splitlines()[-1])
    return line.split(". ")[0]
