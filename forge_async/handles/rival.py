"""The rival: a second policy trained in the same run, playing env.seats' `rival` seats (rival.*).

    rival seats' turns --(sent together: TurnBatcher)--> rival generators (rival.generators)
                                                                |  a completion per rival seat
                                                                v
    CHANNEL_DIR/rival <--publish-- rival_trainer <--batch-- rival buffer <--scored-- the rollouts

It has what the trained policy has, of its own: a trainer (proc `rival_trainer`, the trainer's
keys but `rival.lr`) starting from `rival.path` or a tiny model of `rival.seed`; generators (procs
`generator<i>` after the trained policy's and a snapshot's) that read its shared-memory channel
and take each version as it is published, as the trained policy's do; and a buffer (an
EpisodeBuffer here in the controller) that drops samples older than max_policy_age against its
trainer's version. In an async run a learner task beside the run's loop takes a batch
(batch_size) whenever the buffer holds one, trains one step and publishes it; the loop never waits
for it. In a sync run the loop makes the rival's step its own (`learn_in_step`): after each step
of the trained policy, one step on every sample of the rival's seats that step generated, then a
wait until its generators hold the new version, so the rival too trains on-policy.

Rival seats' episodes are scored with the others' (grouped by seat) and handed here by the rollouts
(rollout/multi_turn.py, `add`); admission control counts the trained policy's seats only. A failed
rival trainer ends the run (TrainerFailed), raised at the next rival turn. The rival is not
checkpointed (controller/config.py refuses `resume` with it); the run's end saves its policy as
RUN_DIR/rival_final_model.
"""

import asyncio
import statistics
from collections import Counter
from pathlib import Path

from forge_async.data.buffer import DropCounts, EpisodeBuffer
from forge_async.data.episode import Completion, Episode
from forge_async.errors import TrainerFailed, UserError
from forge_async.generation.config import SamplingConfig
from forge_async.handles.generators.pool import GeneratorPool
from forge_async.handles.meshes import write_tiny_weights_on
from forge_async.handles.procs_file import ProcsFile
from forge_async.handles.spawner import RoleSpawner
from forge_async.handles.trainer import StepResult, TrainerHandle, save_policy
from forge_async.mesh.roles import RIVAL_TRAINER
from forge_async.models.hf_checkpoint import WEIGHTS_FILE, Checkpoint
from forge_async.models.tiny import write_tiny_config
from forge_async.rollout.turn_batcher import TurnBatcher

CHANNEL = "rival"  # its shared-memory channel: this directory under weights.channel_dir
_STOP_S = 5.0  # a step still running when the run ends is left to the trainer's stop after this
_LOAD_S = 60.0  # sync mode: how long its generators may take to load a version it published
_REPORTED = ("is/", "train/entropy", "policy/")  # the trainer's figures its metrics carry


