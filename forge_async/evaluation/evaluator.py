"""How the policy does on prompts it never trains on (docs/evaluation.md).

An evaluation samples `eval.samples_per_prompt` completions (multi-turn: episodes) for
every held-out prompt on one generator, and scores them with the run's reward scorers.
Every token is sampled by one policy version, the one its row names (`evaluate` checks):
the generator's weights are pinned for the whole evaluation (WeightDelivery.pinned), its
one generate call or its episodes' calls. Training goes on meanwhile: the trainer steps on
what the buffer holds, and the generators serve the rollout workers between evaluation calls.

    eval/reward_mean  mean@k: the mean reward over every sample
    eval/pass@k       the share of prompts with at least one sample whose reward reaches
                      eval.pass_reward (k = eval/samples_per_prompt)
    eval/len_mean     model tokens per sample
    eval/dropped      samples an environment or a scorer failed (left out of the figures), and
                      eval/dropped_<reason> for each reason
"""

import asyncio
import statistics
import time
from collections import Counter, defaultdict
from contextlib import AbstractAsyncContextManager
from dataclasses import replace

from forge_async.generation.config import SamplingConfig
from forge_async.data.episode import Completion, Episode
from forge_async.tasks.config import TaskConfig
from forge_async.tasks.task import Prompt, Task
from forge_async.envs.runner import EnvRunner, EpisodeDropped
from forge_async.envs.seats import SeatRunner
from forge_async.envs.turn_batcher import Generate, TurnBatcher
from forge_async.evaluation.config import EvalConfig
from forge_async.observability.metrics import EVAL_DROPPED
from forge_async.scoring.config import ScorerConfig, ScoringConfig
from forge_async.scoring.tier import ScoringTier, build_tier


class Evaluator:
    def __init__(
        self,
        config: EvalConfig,
        prompts: list[Prompt],
        scoring: ScoringTier,
        sampling: SamplingConfig,
        runner: EnvRunner | SeatRunner | None = None,
    ):
        """`runner`: plays multi-turn episodes (with seats: `SeatRunner`); None: one generate call
        per evaluation."""
        self.config = config
        self.prompts = prompts
        self.scoring = scoring
        self.sampling = replace(sampling, temperature=eval_temperature(config, sampling))
        self.runner = runner

    async def evaluate(self, generate: Generate, pinned: AbstractAsyncContextManager[int]) -> dict[str, float]:
        """Every held-out prompt's samples from one generator (`generate`), its weights held by
        `pinned` meanwhile (which yields their version)."""
        start = time.perf_counter()
        async with pinned as version:
            if self.runner is None:
                ids = [prompt.token_ids for prompt in self.prompts]
                groups = await generate(ids, self.sampling, self.config.samples_per_prompt)
                dropped: Counter[str] = Counter()
            else:
                groups, dropped = await self._play(generate)
        sampled = [(prompt, group) for prompt, group in zip(self.prompts, groups) if group]
        episodes, unscored = await self.scoring.score([p for p, _ in sampled], [g for _, g in sampled], 0)
        check_pinned(episodes, version)
        dropped.update({"scorer_error": unscored} if unscored else {})
        return {
            "eval/version": version,
            **self._figures(episodes, [p for p, _ in sampled]),
            "eval/prompts": len(self.prompts),
            "eval/samples_per_prompt": self.config.samples_per_prompt,
            "eval/dropped": sum(dropped.values()),
            **{f"{EVAL_DROPPED}{reason}": n for reason, n in dropped.items()},
            "eval/seconds": time.perf_counter() - start,
        }

    async def _play(self, generate: Generate) -> tuple[list[list[Completion]], Counter[str]]:
        """Each prompt's episodes, and those the environment failed (left out), counted by reason."""
        runner = self.runner
        assert runner is not None  # evaluate plays episodes only with a runner
        generate_one = TurnBatcher(generate, runner.turn_batch_wait_s)

        async def play(prompt: Prompt) -> list[Completion] | EpisodeDropped:
            """An episode's completions: one, or with env.seats one per policy seat that played."""
            try:
                played = await generate_one.play(runner, prompt, self.sampling)
            except EpisodeDropped as drop:
                return drop
            return played if isinstance(played, list) else [played]

        k = self.config.samples_per_prompt
        played = await asyncio.gather(*(play(p) for p in self.prompts for _ in range(k)))
        groups = [
            [c for episode in played[i * k : (i + 1) * k] if isinstance(episode, list) for c in episode]
            for i in range(len(self.prompts))
        ]
        return groups, Counter(drop.reason for drop in played if isinstance(drop, EpisodeDropped))

    def _figures(self, episodes: list[Episode], scored: list[Prompt]) -> dict[str, float]:
        """mean@k, pass@k (over every held-out prompt: one with no scored sample did not pass), length;
        and, for prompts that name their source (a reasoning-gym mix), mean@k per source.
        `scored[g]`: the prompt of the episodes of group g."""
        best: dict[int, float] = defaultdict(lambda: float("-inf"))
        for episode in episodes:
            best[episode.group_id] = max(best[episode.group_id], episode.reward)
        passed = sum(reward >= self.config.pass_reward for reward in best.values())
        figures = {
            "eval/reward_mean": _mean(e.reward for e in episodes),
            "eval/pass@k": passed / len(self.prompts),
            "eval/len_mean": _mean(e.completion.model_tokens for e in episodes),
        }
        by_source: dict[str, list[float]] = defaultdict(list)
        for episode in episodes:
            source = scored[episode.group_id].meta.get("source")
            if source is not None:
                by_source[source].append(episode.reward)
        figures.update({f"eval/reward_mean/{source}": _mean(r) for source, r in sorted(by_source.items())})
        seated = [e for e in episodes if e.completion.seat is not None]
        if seated:  # multi-seat games: how often the policy's seats won
            figures["eval/won_frac"] = _mean((e.completion.env_reward or 0) > 0 for e in seated)
        return figures


