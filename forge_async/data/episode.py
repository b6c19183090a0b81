"""What flows between actors: completions from generators, episodes to the trainer.

Every generated token carries the policy version that produced it. A sample's
policy age, at the moment the trainer would learn from it, is the trainer's
version minus the oldest token version in the sample.
"""

from dataclasses import dataclass


@dataclass
class Completion:
    """One sampled continuation of a prompt, as the generator produced it."""

    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]  # log pi_behaviour of each sampled token
    versions: list[int]  # policy version that produced each token
    text: str
    finish_reason: str  # "stop" (EOS or stop string) or "length"

    def __post_init__(self) -> None:
        if not (len(self.token_ids) == len(self.logprobs) == len(self.versions)):
            raise ValueError(
                f"completion has {len(self.token_ids)} tokens, {len(self.logprobs)} logprobs "
                f"and {len(self.versions)} versions; they must match"
            )

    @property
    def oldest_version(self) -> int:
        return min(self.versions) if self.versions else -1

    @property
    def version_spread(self) -> int:
        return max(self.versions) - min(self.versions) if self.versions else 0


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
