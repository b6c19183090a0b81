"""Model scorers: a frozen model on a mesh of its own gives each completion token's logprob.

- reference_kl: the reference policy's logprobs travel with the episode to the
  trainer, whose loss adds coef * k3(pi_theta, pi_ref) per token (losses/grpo.py).
- teacher: on-policy distillation. Each token's advantage gets
  coef * (log pi_teacher - log pi_student), the negative per-token reverse KL, with
  the student's logprob as the generator sampled it; `distill/reverse_kl` is its mean.

The model runs in its own procs (actors/logprob_model.py), concurrently with
generation and training: rollout workers await it while others generate.
"""

import statistics
from collections.abc import Awaitable, Callable

from forge_async.data.episode import Completion
from forge_async.data.tasks import Prompt
from forge_async.scoring.config import ScorerConfig
from forge_async.scoring.scorer import Score, ScorerFailed, flatten, regroup

# call(lambda model: model.<endpoint>.call_one(...)) on the scorer's LogprobModel; a dead proc
# raises ScorerFailed (launch/supervision.py).
CallModel = Callable[[Callable[[object], Awaitable]], Awaitable]


class ModelScorer:
    def __init__(self, config: ScorerConfig, call: CallModel):
        self.name = config.label
        self.kind = config.kind
        self.coef = config.coef
        self.call = call

    async def score(self, prompts: list[Prompt], groups: list[list[Completion]]) -> list[list[Score]]:
        pairs = flatten(prompts, groups)
        try:
            logprobs = await self.call(
                lambda model: model.completion_logprobs.call_one(
                    [p.token_ids for p, _ in pairs], [c.token_ids for _, c in pairs]
                )
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
