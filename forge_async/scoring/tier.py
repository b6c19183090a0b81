"""The scoring tier: every scorer on each generated call, combined into episodes.

    reward_i       = sum over reward scorers k of weight_k * score_ik
    advantage_i    = group-relative advantage of reward_i (scoring.outcome_advantage)
    advantage_it  += u_it, the sum of the per-token rewards scorers gave token t (distillation;
                     0 on an environment's tokens), less the mean u at position t of the group's
                     other completions with a model token there (scoring.token_baseline=group,
                     `position_centered`)
    reference_it   = the reference_kl scorer's log pi_ref, for the trainer's KL penalty (unless
                     the scorer runs in the trainer, which computes it there)

Scorers run concurrently (asyncio.gather): reward functions in the controller,
model scorers on their own meshes. A completion a scorer could not score is, by
scoring.on_error, the run's end (one ScorerError naming scorer, prompt and
completion) or dropped, and counted as `scorer_error`. Each scorer's latency and
the calls waiting on it are metrics (`scoring/<name>/latency_ms`, `.../in_flight`).
"""

import asyncio
import statistics
import time
from collections.abc import Mapping

from forge_async.data.episode import Completion, Episode
from forge_async.tasks.task import Prompt, Task
from forge_async.losses.advantages import group_advantages
from forge_async.scoring.config import ScorerConfig, ScoringConfig
from forge_async.scoring.model_scorers import ModelScorer, ScorerModel
from forge_async.scoring.self_teacher import SelfTeacher
from forge_async.scoring.reward_functions import RewardFunction
from forge_async.scoring.scorer import Score, Scorer, ScorerError


class ScorerClock:
    """One scorer's calls: how many are in flight, and how long those that finished took."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.latencies_ms: list[float] = []
        self.last_ms = 0.0

    async def timed(self, call):
        self.in_flight += 1
        start = time.perf_counter()
        try:
            return await call
        finally:
            self.in_flight -= 1
            self.latencies_ms.append((time.perf_counter() - start) * 1e3)

    def take_latency_ms(self) -> float:
        """Mean latency of the calls finished since the last take (the previous figure if none)."""
        if self.latencies_ms:
            self.last_ms = statistics.fmean(self.latencies_ms)
            self.latencies_ms = []
        return self.last_ms


class ScoringTier:
    def __init__(
        self,
        scorers: list[tuple[ScorerConfig, Scorer]],
        config: ScoringConfig | None = None,
        scale_by_std: bool = True,
    ):
        self.scorers = [scorer for _, scorer in scorers]
        self.weights = {s.name: c.weight for c, s in scorers if c.kind == "reward"}
        self.config = config or ScoringConfig()
        self.scale_by_std = scale_by_std
        self.clocks = {s.name: ScorerClock() for s in self.scorers}
        self.last_error: str | None = None  # what the last completion dropped as unscorable was dropped for

    async def score(
        self, prompts: list[Prompt], groups: list[list[Completion]], first_group_id: int
    ) -> tuple[list[Episode], int]:
        """Episodes of every completion the scorers could score, and how many they could not."""
        verdicts = await asyncio.gather(*(self.clocks[s.name].timed(s.score(prompts, groups)) for s in self.scorers))
        episodes, unscored = [], 0
        for offset, (prompt, completions) in enumerate(zip(prompts, groups, strict=True)):
            scored = []
            for j, completion in enumerate(completions):
                scores = {s.name: verdict[offset][j] for s, verdict in zip(self.scorers, verdicts)}
                if self._unscorable(prompt, completion, scores):
                    unscored += 1
                else:
                    scored.append((completion, scores))
            episodes += self._group(scored, first_group_id + offset)
        return episodes, unscored

    def _unscorable(self, prompt: Prompt, completion: Completion, scores: dict[str, Score]) -> bool:
        """Whether a scorer failed on this completion; with on_error=fail, that is a ScorerError."""
        failed = [(name, s.error) for name, s in scores.items() if s.error is not None]
        if not failed:
            return False
        name, error = failed[0]
        if self.config.on_error == "fail":
            raise ScorerError(
                f"scorer {name!r} {error} (prompt {prompt.text!r}, completion {completion.text!r}); "
                "scoring.on_error=drop drops such completions instead"
            )
        self.last_error = f"scorer {name!r} {error}"
        return True

    def _group(self, scored: list[tuple[Completion, dict[str, Score]]], group_id: int) -> list[Episode]:
        """One prompt's scored completions as episodes, advantages relative to each other."""
        rewards = [sum((w * _reward(scores[name]) for name, w in self.weights.items()), 0.0) for _, scores in scored]
        if self.config.outcome_advantage:
            advantages = group_advantages(rewards, self.scale_by_std)
        else:
            advantages = [0.0] * len(scored)
        token_rewards = [_summed([s.token_rewards for s in scores.values()]) for _, scores in scored]
        if self.config.token_baseline == "group" and scored and token_rewards[0] is not None:
            masks = [completion.model_mask for completion, _ in scored]
            token_rewards = list(position_centered(_every_one(token_rewards), masks))
        return [
            Episode(
                completion,
                reward,
                advantage,
                group_id=group_id,
                token_advantages=per_token,
                reference_logprobs=next(
                    (s.reference_logprobs for s in scores.values() if s.reference_logprobs is not None), None
                ),
                metrics={k: v for s in scores.values() for k, v in s.metrics.items()},
            )
            for (completion, scores), reward, advantage, per_token in zip(scored, rewards, advantages, token_rewards)
        ]

    def metrics(self) -> dict[str, float]:
        """Each scorer's mean latency since the last call and its calls in flight now; a teacher
        that is the policy itself, its version."""
        figures = {}
        for name, clock in self.clocks.items():
            figures[f"scoring/{name}/latency_ms"] = clock.take_latency_ms()
            figures[f"scoring/{name}/in_flight"] = clock.in_flight
        for scorer in self.scorers:
            if isinstance(scorer, ModelScorer):
                figures.update(scorer.metrics())
        return figures

    @property
    def self_teachers(self) -> list[SelfTeacher]:
        """Its teachers that are the policy itself: weight delivery tells them each version published."""
        return [s.self_teacher for s in self.scorers if isinstance(s, ModelScorer) and s.self_teacher is not None]


