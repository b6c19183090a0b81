"""Model scorers: a frozen model on a mesh of its own gives each completion token's logprob.

- reference_kl: the reference policy's logprobs travel with the episode to the
  trainer, whose loss adds coef * k3(pi_theta, pi_ref) per token (losses/grpo.py).
- teacher: on-policy distillation. Each token's advantage gets
  coef * (log pi_teacher - log pi_student), the negative per-token reverse KL, with
  the student's logprob as the generator sampled it; `distill/reverse_kl` is its mean.
  A teacher that is the policy itself (`model: self`) is refreshed from the trainer's
  published weights (scoring/self_teacher.py).

The model runs in its own procs (actors/logprob_model.py), concurrently with
generation and training: rollout workers await it while others generate.
"""

import statistics
from typing import Protocol

from forge_async.data.episode import Completion
from forge_async.data.kept_sets import KeptSets
from forge_async.tasks.task import Prompt
from forge_async.scoring.config import ScorerConfig
from forge_async.scoring.scorer import Score, ScorerFailed, flatten, regroup
from forge_async.scoring.self_teacher import SelfTeacher


class ScorerModel(Protocol):
    """The scorer's model on its mesh (handles/scorers.py); a dead proc raises ScorerFailed."""

    async def completion_logprobs(
        self,
        prompt_ids: list[list[int]],
        completion_ids: list[list[int]],
        kept_sets: "list[KeptSets | None] | None" = None,
    ) -> list[list[float]]: ...


class ModelScorer:
    def __init__(self, config: ScorerConfig, model: ScorerModel):
        self.name = config.label
        self.kind = config.kind
        self.coef = config.coef
        self.model = model
        self.self_teacher = SelfTeacher(config, model) if config.is_self else None

    def metrics(self) -> dict[str, float]:
        """A teacher that is the policy itself: its version and refreshes; else nothing."""
        return {} if self.self_teacher is None else self.self_teacher.metrics()

    async def score(self, prompts: list[Prompt], groups: list[list[Completion]]) -> list[list[Score]]:
        pairs = flatten(prompts, groups)
        try:
            logprobs = await self.model.completion_logprobs(
                [p.token_ids for p, _ in pairs], [c.token_ids for _, c in pairs], [c.kept_sets for _, c in pairs]
            )
        except ScorerFailed:
            raise
        except Exception as err:  # the model raised: every completion of the call is unscored
            return regroup([Score.failed(err)] * len(pairs), groups)
        return regroup([self._score(c, lp) for (_, c), lp in zip(pairs, logprobs, strict=True)], groups)

    def _score(self, completion: Completion, logprobs: list[float]) -> Score:
        if self.kind == "reference_kl":
            return Score(reference_logprobs=logprobs)
        reverse_kl = [student - teacher for student, teacher in zip(completion.logprobs, logprobs, strict=True)]
        return Score(
            token_rewards=[-self.coef * d for d in reverse_kl],
            metrics={"distill/reverse_kl": statistics.fmean(reverse_kl) if reverse_kl else 0.0},
        )
