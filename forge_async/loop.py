"""The GRPO training loop over ready actor meshes, asynchronous or synchronous.

async: rollout workers keep the generators busy into the replay buffer, each
request admitted only if its samples can still be trained within
max_policy_age; the trainer takes a batch as soon as the buffer holds one,
steps, publishes its weights and goes on; generators pick the new version up
between engine steps.
sync:  generate a batch, train on it, publish, wait for every generator to hold
the new weights, repeat. The baseline async is measured against.
At the end the final policy is saved (Hugging Face format) and summary.json written.
"""

import asyncio
import json
import statistics
import time
from collections import deque
from pathlib import Path

from forge_async.admission import AdmissionControl
from forge_async.config import GRPOConfig
from forge_async.data.episode import Episode
from forge_async.data.tasks import Task
from forge_async.metrics import MetricsLog, batch_metrics
from forge_async.rollout import Rollouts
from forge_async.weights import store
from forge_async.weights.shared_memory import SharedMemoryChannel
from forge_async.weights.sync import WeightSync

_WORKER_CHECK_S = 0.5  # how often a waiting trainer loop checks its workers are alive
_RATE_WINDOW = 10  # steps over which generation throughput is measured


class GRPOLoop:
    def __init__(self, config: GRPOConfig, run_dir: Path, task: Task, trainer, generators, buffer):
        self.config = config
        self.run_dir = run_dir
        self.trainer, self.generators, self.buffer = trainer, generators, buffer
        self.rollouts = Rollouts(
            task, config.sampling, config.group_size, config.prompts_per_rollout, config.seed
        )
        self.metrics = MetricsLog(run_dir)
        self.version = 0
        self.trained = 0
        self.dropped_seen = 0
        self.trainer_idle_s = 0.0
        self.rewards: list[float] = []
        self.target_reached: dict | None = None

    async def run(self) -> dict:
        self.admission = AdmissionControl(
            self.config.batch_size, self.config.max_policy_age, self.config.admission_control
        )
        self.sync = WeightSync(
            self.generators, self.config.weights.transport, on_loaded=self.admission.weights_moved
        )
        self.start = time.perf_counter()
        self._token_marks = deque([(self.start, 0)], maxlen=_RATE_WINDOW + 1)
        try:
            if self.config.mode == "async":
                await self._run_async()
            else:
                await self._run_sync()
        finally:
            await self.sync.close()
            self.metrics.close()
        self.wall_s = time.perf_counter() - self.start
        print("saving the final policy ...", flush=True)
        final_model = await self.trainer.save_hf.call(str(self.run_dir / "final_model"))
        return await self._summary(final_model.item(procs=0))

    async def _run_async(self) -> None:
        stop = asyncio.Event()
        workers = []
        for i in range(self.config.rollout_workers):
            g = i % len(self.generators)
            workers.append(
                asyncio.create_task(
                    self.rollouts.run_worker(
                        self.generators[g],
                        lambda g=g: self.sync.generator_version(g),
                        self.buffer,
                        self.admission,
                        stop,
                    )
                )
            )
        try:
            for step in range(1, self.config.steps + 1):
                waited_from = time.perf_counter()
                batch = await self._next_batch(workers)
                self.trainer_idle_s += time.perf_counter() - waited_from
                await self._train(step, batch)
        finally:
            stop.set()  # workers finish the call in flight and hand it to the buffer
            await self.admission.close()
            results = await asyncio.gather(*workers, return_exceptions=True)
        _raise_first_error(results)

    async def _next_batch(self, workers: list[asyncio.Task]) -> list[Episode]:
        """Sample a batch, waiting for rollout workers to add episodes rather than polling."""
        while True:
            self.rollouts.added.clear()  # before sampling: an add from here on wakes us
            batch = await self.buffer.sample.call_one(self.config.batch_size, self.version)
            if batch is not None:
                return batch
            _raise_first_error([w.exception() for w in workers if w.done()])
            try:
                await asyncio.wait_for(self.rollouts.added.wait(), timeout=_WORKER_CHECK_S)
            except asyncio.TimeoutError:
                pass

    async def _run_sync(self) -> None:
        per_call = self.config.prompts_per_rollout
        for step in range(1, self.config.steps + 1):
            waited_from = time.perf_counter()
            calls, remaining = [], self.config.prompts_per_step
            while remaining > 0:
                generator = self.generators[len(calls) % len(self.generators)]
                calls.append(self.rollouts.produce(generator, min(per_call, remaining)))
                remaining -= per_call
            for episodes in await asyncio.gather(*calls):
                await self.buffer.add.call_one(episodes)
            batch = await self.buffer.sample.call_one(self.config.batch_size, self.version)
            self.trainer_idle_s += time.perf_counter() - waited_from
            await self._train(step, batch)
            await self.sync.wait_until_loaded(self.version)

    async def _train(self, step: int, batch: list[Episode]) -> None:
        record = {"step": step, **batch_metrics(batch, self.version)}
        buffer = await self.buffer.stats.call_one()
        dropped = buffer["dropped_stale"] + buffer["dropped_overflow"]
        await self.admission.step_started(len(batch), dropped - self.dropped_seen)
        self.dropped_seen = dropped
        result = (await self.trainer.train_step.call(batch)).item(procs=0)
        push = (await self.trainer.push_weights.call()).item(procs=0)
        self.version = result.pop("version")
        self.sync.publish(self.version)
        await self.admission.step_finished(self.version)
        self.trained += len(batch)
        self.rewards.append(record["reward_mean"])
        now = time.perf_counter()
        self._token_marks.append((now, self.rollouts.stats.tokens))
        (t0, tokens0), (t1, tokens1) = self._token_marks[0], self._token_marks[-1]
        record.update(
            result,
            version=self.version,
            samples_trained=self.trained,
            dropped_stale=buffer["dropped_stale"],
            dropped_other=buffer["dropped_overflow"],
            buffered=buffer["size"],
            in_flight=self.admission.in_flight,
            gen_paused_s=self.admission.paused_s,
            gen_tokens_per_s=(tokens1 - tokens0) / max(t1 - t0, 1e-9),
            trainer_idle_frac=self.trainer_idle_s / (now - self.start),
            weight_push_ms=push["push_ms"],
            weight_sync_ms=push["push_ms"] + self.sync.last_load_ms,
            wall_s=now - self.start,
        )
        self.metrics.log(record)
        if self.target_reached is None and self.metrics.reward_avg >= self.config.target_reward:
            self.target_reached = {"step": step, "wall_s": record["wall_s"]}

    async def _summary(self, final_model: str) -> dict:
        buffer = await self.buffer.stats.call_one()
        wall = self.wall_s
        generators = [await g.stats.call_one() for g in self.generators]
        pauses = [p for g in generators for p in g["swap_pauses_ms"]]
        window = max(1, min(10, len(self.rewards) // 2))
        generated = self.rollouts.stats.generated
        summary = {
            "mode": self.config.mode,
            "steps": len(self.rewards),
            "wall_s": wall,
            "generated": generated,
            "trained": self.trained,
            "dropped_stale": buffer["dropped_stale"],
            "dropped_other": buffer["dropped_overflow"],
            "left_in_buffer": buffer["size"],
            "in_flight": 0,  # workers are drained into the buffer before this point
            "reward_first": statistics.fmean(self.rewards[:window]) if self.rewards else None,
            "reward_last": statistics.fmean(self.rewards[-window:]) if self.rewards else None,
            "target_reward": self.config.target_reward,
            "target_reached": self.target_reached,
            "samples_per_s": self.trained / wall,
            "trainer_idle_frac": self.trainer_idle_s / wall,
            "generator_idle_frac": 1 - sum(g["busy_s"] for g in generators) / (wall * len(generators)),
            "gen_paused_for_admission_s": self.admission.paused_s,
            "inflight_swaps": len(pauses),
            "swap_pause_ms_mean": statistics.fmean(pauses) if pauses else None,
            "swap_pause_ms_max": max(pauses) if pauses else None,
            "stored_versions": await self._stored_versions(),
        }
        accounted = (
            summary["trained"] + summary["dropped_stale"] + summary["dropped_other"]
            + summary["left_in_buffer"] + summary["in_flight"]
        )
        summary["accounting_ok"] = accounted == generated
        summary["final_model"] = final_model
        summary["run_dir"] = str(self.run_dir)
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        return summary


    async def _stored_versions(self) -> list[int]:
        """Policy versions still held by the weight transport (hygiene: only those in use)."""
        if self.config.weights.transport == "shm":
            return SharedMemoryChannel(self.config.weights.channel_dir).versions()
        return await store.stored_versions()


def _raise_first_error(results: list) -> None:
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
            raise result
