"""The GRPO training loop over a run's ready handles, asynchronous or synchronous.

    rollout workers (async: 2+ at once)                    trainer loop (one step at a time)
    ------------------------------------------------       ------------------------------------
    admit -> generate -> score -> buffer.add  ==buffer==>  sample -> train_and_push -> publish
      ^                                                                                  |
      +----- WeightDelivery: each generator on the newest version, between engine steps -+
                                       every k steps: checkpoint; every e steps: evaluation

Stages, what each consumes and produces, and what it waits for:
- admit (rollout/admission.py): a worker's next call of samples; waits until they can be trained
  within max_policy_age of the version its generator samples with; unblocked by a step
  (batch taken, new version), a version reaching that generator, or drops.
- generate (handles/generators/generator.py): prompts -> completions, each token tagged with its
  version; a lost call is made again on the respawned generator.
- score (scoring/tier.py): completions -> episodes with rewards and advantages.
- buffer.add / sample (handles/buffer.py): the replay buffer drops what is too old for the
  trainer's version (counted), and hands out a batch once it holds one; the trainer loop
  waits there, checking its workers and the weight receivers between waits.
- train_and_push (handles/trainer.py): one optimizer step, then the new weights published
  to the route's push targets (weights/route.py).
- publish (weights/delivery.py): receivers (relays, torchstore generators) load the
  version; generators that read the trainer's channel swap to it by themselves.

sync: generate a batch (the prompts that fill one, each prompt's group a sample per policy seat
of each episode), train on all of it, publish, wait for every generator to hold the new weights,
repeat: on-policy steps, the baseline async is measured against.

A run ends after `steps`, or early when `request_stop` is called (Ctrl-C): either way the
step in flight finishes, generation drains into the buffer, and the run checkpoints
(controller/loop.py: what GRPO and SFT runs share). Each has `checkpoint.stop_grace_s`: a
step still in flight after a stop's grace is abandoned, and so are the generate calls
still in flight when the drain's grace runs out (their samples counted lost by admission
control). `run` returns the RunRecord that summary.json is written from.
"""

import asyncio
import time

from forge_async.rollout.admission import AdmissionControl
from forge_async.checkpoint.checkpointer import Checkpointer
from forge_async.controller.config import GRPOConfig
from forge_async.controller.rival_loop import RivalLoop
from forge_async.data.buffer import BufferStats
from forge_async.data.episode import Episode
from forge_async.evaluation.schedule import EvaluationSchedule
from forge_async.handles.buffer import BufferHandle
from forge_async.handles.returning_nodes import taking_back_nodes
from forge_async.handles.run import RunHandles
from forge_async.handles.trainer import StepResult
from forge_async.observability.metrics import MetricsLog, batch_metrics
from forge_async.observability.occupancy_window import OccupancyWindow
from forge_async.rollout.single_turn import Rollouts
from forge_async.rollout.routing import WorkerRouting
from forge_async.rollout.worker import run_worker
from forge_async.observability.record import RunRecord
from forge_async.observability.step_figures import PipelineFigures, TokenRate
from forge_async.observability.span_names import GENERATE_BATCH, STEP, WAIT_FOR_BATCH, WAIT_FOR_WEIGHTS
from forge_async.observability.spans import TRACER
from forge_async.controller.loop import CANCELLED_WITHIN_S, LANE, TrainingLoop
from forge_async.weights.delivery import WeightDelivery

_WORKER_CHECK_S = 0.5  # how often a waiting trainer loop checks its workers are alive