class Rival:
    def __init__(self, config, spawner: RoleSpawner, procs_file: ProcsFile, run_dir: Path):
        """`config`: the run's GRPOConfig; `spawner`: the run's, made the rival's at `start`."""
        self.config = config
        self._spawner, self._procs_file, self._run_dir = spawner, procs_file, run_dir
        self.buffer = EpisodeBuffer(config.max_policy_age, config.buffer_capacity)
        self.trainer: TrainerHandle | None = None  # from `start`
        self.pool: GeneratorPool | None = None
        self.version = 0  # its trainer's
        self.trained = 0  # samples trained on
        self.trained_by_seat: Counter[int | None] = Counter()  # the seats they were played at
        self._episodes: list[Episode] = []  # added since the last `metrics`
        self._added = asyncio.Event()
        self._learning: asyncio.Task | None = None
        self._stopping = False
        self._turns: TurnBatcher | None = None  # from `start`, on its generators
        self.final_model: str | None = None  # RUN_DIR/rival_final_model, once saved at the end
        self.step_metrics: dict[str, float] = {}  # its last step's off-policy figures (rival/is/...)

    @classmethod
    def of_run(cls, config, spawner: RoleSpawner, procs_file: ProcsFile, run_dir: Path) -> "Rival | None":
        """The run's rival, if env.seats has a `rival` seat (config: GRPOConfig's; SFT's has no env)."""
        env = getattr(config, "env", None)
        return None if env is None or "rival" not in env.seats else cls(config, spawner, procs_file, run_dir)

    async def start(self) -> list[float]:
        """Its initial model, then its trainer and generators spawned, and its learner started;
        returns its generators' engine start times."""
        c = self.config
        channel = str(Path(c.weights.channel_dir) / CHANNEL)
        spawner = self._spawner.for_rival(await self._initial_model(), channel, c.rival.lr)
        first = c.generator.count + c.snapshot_generators
        self.trainer = TrainerHandle(spawner, self._procs_file)
        self.pool = GeneratorPool(spawner, self._procs_file, c.rival.generators, c.generator.max_restarts, first)
        self._turns = TurnBatcher(self.pool.generate_soonest, c.env.turn_batch_wait_s)
        _, starts = await asyncio.gather(self.trainer.start(), self.pool.start())
        if c.mode == "async":
            self.learn_beside()
        return starts

    async def _initial_model(self) -> Checkpoint:
        """rival.path (its vocabulary the policy's), or the tiny model of rival.seed written into the
        run dir by the rival trainer's procs."""
        c = self.config
        if c.rival.path is not None:
            checkpoint = Checkpoint.open(c.rival.path)
            vocab = self._spawner.checkpoint.shape.vocab_size
            if checkpoint.shape.vocab_size != vocab:
                raise UserError(
                    f"rival.path={c.rival.path}: vocabulary of {checkpoint.shape.vocab_size} tokens, the "
                    f"policy's has {vocab}; the rival must use the policy's tokenizer"
                )
            return checkpoint
        initial = self._run_dir / "rival_initial_model"
        if not (initial / WEIGHTS_FILE).is_file():
            seed = c.model.tiny.seed + 1 if c.rival.seed is None else c.rival.seed
            hf_config = write_tiny_config(initial, c.model.tiny)
            await write_tiny_weights_on(self._spawner.procs.early(RIVAL_TRAINER), initial, hf_config, seed)
        return Checkpoint.open(initial)

    # Its seats' turns

    async def turn(self, prompt_ids: list[int], sampling: SamplingConfig) -> Completion:
        """One rival seat's turn, sent with the other rival turns asked meanwhile; raises the
        learner's failure first."""
        self.check()
        return await self._turns(prompt_ids, sampling)

    # Its learning

    def add(self, episodes: list[Episode], dropped: DropCounts) -> None:
        """Its seats' scored episodes of one group, and their samples dropped on the way by reason."""
        self.buffer.add(episodes, dropped)
        self._episodes.extend(episodes)
        self._added.set()

    def learn_beside(self) -> None:
        """Start the learner task (its trainer is up)."""
        self._learning = asyncio.create_task(self._learn())

    async def _learn(self) -> None:
        """A step whenever the buffer holds a batch (staler samples dropped first), its version
        published to the rival's channel, where its generators take it."""
        batch_size = self.config.batch_size
        while not self._stopping:
            batch = self.buffer.sample(batch_size, self.version)
            if batch is None:
                self._added.clear()
                await self._added.wait()
                continue
            self._step(await self.trainer.train_and_push(batch, ("shm",)), batch)

    async def learn_in_step(self) -> None:
        """Sync mode: one step on every sample its seats played since the last (each sampled by its
        current version: nothing is stale), published, then waited for until each of its generators
        samples with it (up to _LOAD_S). Nothing to do when its seats never moved."""
        held = self.buffer.stats().size
        batch = self.buffer.sample(held, self.version) if held else None
        if not batch:
            return
        self._step(await self.trainer.train_and_push(batch, ("shm",)), batch)
        if not await self.pool.until_all_hold(self.version, within_s=_LOAD_S):
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
        _STOP_S, then abandoned (its samples counted as in_step)."""
        task = self._learning
        if task is None or self._stopping:
            return
        self._stopping = True
        self._added.set()  # a learner waiting for a batch sees the stop
        await asyncio.wait([task], timeout=_STOP_S)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    # Its figures

    def metrics(self) -> dict[str, float]:
        """The rival's version and samples (generated = trained + dropped + buffered + in a step),
        and the mean reward and won share of its seats' episodes added since the last call."""
        stats = self.buffer.stats()
        episodes, self._episodes = self._episodes, []
        figures = {
            "rival/version": self.version,
            "rival/generated": stats.added,
            "rival/trained": self.trained,
            "rival/dropped_stale": stats.dropped_stale,
            "rival/dropped_other": stats.dropped_other,
            "rival/buffered": stats.size,
            **{f"rival/trained_seat_{seat}": n for seat, n in sorted(self.trained_by_seat.items())},
            **self.step_metrics,
        }
        if episodes:
            figures["rival/reward"] = statistics.fmean(e.reward for e in episodes)
            figures["rival/won_frac"] = statistics.fmean((e.completion.env_reward or 0) > 0 for e in episodes)
        return figures

    async def save_final(self, path: Path) -> None:
        """Its policy, learning stopped first, as a Hugging Face checkpoint at `path` (said in
        summary.json's `rival.final_model`)."""
        await self.close()
        self.final_model = await save_policy(
            self.trainer, path, path.with_name("rival_final_adapter"), "rival's policy"
        )

    async def summary(self) -> dict:
        """summary.json's `rival`: its learning stopped first, its samples accounted for."""
        await self.close()
        stats = self.buffer.stats()
        summary = {
            "version": self.version,
            "generated": stats.added,
            "trained": self.trained,
            "dropped_stale": stats.dropped_stale,
            "dropped_other": stats.dropped_other,
            "dropped_by_reason": stats.dropped_by_reason,
            "left_in_buffer": stats.size,
            "in_step": stats.sampled - self.trained,  # taken for a step the run's end left unfinished
            "final_model": self.final_model,
        }
        accounted = sum(summary[k] for k in ("trained", "dropped_stale", "dropped_other", "left_in_buffer", "in_step"))
        return {**summary, "accounting_ok": accounted == stats.added}

    async def stop(self) -> None:
        await self.close()
        await asyncio.gather(
            *([] if self.trainer is None else [self.trainer.stop()]),
            *([] if self.pool is None else [self.pool.stop()]),
        )
