"""WeightRelay: brings each published version to a node other than the trainer's, once.

The trainer puts a version into torchstore; the relay on a generator node
fetches it (one network copy for the whole node) and writes it into that node's
shared-memory channel, where every generator on the node picks it up by itself
between engine steps, exactly as on the trainer's own node.
"""

import time

from monarch.actor import endpoint

from forge_async.actors.proc_actor import ProcActor
from forge_async.weights import scratch
from forge_async.weights.shared_memory import SharedMemoryChannel


class WeightRelay(ProcActor):
    def __init__(self, channel_dir: str):
        self.channel = SharedMemoryChannel(scratch.claim(channel_dir))

    @endpoint
    async def load_version(self, version: int) -> dict[str, float]:
        from forge_async.weights import store  # imported as the proc starts (launch/procs.py, PRELOAD)

        start = time.perf_counter()
        state_dict = await store.get_policy(version)
        fetched = time.perf_counter()
        self.channel.write(version, state_dict)
        end = time.perf_counter()
        return {"version": version, "fetch_ms": (fetched - start) * 1e3, "load_ms": (end - fetched) * 1e3}

    @endpoint
    async def remove_channel(self) -> None:
        self.channel.remove()
