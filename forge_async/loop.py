"""The GRPO training loop over ready actor meshes, asynchronous or synchronous.

    rollout workers (async: 2+ at once)       trainer (one step at a time)
    ---------------------------------         ---------------------------------
    admit? -> generate -> score -> buffer ->  sample batch -> train -> publish
        ^                                                          |
        +------------ generators pick up the new version ----------+
                                                every k steps: whole-run checkpoint

async: rollout workers keep the generators busy into the replay buffer, each
request admitted only if its samples can still be trained within
max_policy_age; the trainer takes a batch as soon as the buffer holds one,
steps, publishes its weights and goes on; generators pick the new version up
between engine steps.
sync:  generate a batch, train on it, publish, wait for every generator to hold
the new weights, repeat. The baseline async is measured against.

A run ends after `steps`, or early when `request_stop` is called (Ctrl-C):
either way the step in flight finishes, generation drains into the buffer, and
the run saves a checkpoint, the final policy and summary.json.
"""

import asyncio
import json
import time
from collections import deque
from dataclasses import asdict
from functools import partial
from pathlib import Path

from forge_async.admission import AdmissionControl
from forge_async.checkpoint.checkpointer import Checkpointer
from forge_async.checkpoint.directory import step_of
from forge_async.config import GRPOConfig
from forge_async.data.episode import Episode
from forge_async.data.tasks import Task
from forge_async.envs.rollouts import EpisodeRollouts
from forge_async.envs.remote import EnvironmentFailed
from forge_async.envs.runner import EnvRunner
from forge_async.evaluation.evaluator import Evaluator
from forge_async.launch.supervision import GeneratorFailed, RunMeshes
from forge_async.metric_sinks import build_sinks
from forge_async.metrics import BusyClock, MetricsLog, batch_metrics
from forge_async.rollout import Rollouts
from forge_async.scoring.scorer import ScorerError, ScorerFailed
from forge_async.scoring.tier import build_tier
from forge_async.summary import write_summary
from forge_async.tracing import TRACER, trace_events
from forge_async.weights.sync import WeightSync

_WORKER_CHECK_S = 0.5  # how often a waiting trainer loop checks its workers are alive
_RATE_WINDOW = 10  # steps over which generation throughput is measured
LOOP = "trainer loop"  # the controller's lane for the trainer's side (tracing.py)
EVALUATION = "evaluation"  # the controller's lane for evaluations
# Drop reasons logged every step (besides stale and the dropped_other total), 0 until one happens.
SHOWN_DROPS = ("zero_variance", "scorer_error", "env_error", "env_timeout")


