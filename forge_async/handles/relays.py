"""Weight relays: one on each generator node that cannot read the trainer's own
shared-memory channel. Each brings a version to its node once and writes it into that
node's channel (actors/weight_relay.py), fed by the weight sender on the trainer's
node over a gloo pair (`weights.cross_host=gloo`, actors/weight_sender.py) or from
torchstore. Over gloo, nothing is called per version: the sender sends each version as
the trainer publishes it and reports its arrival on one port, which `load_version` waits on.

A relay or sender whose proc dies ends the run with a GeneratorFailed: the generators
of the node(s) it serves would never get another version; unless the relay's node is
gone (`load_version` returns ReceiverLost: its generators are lost with it, handles/
generators.py, and the run goes on without them). A link that fails mid-version
is not a proc failure: `load_version` returns LinkFailed (delivery reports it and tries
again with a fresh pair).
"""

import asyncio
import re

from monarch.actor import Channel

from forge_async.handles.generators import GeneratorFailed
from forge_async.handles.procs_file import ProcsFile, located
from forge_async.mesh.supervision import STOP_TIMEOUT_S, stop_quietly, supervised, within
from forge_async.mesh import roles
from forge_async.mesh.roles import Role
from forge_async.handles.spawner import RoleSpawner
from forge_async.mesh.reply_port import ReplyPort, answered
from forge_async.weights.outcomes import LinkFailed, LoadOutcome, Loaded, ReceiverLost, Sent


class WeightRelays:
    def __init__(self, spawner: RoleSpawner, procs_file: ProcsFile, nodes: list[int]):
        self.spawner = spawner
        self.procs_file = procs_file
        self.nodes = nodes  # relay j serves node nodes[j]
        self.gloo = bool(nodes) and spawner.config.weights.cross_host == "gloo"
        self._procs: list = [None] * len(nodes)
        self._relays: list = [None] * len(nodes)
        self._sender = None
        self._sender_procs = None
        self._point = None  # the sender's rendezvous, where relays join
        self._attempts = [0] * len(nodes)  # pairs opened for relay j
        self._paired = [False] * len(nodes)
        self._replies = ReplyPort()  # torchstore, a call a version: answered on one port (mesh/reply_port.py)
        self._reports = None  # gloo: the port the sender reports each version's arrival to
        self._reader: asyncio.Task | None = None
        self._arrived: list[Sent | LinkFailed | None] = [None] * len(nodes)  # the newest report of relay j's pair
        self._waiting: list[tuple[int, asyncio.Future] | None] = [None] * len(nodes)  # (version, its future)

    async def start(self) -> None:
        if self.gloo:
            self._sender_procs, self._sender = await self.spawner.weight_sender()
            self.procs_file.record(roles.WEIGHT_SENDER, await self._sender.where.call_one())
            self._point = await self._sender.rendezvous.call_one()
            self._reports, receiver = Channel.open()
            self._reader = asyncio.create_task(self._read_reports(receiver))
        await asyncio.gather(*(self.spawn(j) for j in range(len(self.nodes))))

    async def spawn(self, index: int) -> None:
        """Relay `index` on its node, joined to the sender's rendezvous (gloo); again when its
        node comes back after it was lost (handles/returning_nodes.py)."""
        node = self.nodes[index]
        self._procs[index], relay = await self.spawner.weight_relay(node)
        self._relays[index] = relay
        self.procs_file.record(roles.weight_relay(node), await relay.where.call_one())
        if self.gloo:
            await relay.join.call_one(self._point, self.spawner.config.weights.link_timeout_s)
            self._paired[index] = False  # a new relay: a new pair

    async def load_version(self, index: int, version: int) -> LoadOutcome:
        """Bring relay `index`'s node the newest version (gloo: the sender's newest, at least
        `version`; torchstore: `version`) into its channel: Loaded, LinkFailed, or ReceiverLost
        (the relay died with its node)."""
        try:
            return await self._load_version(index, version)
        except GeneratorFailed:
            role = roles.weight_relay(self.nodes[index])
            if self.procs_file.reachable(role):
                raise
            return ReceiverLost(f"the weight relay ({located(self.procs_file.where[str(role)])}) is lost with its node")

    async def _load_version(self, index: int, version: int) -> LoadOutcome:
        if not self.gloo:
            relay = self._relays[index]
            return await self._call(roles.weight_relay(self.nodes[index]), lambda: self._replies.call_one(relay.load_version, version, alive=relay.where))
        if not self._paired[index] and (failed := await self._open_pair(index)) is not None:
            return self._link_error(index, failed.why)
        report = await self._call(roles.WEIGHT_SENDER, lambda: self._arrival(index, version))
        if isinstance(report, LinkFailed):  # the relay's end of the pair ends with it; a dead relay shows at the next open
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
            return await answered(future, alive=self._sender.where)
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
            self._call(roles.WEIGHT_SENDER, lambda: self._sender.open_pair.call_one(node, attempt, self._reports)),
            self._call(roles.weight_relay(node), lambda: self._relays[index].open_pair.call_one(attempt)),
        )
        failures = [o for o in opened if o is not None]
        self._paired[index] = not failures
        return failures[0] if failures else None

    def _link_error(self, index: int, error: str) -> LinkFailed:
        where = located(self.procs_file.where[str(roles.weight_relay(self.nodes[index]))])
        return LinkFailed(f"a version to the weight relay ({where}) did not arrive: {gloo_reason(error)}")

    async def _call(self, role: Role, call):
        async def failed(err: Exception) -> None:
            raise GeneratorFailed(f"the {role.kind.value.replace('_', ' ')} ({located(self.procs_file.where[str(role)])}) failed: {err}") from None

        return await supervised(call, failed)

    async def stop(self) -> None:
        """Each reachable relay removes its node's channel, then every relay proc (and the sender's) stops."""
        if self._reader is not None:
            self._reader.cancel()
        reachable = [j for j, node in enumerate(self.nodes) if self.procs_file.reachable(roles.weight_relay(node))]
        await asyncio.gather(*(self._remove_channel(j) for j in reachable))
        await asyncio.gather(*(stop_quietly(self._procs[j]) for j in reachable), stop_quietly(self._sender_procs))

    async def _remove_channel(self, index: int) -> None:
        """A relay's node keeps its shared-memory channel until told to remove it."""
        try:
            await within(self._relays[index].remove_channel.call_one(), STOP_TIMEOUT_S)
        except Exception:
            pass


def _answers(report: Sent | LinkFailed, version: int) -> bool:
    """Whether a sender's report answers a wait for `version`: it failed, or brought that one or newer."""
    return isinstance(report, LinkFailed) or report.version >= version


def gloo_reason(error: str) -> str:
    """What went wrong, from a gloo error: "[.../pair.cc:537] Read error [ADDR]:PORT: Connection
    reset by peer. This is typically caused by ..." -> "Read error [ADDR]:PORT: Connection reset by peer"."""
    line = re.sub(r"^\[[^\]]*\] ", "", error.strip().splitlines()[-1])
    return line.split(". ")[0]
