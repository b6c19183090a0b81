"""ReturningNodes' policy, against stand-ins for the hosts, pool and delivery (the real take-back,
on simulated hosts with real Monarch workers, is in tests/test_multihost.py): a node that
registered a worker which never answers stays lost, said in one line, and that worker is not
tried again."""

import asyncio
from types import SimpleNamespace

import pytest

from forge_async.handles import returning_nodes
from forge_async.handles.returning_nodes import ReturningNodes

pytestmark = pytest.mark.unit


class SilentWorkerHosts:
    """Node 2 registered a new worker that never answers Monarch's attach."""

    def __init__(self):
        self.asked = 0

    def returned_worker(self, rank: int) -> str | None:
        self.asked += 1
        return "tcp://192.0.2.3:4242" if rank == 2 else None

    async def attach_again(self, rank: int, address: str) -> None:
        await asyncio.Event().wait()


class OneLostGenerator:
    """Generator 0 on node 1 (live), generator 1 on node 2 (lost with it)."""

    lost = {1: "generator 1 (...) failed"}

    def node_of(self, index: int) -> int:
        return index + 1

    def on_node(self, node: int) -> list[int]:
        return [node - 1]

    async def take_back(self, index: int) -> None:
        raise AssertionError("no generator may be spawned on a node that was not attached")


def test_a_worker_that_never_answers_leaves_its_node_lost_with_one_line(monkeypatch, capsys):
    monkeypatch.setattr(returning_nodes, "ATTACH_TIMEOUT_S", 0.05)
    monkeypatch.setattr(returning_nodes, "WATCH_S", 0.01)
    hosts, generators = SilentWorkerHosts(), OneLostGenerator()
    route = SimpleNamespace(receiver_of=[0, 1], receivers_are_generators=False)
    delivery = SimpleNamespace(route=route, lost={1})
    handles = SimpleNamespace(
        procs_file=SimpleNamespace(hosts=hosts), generators=generators, relays=SimpleNamespace(nodes=[1, 2])
    )
    nodes = ReturningNodes(handles, delivery)
    assert nodes.lost_nodes() == [2]

    async def watch_a_while() -> None:
        watcher = asyncio.create_task(nodes.watch())
        await asyncio.sleep(0.5)
        watcher.cancel()

    asyncio.run(watch_a_while())
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "warning: node 2 could not be taken back: TimeoutError its worker at tcp://192.0.2.3:4242 did not "
        "answer within 0s; it stays lost"
    ]
    assert hosts.asked > 2 and delivery.lost == {1} and nodes.lost_nodes() == [2]  # asked again, tried once
