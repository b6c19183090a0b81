"""The scoring tier's config (light: read before torch is imported). Guide: docs/scoring.md.

`scorers` is a list; each entry is one scorer:

    scorers:
      - {kind: reward}                                   # the task's own reward
      - {kind: reward, fn: mypkg.rewards:short, weight: 0.1}
      - {kind: reference_kl, coef: 0.05}                 # frozen initial policy, k3 penalty
      - {kind: reference_kl, coef: 0.05, runs_on: trainer}  # the same, computed in the trainer
      - {kind: teacher, path: /ckpt/teacher, coef: 1.0}  # on-policy distillation
      - {kind: teacher, model: self, lag: 5, refresh_steps: 10}  # self-distillation: the policy 5 steps ago
"""

from dataclasses import dataclass
from typing import Literal

from forge_async.config.choices import check_choices
from forge_async.config.keys import key
from forge_async.config.checks import AT_LEAST_1, POSITIVE, Range, check_range
from forge_async.errors import ConfigError

MODEL_KINDS = ("reference_kl", "teacher")  # scorers that run a model


@dataclass
class ScorerConfig:
    kind: Literal["reward", "reference_kl", "teacher"] = key(
        "reward",
        help=(
            "`reward`: a reward function (`fn`, weighted); `reference_kl`: a KL penalty to a reference "
            "model; `teacher`: a distillation teacher's per-token advantage ([scoring.md](scoring.md))"
        ),
    )
    name: str | None = key(
        None, help="the scorer's name in metrics (`reward/<name>`) and errors; null: the function's name, or the kind"
    )
    fn: str | None = key(
        None,
        help="`reward`: `module:function`, sync or async ([scoring.md](scoring.md)); null = the task's own reward",
        accepts="`module:function`, or null",
    )
    batched: bool = key(False, help="`reward`: `fn` takes lists (prompts, completions) and returns a list of rewards")
    weight: float = key(
        1.0, help="`reward`: the reward is the sum of weight * score over the reward scorers", accepts="a finite number"
    )
    coef: float = key(
        1.0,
        help=(
            "`reference_kl`: beta of the k3 KL penalty in the loss; `teacher`: the scale of the per-token "
            "advantage log pi_teacher - log pi_student"
        ),
        accepts="> 0",
    )
    path: str | None = key(
        None,
        help=(
            "`reference_kl`, `teacher`: a Hugging Face checkpoint directory (the policy's tokenizer); "
            "null = the run's initial policy (`reference_kl` only)"
        ),
        accepts="a directory, or null",
    )
    model: Literal["path", "self"] = key(
        "path",
        help=(
            "`teacher`: `path`, the checkpoint at `path`; `self`, the policy being trained as it was `lag` "
            "steps before each refresh, fed the trainer's published weights every `refresh_steps` "
            "([scoring.md](scoring.md#a-lagged-self-as-the-teacher-self-distillation))"
        ),
    )
    lag: int = key(
        0,
        help=(
            "`teacher` with `model: self`: at each refresh the teacher takes the version published this many "
            "steps before (taken then, kept aside until the refresh)"
        ),
        accepts="0 to refresh_steps",
    )
    refresh_steps: int = key(
        10,
        help="`teacher` with `model: self`: the teacher is refreshed when the trainer publishes a multiple of this",
        accepts=">= 1",
    )
    runs_on: Literal["proc", "trainer"] = key(
        "proc",
        help=(
            "`reference_kl`: `proc`, on a proc of its own beside the trainer; `trainer`, a frozen copy "
            "inside the trainer (sharded like the policy), one forward more per step, no proc to spawn or feed"
        ),
    )
    threads: int = key(1, help="torch threads of a model scorer's proc (CPU)", accepts=">= 1")
    gpu: int | None = key(
        None,
        help="the GPU of node 0 a model scorer runs on; null = CUDA_VISIBLE_DEVICES as set",
        accepts=">= 0, or null",
    )

    def check(self, index: int) -> None:
        prefix = f"scorers[{index}]"
        check_choices(self, prefix)
        check_range(f"{prefix}.threads", self.threads, AT_LEAST_1)
        if self.runs_on == "trainer" and self.kind != "reference_kl":
            raise ConfigError(f"{prefix}.runs_on=trainer: only a reference_kl scorer runs in the trainer")
        check_range(f"{prefix}.gpu", self.gpu, Range(0), nullable=True)
        if self.is_self:
            self._check_self_teacher(prefix)
        if self.kind == "reward":
            check_range(f"{prefix}.weight", self.weight, Range())
            if self.path is not None:
                raise ConfigError(f"{prefix}.path: a reward scorer takes no checkpoint (fn names its function)")
            return
        check_range(f"{prefix}.coef", self.coef, POSITIVE)
        if self.fn is not None:
            raise ConfigError(f"{prefix}.fn: a {self.kind} scorer takes no fn (it runs a model)")
        if self.kind == "teacher" and self.path is None and not self.is_self:
            raise ConfigError(
                f"{prefix}.path: a teacher scorer needs the teacher's checkpoint directory (or model: self)"
            )

    def _check_self_teacher(self, prefix: str) -> None:
        if self.kind != "teacher":
            raise ConfigError(f"{prefix}.model=self: only a teacher scorer is the policy itself")
        if self.path is not None:
            raise ConfigError(f"{prefix}.path={self.path}: a model: self teacher is the policy, it takes no path")
        check_range(f"{prefix}.refresh_steps", self.refresh_steps, AT_LEAST_1)
        check_range(f"{prefix}.lag", self.lag, Range(0, self.refresh_steps), note=f"refresh_steps={self.refresh_steps}")

    @property
    def label(self) -> str:
        """The name metrics and errors use."""
        if self.name:
            return self.name
        if self.kind == "reward":
            return "task" if self.fn is None else self.fn.rpartition(":")[2]
        return self.kind

    @property
    def is_self(self) -> bool:
        """Whether it is the policy itself, refreshed from the trainer's published weights."""
        return self.model == "self"

    @property
    def runs_a_model(self) -> bool:
        """Whether it runs a model on procs of its own (a reference in the trainer does not)."""
        return self.kind in MODEL_KINDS and self.runs_on == "proc"


@dataclass
class ScoringConfig:
    on_error: Literal["fail", "drop"] = key(
        "fail",
        help=(
            "a scorer that raises: stop naming scorer, prompt and completion (after saving), or drop the "
            "completion, counted as `scorer_error`"
        ),
    )
    outcome_advantage: bool = key(True, help="false: rewards are reported, not trained on (pure distillation)")
    token_baseline: Literal["group", "none"] = key(
        "group",
        help=(
            "per-token rewards (the teacher's) less the mean at the same position of the group's other "
            "completions with a model token there (leave-one-out), or as given "
            "([scoring.md](scoring.md#the-interface))"
        ),
    )

    def __post_init__(self) -> None:
        check_choices(self, "scoring")


def default_scorers() -> list[ScorerConfig]:
    """The task's own reward, alone (a composed run's; apps.grpo's default adds a reference KL)."""
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
