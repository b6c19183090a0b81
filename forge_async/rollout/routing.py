"""Which generator each of a rollout worker's calls goes to (`rollout_routing`).

- least_outstanding (default): the live generator that would finish the call first, asked
  anew for every call: its samples in flight plus the call's, at the pace it has kept so far
  (handles/generators.py), among those whose weights are recent enough for admission
  control to admit the call at all (one whose weights lag too far, behind a slow link, is
  passed over rather than waited for; one that only waits for room in the queue is not).
  A slow generator gets a call only when the fast ones are that much deeper in work; a
  lost one (its host died) gets none.
- round_robin: worker w stays on generator w % count, or on the live generator standing
  in for it once that one is lost.

Admission control judges a call by the version of the generator it will go to, so the
choice is made inside admission's check (`version`), and the call goes where the last
check pointed (`take`; a fresh choice where admission control is off).
"""

from collections.abc import Callable

from forge_async.handles.generators import GeneratorCalls, GeneratorPool
from forge_async.rollout.types import Generate, Produce


class WorkerRouting:
    def __init__(
        self,
        pool: GeneratorPool,
        worker: int,
        routing: str,
        call_size: int,
        version_of: Callable[[int], int],
        admissible: Callable[[int], bool],
        producer: Callable[[Generate], Produce],
    ):
        """`call_size`: the samples of one of the worker's calls; `version_of(i)`: the oldest
        version generator i samples with from now on; `admissible(version)`: whether weights of
        `version` are recent enough for admission control to admit the call at all;
        `producer(generate)`: the worker's Produce over one generator's calls."""
        self.pool = pool
        self.worker = worker
        self.routing = routing
        self.call_size = call_size
        self.version_of = version_of
        self.admissible = admissible
        self.producer = producer
        self._chosen: int | None = None
        self._producers: dict[int, Produce] = {}  # one per generator: multi-turn batches a worker's turns per producer

    def pick(self) -> int:
        if self.routing == "round_robin":
            return self.pool.stand_in(self.worker % self.pool.count)
        soonest = self.pool.by_finish_time(self.call_size)
        return next((i for i in soonest if self.admissible(self.version_of(i))), soonest[0])

    def version(self) -> int:
        """Choose the generator for the next call; its version (admission's `generator_version`)."""
        self._chosen = self.pick()
        return self.version_of(self._chosen)

    def take(self) -> int:
        """The generator the admitted call goes to: the one admission judged it by, else a fresh choice."""
        chosen, self._chosen = self._chosen, None
        return self.pick() if chosen is None else chosen

    def produce_on(self, index: int) -> Produce:
        if index not in self._producers:
            self._producers[index] = self.producer(GeneratorCalls(self.pool, index))
        return self._producers[index]
