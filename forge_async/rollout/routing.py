"""Which generator each of a rollout worker's calls goes to (`rollout_routing`).

- least_outstanding (default): the live generator that would finish the call first, asked
  anew for every call: its samples in flight plus the call's, at the pace it has kept so far
  (handles/generators/pace.py), among those whose weights are recent enough for admission
  control to admit the call at all (one whose weights lag too far, behind a slow link, is
  passed over rather than waited for; one that only waits for room in the queue is not).
  A slow generator gets a call only when the fast ones are that much deeper in work; a
  lost one (its host died) gets none.
- round_robin: worker w stays on generator w % count, or on the live generator standing
  in for it once that one is lost.

Admission control judges a call by the version of the generator it will go to, so it
asks for the choice (`choose`) at each of its checks, and the call goes to the choice it
was admitted by (rollout/admission.py).
"""

from typing import Protocol

from forge_async.handles.generators import GeneratorPool
from forge_async.rollout.admission import AdmissionControl
from forge_async.rollout.types import Choice


class GeneratorVersions(Protocol):
    """Where each generator's weights stand (weights/delivery.py: WeightDelivery)."""

    def generator_version(self, index: int) -> int:
        """The oldest version generator `index` samples with from now on."""
        ...


class WorkerRouting:
    def __init__(
        self,
        pool: GeneratorPool,
        worker: int,
        routing: str,
        call_size: int,
        versions: GeneratorVersions,
        admission: AdmissionControl,
        least_admitted: int,
    ):
        """`call_size`: the samples of one of the worker's calls; `least_admitted`: the fewest
        samples admission may admit for it (whether a generator's weights are recent enough is
        judged for that many)."""
        self.pool = pool
        self.worker = worker
        self.routing = routing
        self.call_size = call_size
        self.versions = versions
        self.admission = admission
        self.least_admitted = least_admitted

    def choose(self) -> Choice:
        """The generator the worker's next call goes to, with its version."""
        index = self._pick()
        return Choice(self.pool[index], self.versions.generator_version(index))

    def _pick(self) -> int:
        if self.routing == "round_robin":
            return self.pool.stand_in(self.worker % self.pool.count)
        soonest = self.pool.by_finish_time(self.call_size)
        return next((i for i in soonest if self._recent_enough(i)), soonest[0])

    def _recent_enough(self, index: int) -> bool:
        return self.admission.recent_enough(self.least_admitted, self.versions.generator_version(index))