class GRPOLoop:
    def __init__(
        self,
        config: GRPOConfig,
        run_dir: Path,
        task: Task,
        meshes: RunMeshes,
        checkpointer: Checkpointer | None = None,
        env_runner: EnvRunner | None = None,
        evaluator: Evaluator | None = None,
    ):
        """`env_runner`: plays `task`'s episodes in its environment (multi-turn); None: single-turn.
        `evaluator`: evaluates the policy on held-out prompts every eval.every_steps; None: never."""
        self.config = config
        self.run_dir = run_dir
        self.meshes = meshes
        self.buffer = meshes.buffer
        self.checkpointer = checkpointer
        self.scoring = build_tier(
            config.scorers, config.scoring, task, meshes.call_scorer, config.loss.scale_by_std
        )
        rollouts = (task, self.scoring, config.sampling, config.group_size, config.prompts_per_rollout, config.seed)
        self.rollouts = Rollouts(*rollouts) if env_runner is None else EpisodeRollouts(*rollouts, env_runner)
        self.step = 0
        self.version = 0
        self.trained = 0
        self.dropped_seen = 0
        self.trainer_idle_s = 0.0
        # generator i is busy while a generate call to it is in flight (this segment of the run)
        self.generating = [BusyClock() for _ in range(meshes.generator_count)]
        self.wall_before_s = 0.0  # wall time of earlier segments of a resumed run
        self.rewards: list[float] = []
        self.target_reached: dict | None = None
        self.checkpoint_s = 0.0
        self.stop_reason: str | None = None
        self._stop = asyncio.Event()
        self.evaluator = evaluator
        self.evaluations = 0  # started so far (they take the generators in turn)
        self.eval_first: dict | None = None  # the rows of the first and the latest evaluation
        self.eval_last: dict | None = None
        self._evaluating: asyncio.Task | None = None  # async mode: the evaluation in flight
        self._warned_oversampling = False

    def request_stop(self, reason: str) -> None:
        """End the run after the step in flight (the run still checkpoints and reports)."""
        self.stop_reason = reason
        self._stop.set()

    async def run(self, resume_from: Path | None = None) -> dict:
        """Train to `config.steps` (from a checkpoint, if given); returns the summary."""
        resumed_at = None if resume_from is None else step_of(resume_from)
        sinks = build_sinks(self.config.logging, self.run_dir, asdict(self.config), resumed_at)
        self.metrics = MetricsLog(
            self.run_dir, self.config.steps, self.config.target_reward, sinks, resume_after_step=resumed_at
        )
        self.admission = AdmissionControl(
            self.config.batch_size, self.config.max_policy_age, self.config.admission_control
        )
        if resume_from is not None:
            await self._restore(resume_from)
        await self._start_weight_sync()
        self.segment_start = time.perf_counter()
        self.start = self.segment_start - self.wall_before_s
        self._token_marks = deque([(time.perf_counter(), self.rollouts.tokens)], maxlen=_RATE_WINDOW + 1)
        failure = None
        try:
            if self.config.mode == "async":
                await self._run_async()
            else:
                await self._run_sync()
            await self._final_evaluation()
        except (GeneratorFailed, ScorerFailed, ScorerError, EnvironmentFailed) as err:  # the trainer is fine: save
            failure = str(err)
        finally:
            if self._evaluating is not None:
                self._evaluating.cancel()  # a no-op unless a failure ended the run while it ran
            await self.sync.close()
            self.metrics.close()
        if self.checkpointer is not None:
            await self._checkpoint()
        print("saving the final policy ...", flush=True)
        started = time.perf_counter()
        final_model = await self.meshes.call_trainer(
            lambda t: t.save_hf.call(str(self.run_dir / "final_model"), str(self.run_dir / "final_adapter"))
        )
        print(f"final policy saved in {time.perf_counter() - started:.1f}s: {final_model}", flush=True)
        if self.config.trace.enabled:
            await self._write_trace()
        return await self.write_summary(final_model, failure)

    async def _write_trace(self) -> None:
        """RUN_DIR/trace.json: every actor's spans as Chrome trace events (one track per actor)."""
        tracks = await self.meshes.trace_spans()
        path = self.run_dir / "trace.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(trace_events(tracks)))
        tmp.replace(path)

    async def _start_weight_sync(self) -> None:
        receivers, receiver_of, receivers_are_generators, self.push_targets = self.meshes.weight_routes()
        self.sync = WeightSync(
            self.meshes.call_generator,
            self.meshes.generator_count,
            receivers,
            receiver_of,
            receivers_are_generators,
            on_loaded=self.admission.weights_moved,
        )
        self.meshes.on_generator_restart = self.sync.generator_replaced
        if self.version > 0:  # resumed: generators start from the initial weights
            await self.meshes.call_trainer(lambda t: t.push_weights.call(self.push_targets))
            self.sync.publish(self.version)

    async def _restore(self, path: Path) -> None:
        state = await Checkpointer.restore(path, self.meshes)
        self.step, self.version = state["step"], state["version"]
        self.trained, self.trainer_idle_s = state["trained"], state["trainer_idle_s"]
        self.wall_before_s, self.checkpoint_s = state["wall_s"], state["checkpoint_s"]
        self.rewards, self.target_reached = state["rewards"], state["target_reached"]
        evaluations = state.get("evaluations", {})  # absent from checkpoints of runs before evaluation
        self.evaluations = evaluations.get("count", 0)
        self.eval_first, self.eval_last = evaluations.get("first"), evaluations.get("last")
        self.rollouts.load_state_dict(state["rollouts"])
        self.metrics.load_state_dict(state["metrics"])
        buffer = await self.buffer.stats()
        self.dropped_seen = buffer["dropped_stale"] + buffer["dropped_other"]
        self.admission.restore(self.version, queued=buffer["size"])
        print(f"resumed from {path} at step {self.step} (version {self.version})", flush=True)

    def state_dict(self) -> dict:
        return {
            "step": self.step,
            "version": self.version,
            "trained": self.trained,
            "trainer_idle_s": self.trainer_idle_s,
            "wall_s": time.perf_counter() - self.start,
            "checkpoint_s": self.checkpoint_s,
            "rewards": list(self.rewards),
            "target_reached": self.target_reached,
            "evaluations": {"count": self.evaluations, "first": self.eval_first, "last": self.eval_last},
            "rollouts": self.rollouts.state_dict(),
            "metrics": self.metrics.state_dict(),
        }

    async def _checkpoint(self) -> None:
        saved = await self.checkpointer.save(self.step, self.state_dict(), self.meshes)
        self.checkpoint_s += saved["seconds"]
        print(
            f"checkpoint step {self.step}: {saved['seconds']:.2f}s, "
            f"{saved['bytes'] / 2**20:.1f} MiB -> {saved['path']}",
            flush=True,
        )

    def _due_for_checkpoint(self) -> bool:
        every = self.config.checkpoint.every_steps
        return self.checkpointer is not None and every > 0 and self.step % every == 0

    def _steps_left(self) -> bool:
        return self.step < self.config.steps and not self._stop.is_set()

    async def _run_async(self) -> None:
        stop = asyncio.Event()
        await self.sync.wait_until_loaded(self.version)
        if self.step == 0:
            self._start_evaluation()  # before the workers: its call reaches a generator first
        workers = []
        for i in range(self.config.rollout_workers):
            g = i % self.meshes.generator_count
            workers.append(
                asyncio.create_task(
                    self.rollouts.run_worker(
                        lambda *args, g=g: self._generate(g, *args),
                        lambda g=g: self.sync.generator_version(g),
                        self.buffer,
                        self.admission,
                        stop,
                        lane=f"rollout worker {i}",
                        partial_calls=self.config.filter.zero_variance_groups,
                    )
                )
            )
        try:
            while self._steps_left():
                with TRACER.span("step", LOOP):
                    waited_from = time.perf_counter()
                    with TRACER.span("wait for batch", LOOP):
                        batch, buffer = await self._next_batch(workers)
                    self.trainer_idle_s += time.perf_counter() - waited_from
                    await self._train(batch, buffer)
                if self._due_for_evaluation():
                    self._start_evaluation()
                if self._due_for_checkpoint() and self._steps_left():
                    await self._checkpoint()
        finally:
            stop.set()  # workers finish the call in flight and hand it to the buffer
            await self.admission.close()
            results = await asyncio.gather(*workers, return_exceptions=True)
        _raise_first_error(results)

    async def _next_batch(self, workers: list[asyncio.Task]) -> tuple[list[Episode], dict]:
        """Sample a batch, returned with the buffer's stats. A call that finds none waits in the
        buffer for the rollout workers' next add (rather than polling), so the batch leaves the
        moment it is complete; between calls, the workers and weight relays are checked."""
        while True:
            batch, buffer = await self.buffer.sample(self.config.batch_size, self.version, wait_s=_WORKER_CHECK_S)
            if batch is not None:
                return batch, buffer
            await self._note_drops(buffer)  # dropped samples no longer hold admission back
            _raise_first_error([w.exception() for w in workers if w.done()])
            self.sync.check()  # a failed weight relay would leave admission waiting forever

    async def _run_sync(self) -> None:
        per_call = self.config.prompts_per_rollout
        count = self.meshes.generator_count
        await self.sync.wait_until_loaded(self.version)
        if self.step == 0 and self.evaluator is not None:
            await self._evaluate()
        while self._steps_left():
            with TRACER.span("step", LOOP):
                waited_from = time.perf_counter()
                with TRACER.span("generate batch", LOOP):
                    batch, buffer = await self._generate_batch(per_call, count)
                self.trainer_idle_s += time.perf_counter() - waited_from
                await self._train(batch, buffer)
                with TRACER.span("wait for weights", LOOP):
                    await self.sync.wait_until_loaded(self.version)
            if self._due_for_evaluation():
                await self._evaluate()
            if self._due_for_checkpoint() and self._steps_left():
                await self._checkpoint()

    def _due_for_evaluation(self) -> bool:
        """Every eval.every_steps steps; the run's last version is evaluated after the loop."""
        every = self.config.eval.every_steps
        return self.evaluator is not None and self.step % every == 0 and self._steps_left()

    def _start_evaluation(self) -> None:
        """Async mode: evaluate the newest version the generators hold, beside training. One at a
        time: an evaluation due while the last one still runs is skipped, and said."""
        if self.evaluator is None:
            return
        if self._evaluating is not None:
            if not self._evaluating.done():
                print(f"evaluation at step {self.step} skipped: the previous one still runs", flush=True)
                return
            self._evaluating.result()  # its error, if it failed
        self._evaluating = asyncio.create_task(self._evaluate())

    async def _evaluate(self) -> None:
        """One evaluation on the next generator in turn, its weights pinned meanwhile."""
        index = self.evaluations % self.meshes.generator_count
        self.evaluations += 1
        with TRACER.span("evaluate", EVALUATION):
            row = await self.evaluator.evaluate(partial(self._generate, index), partial(self.sync.pinned, index))
        row["time/wall_s"] = time.perf_counter() - self.start
        self.eval_first = self.eval_first or row
        self.eval_last = row
        self.metrics.log_eval(self.step, row)

    async def _final_evaluation(self) -> None:
        """After the last step: the evaluation in flight, then one of the final policy (unless the
        run was interrupted, or that version was just evaluated)."""
        if self.evaluator is None:
            return
        if self._evaluating is not None:
            await self._evaluating
        if self._stop.is_set() or (self.eval_last is not None and self.eval_last["eval/version"] == self.version):
            return
        await self.sync.wait_until_loaded(self.version)
        await self._evaluate()

    async def _generate_batch(self, per_call: int, count: int) -> tuple[list[Episode], dict]:
        """Sync mode: one batch, generated in calls of `per_call` prompts over `count` generators;
        returns it with the buffer's stats.

        With groups dropped for carrying no signal (filter.*), the prompts still missing are
        generated again until the batch is full."""
        missing = self.config.prompts_per_step
        while True:
            batch, buffer = await self._generate_prompts(missing, per_call, count)
            if batch is not None:
                return batch, buffer
            missing = (self.config.batch_size - buffer["size"]) // self.config.group_size

    async def _generate_prompts(self, prompts: int, per_call: int, count: int) -> tuple[list[Episode] | None, dict]:
        """`prompts` prompts' groups into the buffer, then a batch from it if it has one, and its stats."""
        calls, remaining = [], prompts
        while remaining > 0:
            g = len(calls) % count
            generate = lambda *args, g=g: self._generate(g, *args)  # noqa: E731
            calls.append(self.rollouts.produce(generate, min(per_call, remaining)))
            remaining -= per_call
        for episodes, dropped in await asyncio.gather(*calls):
            await self.buffer.add(episodes, dropped)
        return await self.buffer.sample(self.config.batch_size, self.version)

    async def _generate(self, index: int, *args, **kwargs) -> list:
        with self.generating[index]:
            return await self.meshes.generate(index, *args, **kwargs)

    async def _train(self, batch: list[Episode], buffer: dict) -> None:
        """One step on `batch`; `buffer`: the replay buffer's stats as the batch left it."""
        record = {"step": self.step + 1, **batch_metrics(batch, self.version)}
        await self._note_drops(buffer)
        await self.admission.step_started(len(batch))
        with TRACER.span("train_and_push call", LOOP):
            result = await self.meshes.call_trainer(lambda t: t.train_and_push.call(batch, self.push_targets))
        self.version = result.pop("version")
        push_ms, weight_bytes = result.pop("push_ms"), result.pop("weight_bytes")
        self.step += 1
        self.sync.publish(self.version)
        await self.admission.step_finished(self.version)
        self.trained += len(batch)
        self.rewards.append(record["reward/mean"])
        now = time.perf_counter()
        self._token_marks.append((now, self.rollouts.tokens))
        (t0, tokens0), (t1, tokens1) = self._token_marks[0], self._token_marks[-1]
        generating_s = sum(clock.busy_s for clock in self.generating)
        generator_idle = 1 - generating_s / (len(self.generating) * (now - self.segment_start))
        record.update(
            result,
            **self.scoring.metrics(),
            **self.rollouts.metrics(),
            **{
                "policy/version": self.version,
                "samples/trained": self.trained,
                "samples/dropped_stale": buffer["dropped_stale"],
                "samples/dropped_other": buffer["dropped_other"],
                **{f"samples/dropped_{reason}": buffer["dropped_by_reason"].get(reason, 0) for reason in SHOWN_DROPS},
                "samples/kept_zero_variance": buffer["kept_zero_variance"],
                "samples/buffered": buffer["size"],
                "samples/in_flight": self.admission.in_flight,
                "generator/paused_s": self.admission.paused_s,
                "generator/tokens_per_s": (tokens1 - tokens0) / max(t1 - t0, 1e-9),
                "generator/idle_frac": generator_idle,
                "generator/restarts": self.meshes.generator_restarts,
                "train/idle_frac": self.trainer_idle_s / (now - self.start),
                "weights/push_ms": push_ms,
                "weights/sync_ms": push_ms + self.sync.last_load_ms,
                "weights/bytes": weight_bytes,
                "time/wall_s": now - self.start,
            },
        )
        self.metrics.log(record)
        self._warn_once_over_oversampling_cap(buffer["kept_zero_variance"])
        if self.target_reached is None and self.metrics.reward_smoothed >= self.config.target_reward:
            self.target_reached = {"step": self.step, "wall_s": record["time/wall_s"]}

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

    async def _note_drops(self, buffer: dict) -> None:
        """Tell admission control about samples the buffer dropped since last told (`buffer`: its stats)."""
        dropped = buffer["dropped_stale"] + buffer["dropped_other"]
        await self.admission.dropped(dropped - self.dropped_seen)
        self.dropped_seen = dropped

    async def write_summary(self, final_model: str | None = None, failure: str | None = None) -> dict:
        """summary.json from what the loop, the buffer and the generators know now."""
        return await write_summary(self, final_model, failure)


def _raise_first_error(results: list) -> None:
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
            raise result