def position_centered(token_rewards: list[list[float]], model_masks: list[list[bool]]) -> list[list[float]]:
    """Each model token's reward less a leave-one-out baseline: the mean of the rewards at its
    position over the group's OTHER completions that have a model token there,

        b_it = sum_{j != i : m_jt} u_jt / |{j != i : m_jt}|      (0 where no other completion has one)
        centred_it = u_it - b_it where m_it, 0 on the environment's tokens

    with m_jt whether token t of completion j is the model's (`Completion.model_mask`): an
    environment's token is nobody's baseline. The token's own value is left out of its baseline,
    so a completion alone at a position keeps its whole signal, and none is shrunk by 1 - 1/G_t.
    The baseline of completion i does not depend on i's own tokens (the others were sampled apart
    from it), so it biases no position's gradient; it removes the most variance at the first token,
    which every completion sampled from the same context, and less as the contexts part."""
    longest = max(map(len, token_rewards), default=0)
    sums, counts = [0.0] * longest, [0] * longest
    for rewards, mask in zip(token_rewards, model_masks, strict=True):
        for t, (value, is_model) in enumerate(zip(rewards, mask, strict=True)):
            if is_model:
                sums[t] += value
                counts[t] += 1

    def centred(t: int, value: float, is_model: bool) -> float:
        if not is_model:
            return 0.0
        others = counts[t] - 1
        return value - (sums[t] - value) / others if others else value

    return [
        [centred(t, value, is_model) for t, (value, is_model) in enumerate(zip(rewards, mask, strict=True))]
        for rewards, mask in zip(token_rewards, model_masks, strict=True)
    ]


def _reward(score: Score) -> float:
    """A reward scorer's reward (it gives one for every completion it did not fail on)."""
    if score.reward is None:
        raise RuntimeError("a reward scorer gave a score without a reward")
    return score.reward


def _every_one(token_rewards: list[list[float] | None]) -> list[list[float]]:
    """A group's per-token rewards, which its per-token scorers give every completion of it."""
    given = [rewards for rewards in token_rewards if rewards is not None]
    if len(given) != len(token_rewards):
        raise RuntimeError("per-token rewards for some completions of a group and not for others")
    return given


def _summed(per_token: list[list[float] | None]) -> list[float] | None:
    """The element-wise sum of the lists given (None: no scorer gave any)."""
    given = [values for values in per_token if values is not None]
    return [sum(column) for column in zip(*given, strict=True)] if given else None


def build_tier(
    scorers: list[ScorerConfig],
    scoring: ScoringConfig,
    task: Task,
    models: Mapping[int, ScorerModel] | None = None,
    scale_by_std: bool = True,
) -> ScoringTier:
    """The tier `scorers` describe. `models[i]`: model scorer i's model on its mesh
    (handles/scorers.py); only runs with model scorers need them. A reference that runs in
    the trainer is not part of the tier."""
    built: list[tuple[ScorerConfig, Scorer]] = []
    for index, config in enumerate(scorers):
        if config.runs_on == "trainer":
            continue
        if config.runs_a_model:
            if models is None or index not in models:
                raise ValueError(f"scorers[{index}] ({config.kind}) runs a model: build_tier needs its model")
            built.append((config, ModelScorer(config, models[index])))
        else:
            built.append((config, RewardFunction(config, index, task)))
    return ScoringTier(built, scoring, scale_by_std)