def _mean(values) -> float:
    values = list(values)
    return statistics.fmean(values) if values else 0.0


def eval_temperature(config: EvalConfig, sampling: SamplingConfig) -> float:
    """eval.temperature; unset: greedy for one sample per prompt, else the training temperature."""
    if config.temperature is not None:
        return config.temperature
    return 0.0 if config.samples_per_prompt == 1 else sampling.temperature


def check_pinned(episodes: list[Episode], version: int) -> None:
    """Every model token was sampled at `version`: else the row would name a policy it did not measure."""
    sampled_by = {v for e in episodes for v in e.completion.model_versions}
    if sampled_by - {version}:
        raise RuntimeError(
            f"evaluation pinned at version {version} has tokens of versions {sorted(sampled_by)}: "
            "the generator's weights changed during it"
        )


def held_out_prompts(
    config: EvalConfig, task: Task, task_config: TaskConfig, tokenizer, max_prompt_tokens: int
) -> list[Prompt]:
    """The prompts evaluations use: eval.dataset's first eval.prompts rows, or a fixed split of the
    task's own prompts (then never sampled for training). Call before training samples a prompt."""
    if config.dataset is None:
        return task.hold_out(config.prompts)
    from forge_async.tasks.dataset import DatasetTask  # `datasets` takes seconds to import

    held = DatasetTask(replace(task_config, dataset=config.dataset), tokenizer, max_prompt_tokens, "eval.dataset")
    return held.prompts[: config.prompts]


def build_evaluator(
    config: EvalConfig,
    prompts: list[Prompt],
    scorers: list[ScorerConfig],
    scoring: ScoringConfig,
    task: Task,
    sampling: SamplingConfig,
    runner: EnvRunner | SeatRunner | None,
) -> Evaluator:
    """An evaluator scoring with the run's reward scorers only (no model scorer: no advantages)."""
    rewards = [s for s in scorers if s.kind == "reward"]
    tier = build_tier(rewards, replace(scoring, outcome_advantage=False), task)
    return Evaluator(config, prompts, tier, sampling, runner)
