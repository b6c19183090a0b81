"""What flows between actors: completions from generators, episodes to the trainer.

Every generated token carries the policy version that produced it. A sample's
policy age, at the moment the trainer would learn from it, is the trainer's
version minus the oldest token version in the sample. A multi-turn episode's
completion interleaves model turns with environment tokens (tool output,
observations); those carry version -1 (ENV_TOKEN): no policy sampled them, they
are masked from the loss and do not count towards the sample's age.

A Mixture-of-Experts model's completion also carries the experts the generator routed
each token to (`routes`), for the trainer to replay (models/moe.py); a completion sampled with
top-k / top-p / min-p, the token ids the sampler kept at each step (`kept_sets`,
data/kept_sets.py), for the trainer to compute its log-probabilities over the same sets.
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from forge_async.data.kept_sets import KeptSets

ENV_TOKEN = -1  # the version of a token the environment wrote (not sampled by any policy)


@dataclass
class Completion:
    """One sampled continuation of a prompt, as the generator produced it."""

    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]  # log pi_behaviour of each sampled token (0 for environment tokens)
    versions: list[int]  # policy version that produced each token; ENV_TOKEN for environment tokens
    text: str
    # "stop" (EOS or stop string) or "length"; a multi-turn episode's: "done" (the environment
    # ended it), "max_turns" or "max_episode_tokens" (a limit ended it)
    finish_reason: str
    turns: int = 1  # model turns (multi-turn episodes)
    env_reward: float | None = None  # the sum of the environment's rewards (multi-turn episodes)
    answer: str | None = None  # the episode's final answer, when its environment gave one (EnvStep.answer)
    # MoE models: [prompt + tokens - 1, MoE layers, top_k] uint8, the experts each token (but the
    # last, never fed back) was routed to; models.moe.UNKNOWN_ROUTE where none was recorded.
    # None: a dense model, or no routes recorded.
    routes: "np.ndarray | None" = None
    # The ids the sampler kept at each token (sampling.keep_mask); None: none recorded.
    kept_sets: "KeptSets | None" = None
    seat: int | None = None  # a multi-seat episode's (env.seats): the seat whose turns these are

    def __post_init__(self) -> None:
        if not (len(self.token_ids) == len(self.logprobs) == len(self.versions)):
            raise ValueError(
                f"completion has {len(self.token_ids)} tokens, {len(self.logprobs)} logprobs "
                f"and {len(self.versions)} versions; they must match"
            )
        rows = len(self.prompt_ids) + len(self.token_ids) - 1
        if self.routes is not None and len(self.routes) != rows:
            raise ValueError(f"completion has {rows} tokens that were fed to the model but {len(self.routes)} routes")
        if self.kept_sets is not None:
            if len(self.kept_sets) != len(self.token_ids):
                raise ValueError(f"completion has {len(self.token_ids)} tokens but {len(self.kept_sets)} kept sets")
            if not self.kept_sets.holds(self.token_ids):
                raise ValueError("completion has a token outside the set its sampler kept")

    @property
    def whole_logprobs(self) -> list[float]:
        """log pi_behaviour of each token over the whole tempered vocabulary: `logprobs` (over what
        the sampler kept) plus the log of the probability of what it kept (data/kept_sets.py)."""
        if self.kept_sets is None:
            return self.logprobs
        return [lp + float(m) for lp, m in zip(self.logprobs, self.kept_sets.log_mass, strict=True)]

    @property
    def model_mask(self) -> list[bool]:
        """Which tokens the model sampled (True) rather than the environment wrote."""
        return [v != ENV_TOKEN for v in self.versions]

    @property
    def model_tokens(self) -> int:
        """How many tokens the model sampled (a multi-turn episode's environment tokens left out)."""
        return sum(self.model_mask)

    @property
    def played_reward(self) -> float:
        """`env_reward` of a completion an environment played (a multi-turn episode's); a
        RuntimeError for one it did not, which has no environment reward to give."""
        if self.env_reward is None:
            raise RuntimeError("this completion was not played in an environment: it has no env_reward")
        return self.env_reward

    @property
    def model_versions(self) -> list[int]:
        return [v for v in self.versions if v != ENV_TOKEN]

    @property
    def oldest_version(self) -> int:
        return min(self.model_versions, default=-1)

    @property
    def version_spread(self) -> int:
        versions = self.model_versions
        return max(versions) - min(versions) if versions else 0


@dataclass
class Episode:
    """A scored completion, ready to train on (forge_async/scoring/ makes them).

    Token t's advantage is `advantage` (the sequence's, group-relative from the reward)
    plus `token_advantages[t]` where a scorer gave per-token signal (distillation).
    """

    completion: Completion
    reward: float
    advantage: float
    group_id: int = 0  # episodes of one prompt's group share it
    token_advantages: list[float] | None = None  # one per completion token, added to `advantage`
    reference_logprobs: list[float] | None = None  # log pi_ref of each token, for the KL penalty
    # Per-episode figures from the scorers (reward/<name>, distill/reverse_kl), averaged per step.
    metrics: dict[str, float] | None = None

    def __post_init__(self) -> None:
        n = len(self.completion.token_ids)
        for name in ("token_advantages", "reference_logprobs"):
            values = getattr(self, name)
            if values is not None and len(values) != n:
                raise ValueError(f"episode has {n} tokens but {len(values)} {name}")

    @property
    def oldest_version(self) -> int:
        return self.completion.oldest_version

    def policy_age(self, trainer_version: int) -> int:
        return trainer_version - self.oldest_version
