"""The rival's learning: a second policy trained in the same run, from its seats' samples.

    rival seats' completions (rollout/multi_turn.py) --add--> rival buffer --batch--> rival trainer
                                                                                        | publish
    rival seats' turns (envs/seats.py) --turn--> rival generators <--CHANNEL_DIR/rival--+

The rival's procs (trainer, generators) are its handle's (handles/rival.py); this is its loop,
beside the trained policy's (controller/grpo_loop.py), and it keeps what the trained policy's
replay buffer and record keep for it: a buffer (an EpisodeBuffer here in the controller) that
drops samples older than max_policy_age against the rival trainer's version, its version and
the samples trained. In an async run a learner task beside the run's loop takes a batch
(batch_size) whenever the buffer holds one, trains one step and publishes it; the run's loop
never waits for it. In a sync run the run's loop makes the rival's step its own (`learn_in_step`):
after each step of the trained policy, one step on every sample of the rival's seats that step
generated, then a wait until its generators hold the new version, so the rival too trains
on-policy.

It is the rollouts' sink for the rival seats' scored episodes (`add`) and the seats' player
(`turn`, envs/seats.py's ModelPlayer): a failed rival trainer ends the run (TrainerFailed),
raised at the next rival turn. Its samples are accounted as the run's are (data/accounting.py).
"""

import asyncio
import statistics
from collections import Counter

from forge_async.data.accounting import SampleAccount
from forge_async.data.buffer import DropCounts, EpisodeBuffer
from forge_async.data.episode import Completion, Episode
from forge_async.errors import TrainerFailed
from forge_async.generation.config import SamplingConfig
from forge_async.handles.rival import Rival
from forge_async.handles.trainer import StepResult
from forge_async.mesh.run_plan import RivalSpec

_STOP_S = 5.0  # a step still running when the run ends is left to the trainer's stop after this
_LOAD_S = 60.0  # sync mode: how long its generators may take to load a version it published
_REPORTED = ("is/", "train/entropy", "policy/")  # the trainer's figures its metrics carry


class RivalLoop:
    def __init__(self, rival: Rival, spec: RivalSpec):
        """`rival`: the rival's started handle (its trainer and generators up)."""
        self.rival = rival
        self.spec = spec
        self.buffer = EpisodeBuffer(max_policy_age=spec.max_policy_age, capacity=spec.buffer_capacity)
        self.version = 0  # its trainer's
        self.trained = 0  # samples trained on
        self.trained_by_seat: Counter[int | None] = Counter()  # the seats they were played at
        self._episodes: list[Episode] = []  # added since the last `metrics`
        self._added = asyncio.Event()
        self._learning: asyncio.Task | None = None
        self._stopping = False
        self.step_metrics: dict[str, float] = {}  # its last step's off-policy figures (rival/is/...)

    # Its seats' turns (envs/seats.py ModelPlayer)

    async def turn(self, prompt_ids: list[int], sampling: SamplingConfig) -> Completion:
        """One rival seat's turn on its generators; raises the learner's failure first."""
        self.check()
        return await self.rival.turn(prompt_ids, sampling)

    # Its learning

    def add(self, episodes: list[Episode], dropped: DropCounts) -> None:
        """Its seats' scored episodes of one group, and their samples dropped on the way by reason."""
        self.buffer.add(episodes, dropped=dropped)
        self._episodes.extend(episodes)
        self._added.set()

    def learn_beside(self) -> None:
        """Async mode: start the learner task."""
        self._learning = asyncio.create_task(self._learn())

    async def _learn(self) -> None:
        """A step whenever the buffer holds a batch (staler samples dropped first), its version
        published to the rival's channel, where its generators take it."""
        while not self._stopping:
            batch = self.buffer.sample(self.spec.batch_size, trainer_version=self.version)
            if batch is None:
                self._added.clear()
                await self._added.wait()
                continue
            self._step(await self.rival.trainer.train_and_push(batch, ("shm",)), batch)

    async def learn_in_step(self) -> None:
        """Sync mode: one step on every sample its seats played since the last (each sampled by its
        current version: nothing is stale), published, then waited for until each of its generators
        samples with it (up to _LOAD_S). Nothing to do when its seats never moved."""
        held = self.buffer.stats().size
        batch = self.buffer.sample(held, trainer_version=self.version) if held else None
        if not batch:
            return
        self._step(await self.rival.trainer.train_and_push(batch, ("shm",)), batch)
        if not await self.rival.pool.until_all_hold(self.version, within_s=_LOAD_S):
            raise TrainerFailed(
                f"the rival's generators did not take its version {self.version} within {_LOAD_S:.0f} s"
            )

    def _step(self, result: StepResult, batch: list[Episode]) -> None:
        self.version = result.version
        self.trained += len(batch)
        self.trained_by_seat.update(e.completion.seat for e in batch)
        self.step_metrics = {f"rival/{k}": v for k, v in result.metrics.items() if k.startswith(_REPORTED)}

    def check(self) -> None:
        """Raise the learner's failure, as a trainer's: it ends the run."""
        task = self._learning
        if task is None or not task.done() or task.cancelled() or task.exception() is None:
            return
        err = task.exception()
        if isinstance(err, TrainerFailed):
            raise err
        raise TrainerFailed(f"the rival's learner failed: {type(err).__name__}: {err}") from err

    async def close(self) -> None:
        """Stop learning (the run's loop has ended): a step still running is waited for up to
        _STOP_S, then abandoned (its samples counted in flight)."""
        task = self._learning
        if task is None or self._stopping:
            return
        self._stopping = True
        self._added.set()  # a learner waiting for a batch sees the stop
        await asyncio.wait([task], timeout=_STOP_S)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    # Its figures

    def account(self) -> SampleAccount:
        """Its samples: generated = trained + dropped + buffered + taken for a step left unfinished."""
        stats = self.buffer.stats()
        return stats.account(self.trained, in_flight=stats.sampled - self.trained)

    def metrics(self) -> dict[str, float]:
        """The rival's version and samples, and the mean reward and won share of its seats'
        episodes added since the last call."""
        account = self.account()
        episodes, self._episodes = self._episodes, []
        figures = {
            "rival/version": self.version,
            "rival/generated": account.generated,
            "rival/trained": account.trained,
            "rival/dropped_stale": account.dropped_stale,
            "rival/dropped_other": account.dropped_other,
            "rival/buffered": account.left_in_buffer,
            **{f"rival/trained_seat_{seat}": n for seat, n in sorted(self.trained_by_seat.items())},
            **self.step_metrics,
        }
        if episodes:
            figures["rival/reward"] = statistics.fmean(e.reward for e in episodes)
            figures["rival/won_frac"] = statistics.fmean((e.completion.env_reward or 0) > 0 for e in episodes)
        return figures

    async def summary(self) -> dict:
        """summary.json's `rival`: its learning stopped first, its samples accounted for."""
        await self.close()
        account = self.account()
        return {
            "version": self.version,
            "generated": account.generated,
            "trained": account.trained,
            "dropped_stale": account.dropped_stale,
            "dropped_other": account.dropped_other,
            "dropped_by_reason": self.buffer.stats().dropped_by_reason,
            "left_in_buffer": account.left_in_buffer,
            "in_step": account.in_flight,  # taken for a step the run's end left unfinished
            "final_model": self.rival.final_model,
            "accounting_ok": account.balanced,
        }
