"""Which of a run's generators live: those lost with their node, and the restarts left to the others.

A generator whose proc dies is respawned, up to generator.max_restarts restarts over all of
them; past that the run ends with a GeneratorFailed. One that cannot be respawned (its node
no longer answers) is lost: the run goes on with the others until none is left.
"""

from collections.abc import Awaitable, Callable

from forge_async.handles.generators.failures import GeneratorFailed, GeneratorLost


class GeneratorLives:
    def __init__(self, count: int, max_restarts: int):
        self.count = count
        self.max_restarts = max_restarts
        self.restarts = 0
        self.lost_requests = 0  # completions whose generate call died with its generator
        self.lost: dict[int, str] = {}  # generator -> why it is lost (its node is gone)
        self.losses: list[str] = []  # every loss of the run, the ones taken back too
        # Called with (index, new actor) once a generator is respawned, before its callers retry.
        self.on_replaced: Callable[[int, object], Awaitable[None]] | None = None

    def live(self) -> list[int]:
        """The generators not lost."""
        return [i for i in range(self.count) if i not in self.lost]

    def live_or_fail(self) -> list[int]:
        """The live generators; GeneratorFailed if none is left."""
        live = self.live()
        if not live:
            raise GeneratorFailed(f"no generator is left: {'; '.join(self.lost.values())}")
        return live

    def stand_in(self, index: int) -> int:
        """Generator `index` while it lives, else the live one that takes its work."""
        live = self.live_or_fail()
        return index if index in live else live[index % len(live)]

    def raise_if_lost(self, index: int) -> None:
        if index in self.lost:
            raise GeneratorLost(self.lost[index])

    def take_restart(self, failed: str, err: Exception) -> None:
        """Count a restart of the generator `failed` names (it failed with `err`); GeneratorFailed
        once they are used up."""
        if self.restarts >= self.max_restarts:
            raise GeneratorFailed(
                f"{failed} and generator.max_restarts={self.max_restarts} restarts are used up: {err}"
            )
        self.restarts += 1

    def lose(self, index: int, loss: str) -> None:
        """Generator `index` is lost (`loss` names it and says why): no more calls go to it;
        GeneratorFailed if it was the last."""
        self.lost[index] = loss
        self.losses.append(loss)
        if not self.live():
            raise GeneratorFailed(loss)
        print(f"{loss}; the run goes on with generators {self.live()}", flush=True)

    def taken_back(self, index: int) -> None:
        """Generator `index`, lost with its node, is spawned there again: calls go to it as before."""
        del self.lost[index]