class GRPOLoop(TrainingLoop):
    def __init__(
        self,
        config: GRPOConfig,
        handles: RunHandles,
        rollouts: Rollouts,
        admission: AdmissionControl,
        delivery: WeightDelivery,
        metrics: MetricsLog,
        record: RunRecord,
        checkpointer: Checkpointer | None = None,
        evaluations: EvaluationSchedule | None = None,
        rival: RivalLoop | None = None,
    ):
        """`rollouts`: single-turn, or multi-turn episodes (rollout/multi_turn.py). `evaluations`:
        None, never evaluate. `rival`: a rival seat's learning, beside this loop (async) or a part
        of each of its steps (sync). `record` is updated as the run goes (a resumed run's is restored
        by `run`)."""
        super().__init__(
            config.steps,
            config.checkpoint.every_steps,
            config.checkpoint.stop_grace_s,
            handles,
            delivery,
            metrics,
            record,
            checkpointer,
            evaluations,
        )
        self.config = config
        self.rollouts = rollouts
        self.admission = admission
        self._dropped_seen = 0  # drops admission control has been told of
        self._warned_oversampling = False
        self._occupancy = OccupancyWindow()
        self.rival = rival

    @property
    def replay_buffer(self) -> BufferHandle:
        """The run's replay buffer (a GRPO run's plan always has one; only SFT runs go without)."""
        if self.handles.buffer is None:
            raise RuntimeError("a GRPO run's handles have no replay buffer")
        return self.handles.buffer

    async def _steps(self) -> None:
        """The steps, asynchronous or synchronous; a lost generator node that comes back
        meanwhile is taken back (handles/returning_nodes.py)."""
        self._token_rate = TokenRate(self.rollouts.tokens)
        async with taking_back_nodes(self.handles, self.delivery):
            if self.config.mode == "async":
                await self._run_async()
            else:
                await self._run_sync()

    # The asynchronous loop

    async def _run_async(self) -> None:
        stop = asyncio.Event()
        await self.delivery.wait_until_loaded(self.record.version)
        if self.record.step == 0 and self.evaluations is not None:
            self.evaluations.start_beside()  # before the workers: its call reaches a generator first
        if self.rival is not None:
            self.rival.learn_beside()
        workers = [asyncio.create_task(self._rollout_worker(i, stop)) for i in range(self.config.rollout_workers)]
        try:
            while self._steps_left():
                with TRACER.span(STEP, LANE):
                    waited_from = time.perf_counter()
                    with TRACER.span(WAIT_FOR_BATCH, LANE):
                        batch, buffer = await self._next_batch(workers)
                    self.record.trainer_idle_s += time.perf_counter() - waited_from
                    await self._train(batch, buffer)
                if self.evaluations is not None and self._due_for_evaluation():
                    self.evaluations.start_beside()
                if self._due_for_checkpoint():
                    await self._checkpoint()
        finally:
            stop.set()  # workers finish the call in flight and hand it to the buffer
            await self.admission.close()
            results = await self._drained(workers)
        _raise_first_error(results)

    async def _drained(self, workers: list[asyncio.Task]) -> list:
        """Each worker's result (or error) once it has handed its calls in flight to the buffer;
        those still at it after `_time_to_drain()` are cancelled and said to be cut short."""
        _, late = await asyncio.wait(workers, timeout=self._time_to_drain())
        if late:
            for worker in late:
                worker.cancel()
            await asyncio.wait(late, timeout=CANCELLED_WITHIN_S)
            self.note_cut_short(f"the generate calls in flight of {len(late)} rollout worker(s) were abandoned")
        return [w.exception() for w in workers if w.done() and not w.cancelled()]

    async def _rollout_worker(self, index: int, stop: asyncio.Event) -> None:
        """Rollout worker `index`, its calls routed over the generators as `rollout_routing` says."""
        shape, group = self.rollouts.shape, self.config.group_size
        router = WorkerRouting(
            self.handles.generators,
            index,
            self.config.rollout_routing,
            shape.samples_per_call(group),
            self.delivery,
            self.admission,
            shape.least_admitted(group),
        )
        await run_worker(
            router,
            self.rollouts.for_worker(),
            shape,
            group,
            self.replay_buffer,
            self.admission,
            stop,
            lane=f"rollout worker {index}",
        )

    async def _next_batch(self, workers: list[asyncio.Task]) -> tuple[list[Episode], BufferStats]:
        """Sample a batch, returned with the buffer's stats. A call that finds none waits in the
        buffer for the rollout workers' next add (rather than polling), so the batch leaves the
        moment it is complete; between calls, the workers and weight receivers are checked."""
        while True:
            batch, buffer = await self.replay_buffer.sample(
                self.config.batch_size, trainer_version=self.record.version, wait_s=_WORKER_CHECK_S
            )
            if batch is not None:
                return batch, buffer
            await self._note_drops(buffer)  # dropped samples no longer hold admission back
            _raise_first_error([w.exception() for w in workers if w.done()])
            self.delivery.check()  # a failed weight relay would leave admission waiting forever
            self.rollouts.watch.check()  # every episode dropping: the run cannot progress

    # The synchronous loop

    async def _run_sync(self) -> None:
        await self.delivery.wait_until_loaded(self.record.version)
        if self.record.step == 0 and self.evaluations is not None:
            await self.evaluations.evaluate()
        while self._steps_left():
            with TRACER.span(STEP, LANE):
                waited_from = time.perf_counter()
                with TRACER.span(GENERATE_BATCH, LANE):
                    batch, buffer = await self._generate_batch()
                self.record.trainer_idle_s += time.perf_counter() - waited_from
                await self._train(batch, buffer)
                if self.rival is not None:  # a second policy's step, on-policy too
                    await self.rival.learn_in_step()
                with TRACER.span(WAIT_FOR_WEIGHTS, LANE):
                    await self.delivery.wait_until_loaded(self.record.version)
            if self.evaluations is not None and self._due_for_evaluation():
                await self.evaluations.evaluate()
            if self._due_for_checkpoint():
                await self._checkpoint()

    async def _generate_batch(self) -> tuple[list[Episode], BufferStats]:
        """One batch, generated in calls of prompts_per_rollout prompts over the generators;
        returned with the buffer's stats. A prompt gives `samples_per_prompt` samples (a sample per
        policy seat of each episode), so a step asks for the prompts that fill one batch, not
        prompts_per_step: more would leave samples to train on a version later.

        With groups dropped (for carrying no signal, filter.*; by an environment's error), or
        fewer samples than asked for (a seat that never moved), the prompts still missing are
        generated again until the batch is full, or the progress watch finds that none are kept."""
        per_prompt = self.config.samples_per_prompt
        missing = -(-self.config.batch_size // per_prompt)
        while True:
            batch, buffer = await self._generate_prompts(missing)
            if batch is not None:
                return batch, buffer
            self.rollouts.watch.check()  # every episode dropping: the run cannot progress
            missing = -(-(self.config.batch_size - buffer.size) // per_prompt)

    async def _generate_prompts(self, prompts: int) -> tuple[list[Episode] | None, BufferStats]:
        """`prompts` prompts' groups into the buffer, then a batch from it if it has one, and its
        stats. The batch is everything the buffer holds once that is a batch's worth: a refill
        may overshoot by part of a group, and what this step generated is on-policy only now."""
        per_call = self.config.prompts_per_rollout
        calls = [
            self._produce_on(i, min(per_call, prompts - start)) for i, start in enumerate(range(0, prompts, per_call))
        ]
        for episodes, dropped in await asyncio.gather(*calls):
            await self.replay_buffer.add(episodes, dropped=dropped)
        held = (await self.replay_buffer.stats()).size
        return await self.replay_buffer.sample(max(self.config.batch_size, held), trainer_version=self.record.version)

    async def _produce_on(self, call: int, prompts: int):
        """Sync mode's call `call`, on generator call % count, or on a stand-in once that one is lost."""
        generators = self.handles.generators
        return await generators.on_live(
            call % generators.count, lambda generator: self.rollouts.produce(generator, prompts)
        )

    # One step, for both loops

    async def _train(self, batch: list[Episode], buffer: BufferStats) -> None:
        """One step on `batch`; `buffer`: the replay buffer's stats as the batch left it."""
        row = {"step": self.record.step + 1, **batch_metrics(batch, self.record.version)}
        await self._note_drops(buffer)
        await self.admission.step_started(len(batch))
        occupancy = asyncio.ensure_future(self._occupancy.read(self.handles.generators))  # beside the step
        result = await self._train_and_push(batch)
        record = self.record
        record.version, record.step = result.version, record.step + 1
        self.delivery.publish(record.version)
        await self.admission.step_finished(record.version)
        record.trained += len(batch)
        record.reward_ends.append(row["reward/mean"])
        row.update(result.metrics, **self.rollouts.scoring.metrics(), **self.rollouts.metrics())
        row.update(self._figures(result, buffer).row(), **await occupancy)
        self.metrics.log(row)
        self._warn_once_over_oversampling_cap(buffer.kept_zero_variance)
        if record.target_reached is None and self.metrics.reward_smoothed >= self.config.target_reward:
            record.target_reached = {"step": record.step, "wall_s": row["time/wall_s"]}

    def _figures(self, result: StepResult, buffer: BufferStats) -> PipelineFigures:
        generators = self.handles.generators
        busy_s = generators.busy_s()
        return PipelineFigures(
            version=self.record.version,
            trained=self.record.trained,
            dropped_stale=buffer.dropped_stale,
            dropped_other=buffer.dropped_other,
            not_started=sum(buffer.not_started.values()),
            kept_zero_variance=buffer.kept_zero_variance,
            buffered=buffer.size,
            in_flight=self.admission.in_flight,
            generator_paused_s=self.admission.paused_s,
            generator_tokens_per_s=self._token_rate.mark(self.rollouts.tokens),
            generator_idle_frac=1 - busy_s / (len(generators.live()) * self.record.segment_s()),
            generator_restarts=generators.restarts,
            trainer_idle_frac=self.record.trainer_idle_s / self.record.wall_s(),
            push_ms=result.push_ms,
            sync_ms=result.push_ms + self.delivery.last_load_ms,
            weight_bytes=result.weight_bytes,
            wall_s=self.record.wall_s(),
            dropped_by_reason=buffer.dropped_by_reason,
            samples_by_generator=list(generators.returned),
        )

    # Around the steps

    async def _close(self) -> None:
        await super()._close()
        if self.rival is not None:
            await self.rival.close()

    def _state(self) -> dict:
        return {"rollouts": self.rollouts.state_dict()}

    async def _load_state(self, state: dict) -> None:
        self.rollouts.load_state_dict(state["rollouts"])
        buffer = await self.replay_buffer.stats()
        self._dropped_seen = buffer.dropped_total
        self.admission.restore(self.record.version, queued=buffer.size)

    async def _note_drops(self, buffer: BufferStats) -> None:
        """Tell admission control about samples the buffer dropped since last told (`buffer`: its stats)."""
        dropped = buffer.dropped_total
        await self.admission.dropped(dropped - self._dropped_seen)
        self._dropped_seen = dropped

    def _warn_once_over_oversampling_cap(self, kept: int) -> None:
        if kept and not self._warned_oversampling:
            self._warned_oversampling = True
            cap = self.config.filter.max_oversampling
            print(
                f"filter.zero_variance_groups: more than filter.max_oversampling={cap} batches' worth of groups "
                "with equal rewards arrived for one step; those beyond it are trained on (counted as "
                "kept_zero_variance): most prompts are solved, or not yet learnable",
                flush=True,
            )


def _raise_first_error(results: list) -> None:
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
            raise result
