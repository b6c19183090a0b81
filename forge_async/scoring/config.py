"""The scoring tier's config (light: read before torch is imported). Guide: docs/scoring.md.

`scorers` is a list; each entry is one scorer:

    scorers:
      - {kind: reward}                                   # the task's own reward
      - {kind: reward, fn: mypkg.rewards:short, weight: 0.1}
      - {kind: reference_kl, coef: 0.05}                 # frozen initial policy, k3 penalty
      - {kind: reference_kl, coef: 0.05, runs_on: trainer}  # the same, computed in the trainer
      - {kind: teacher, path: /ckpt/teacher, coef: 1.0}  # on-policy distillation
"""

from dataclasses import dataclass

from forge_async.config.checks import AT_LEAST_1, POSITIVE, Range, check_choice, check_range
from forge_async.errors import ConfigError

SCORER_KINDS = ("reward", "reference_kl", "teacher")
MODEL_KINDS = ("reference_kl", "teacher")  # scorers that run a model
RUNS_ON = ("proc", "trainer")
ON_ERROR = ("fail", "drop")
TOKEN_BASELINES = ("group", "none")


@dataclass
class ScorerConfig:
    kind: str = "reward"  # reward | reference_kl | teacher
    # The scorer's name in metrics (reward/<name>) and errors; null: the function's name, or the kind.
    name: str | None = None
    # reward: "module:function" (sync or async; see docs/scoring.md); null = the task's own reward.
    fn: str | None = None
    batched: bool = False  # reward: fn takes lists (prompts, completions) and returns a list of rewards
    weight: float = 1.0  # reward: reward = sum of weight * score over reward scorers
    # reference_kl: beta of the k3 KL penalty in the loss; teacher: scale of the per-token advantage
    # log pi_teacher - log pi_student.
    coef: float = 1.0
    # reference_kl / teacher: a Hugging Face checkpoint directory (same tokenizer as the policy);
    # null = the run's initial policy (reference_kl only).
    path: str | None = None
    # reference_kl: proc = on a proc of its own, beside the trainer; trainer = a frozen copy inside the
    # trainer (sharded like the policy), one forward more per step, no proc to spawn or feed.
    runs_on: str = "proc"
    threads: int = 1  # torch threads of a model scorer's proc (CPU)
    gpu: int | None = None  # the GPU of node 0 a model scorer runs on; null = CUDA_VISIBLE_DEVICES as set

    def check(self, index: int) -> None:
        key = f"scorers[{index}]"
        check_choice(f"{key}.kind", self.kind, SCORER_KINDS)
        check_range(f"{key}.threads", self.threads, AT_LEAST_1)
        check_choice(f"{key}.runs_on", self.runs_on, RUNS_ON)
        if self.runs_on == "trainer" and self.kind != "reference_kl":
            raise ConfigError(f"{key}.runs_on=trainer: only a reference_kl scorer runs in the trainer")
        check_range(f"{key}.gpu", self.gpu, Range(0), nullable=True)
        if self.kind == "reward":
            check_range(f"{key}.weight", self.weight, Range())
            if self.path is not None:
                raise ConfigError(f"{key}.path: a reward scorer takes no checkpoint (fn names its function)")
            return
        check_range(f"{key}.coef", self.coef, POSITIVE)
        if self.fn is not None:
            raise ConfigError(f"{key}.fn: a {self.kind} scorer takes no fn (it runs a model)")
        if self.kind == "teacher" and self.path is None:
            raise ConfigError(f"{key}.path: a teacher scorer needs the teacher's checkpoint directory")

    @property
    def label(self) -> str:
        """The name metrics and errors use."""
        if self.name:
            return self.name
        if self.kind == "reward":
            return "task" if self.fn is None else self.fn.rpartition(":")[2]
        return self.kind

    @property
    def runs_a_model(self) -> bool:
        """Whether it runs a model on procs of its own (a reference in the trainer does not)."""
        return self.kind in MODEL_KINDS and self.runs_on == "proc"


@dataclass
class ScoringConfig:
    # A scorer that raises: fail = stop the run with one error naming the scorer, the prompt and
    # the completion; drop = drop that completion, counted under the reason scorer_error.
    on_error: str = "fail"
    # true: advantages include the group-relative advantage of the reward; false: rewards are only
    # measured and reported (on-policy distillation trains on the teacher's per-token signal alone).
    outcome_advantage: bool = True
    # Per-token rewards (the teacher's): group = less the group's mean at the same position (a
    # baseline, docs/scoring.md); none = as given.
    token_baseline: str = "group"

    def __post_init__(self) -> None:
        check_choice("scoring.on_error", self.on_error, ON_ERROR)
        check_choice("scoring.token_baseline", self.token_baseline, TOKEN_BASELINES)


def default_scorers() -> list[ScorerConfig]:
    return [ScorerConfig()]


def check_scorers(scorers: list[ScorerConfig]) -> None:
    """Each entry's values, then what spans entries: unique names, at most one model scorer of a kind."""
    if not scorers:
        raise ConfigError("scorers: the list is empty; at least one scorer must give a reward")
    for index, scorer in enumerate(scorers):
        scorer.check(index)
    labels = [s.label for s in scorers]
    for label in labels:
        if labels.count(label) > 1:
            raise ConfigError(f"scorers: two scorers are named {label!r}; give one a name (scorers[i].name)")
    for kind in MODEL_KINDS:
        if sum(s.kind == kind for s in scorers) > 1:
            raise ConfigError(f"scorers: more than one {kind} scorer")
    if not any(s.kind == "reward" for s in scorers):
        raise ConfigError("scorers: no reward scorer; add {kind: reward} (its weight may be 0)")
