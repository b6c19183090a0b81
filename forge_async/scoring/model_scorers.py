"""Model scorers: a frozen model on a mesh of its own gives each completion token's logprob.

Both kinds below score over the whole vocabulary at the run's sampling temperature, not over
the sets the student's sampler kept (top-k / top-p / min-p): neither needs to agree with the
behaviour policy, and over a one-token kept set every signal would vanish.

- reference_kl: the reference policy's logprobs travel with the episode to the
  trainer, whose loss adds coef * k3(pi_theta, pi_ref) per token (losses/grpo.py): its
  expected gradient is that of KL(pi_ref || pi_theta).
- teacher: on-policy distillation. Each model token's advantage gets
  coef * (log pi_teacher - log pi_student), the negative per-token reverse KL, with
  the student's logprob as the generator sampled it over the whole tempered vocabulary
  (`Completion.whole_logprobs`); an environment's token (a multi-turn episode's
  observation) gets 0. `distill/reverse_kl` is the mean over the model's tokens.
  A teacher that is the policy itself (`model: self`) is refreshed from the trainer's
  published weights (scoring/self_teacher.py).

The model runs in its own procs (actors/logprob_model.py), concurrently with
generation and training: rollout workers await it while others generate.
"""

import statistics
from typing import Protocol

from forge_async.data.episode import Completion
from forge_async.tasks.task import Prompt
from forge_async.scoring.config import ScorerConfig
from forge_async.scoring.scorer import Score, ScorerFailed, flatten, regroup
from forge_async.scoring.self_teacher import SelfTeacher, TeacherModel


class ScorerModel(TeacherModel, Protocol):
    """The scorer's model on its mesh (handles/scorers.py); a dead proc raises ScorerFailed. A
    teacher that is the policy itself also takes the trainer's versions (TeacherModel's calls)."""

    async def completion_logprobs(
        self, prompt_ids: list[list[int]], completion_ids: list[list[int]]
    ) -> list[list[float]]:
        """log p of each completion token given its prompt and the tokens before it, p over the whole
        vocabulary at the run's temperature."""
        ...


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
                [p.token_ids for p, _ in pairs], [c.token_ids for _, c in pairs]
            )
        except ScorerFailed:
            raise
        except Exception as err:  # the model raised: every completion of the call is unscored
            return regroup([Score.failed(err)] * len(pairs), groups)
        return regroup([self._score(c, lp) for (_, c), lp in zip(pairs, logprobs, strict=True)], groups)

    def _score(self, completion: Completion, logprobs: list[float]) -> Score:
        if self.kind == "reference_kl":
            return Score(reference_logprobs=logprobs)
        # log pi_student - log pi_teacher on the model's tokens; None on the environment's
        reverse_kl = [
            student - teacher if is_model else None
            for student, teacher, is_model in zip(
                completion.whole_logprobs, logprobs, completion.model_mask, strict=True
            )
        ]
        sampled = [d for d in reverse_kl if d is not None]
        return Score(
            token_rewards=[0.0 if d is None else -self.coef * d for d in reverse_kl],
            metrics={
                "distill/reverse_kl": statistics.fmean(sampled) if sampled else 0.0,
                # On identical weights every token's term is 0 (tests/test_identity.py): the largest is the noise.
                "distill/reverse_kl_absmax": max(map(abs, sampled), default=0.0),
            },
        )
