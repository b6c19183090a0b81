"""The SFT run's config: mirrors configs/sft.yaml key for key.

Its sections are GRPO's (model, task, sampling, generator, trainer, loss, eval, weights,
checkpoint, placement, logging, trace: the same dataclasses, the same checks); what GRPO
alone has (groups, policy age, admission, the replay buffer's size, scorers, environments)
is not here. `run_config` is the run as the shared machinery (procs, meshes, weight
delivery) reads it: a GRPOConfig with these sections.
"""

from dataclasses import dataclass, field

from forge_async.controller.config import GRPOConfig, RunConfig
from forge_async.config.checks import AT_LEAST_1, check_range
from forge_async.errors import ConfigError
from forge_async.losses.config import LossConfig
from forge_async.scoring.config import ScorerConfig
from forge_async.tasks.config import MULTI_TURN_TASKS


@dataclass
class SFTConfig(RunConfig):
    steps: int = 100  # optimizer steps
    prompts_per_step: int = 32  # the batch: demonstrations (prompt + answer) per optimizer step
    # seed: the demonstrations' draw. sampling.max_tokens: the completion budget (evaluations
    # generate up to it; a longer demonstration fails the run, or is skipped with
    # task.skip_bad_rows); the rest of sampling, evaluations'. generator: evaluations' generator(s).
    loss: LossConfig = field(default_factory=lambda: LossConfig(objective="sft"))

    def __post_init__(self) -> None:
        check_range("steps", self.steps, AT_LEAST_1)
        check_range("prompts_per_step", self.prompts_per_step, AT_LEAST_1)
        if self.loss.objective != "sft":
            raise ConfigError(
                f"loss.objective={self.loss.objective}: apps.sft trains on demonstrations (sft); "
                "the policy-gradient objective is python -m apps.grpo"
            )
        if self.task.name in MULTI_TURN_TASKS:
            raise ConfigError(
                f"task.name={self.task.name}: its episodes are played turn by turn with an environment, "
                "there is no single completion to imitate; apps.sft takes the digit tasks, dataset or reasoning_gym"
            )
        if self.loss.max_tokens is None:  # constant aggregation: the completion budget
            self.loss.max_tokens = self.sampling.max_tokens
        self.resolve_trainer(self.steps)
        self.run_config()  # what spans sections (GPUs, eval.dataset) is checked where GRPO checks it

    def run_config(self) -> GRPOConfig:
        """The run as procs, meshes and weight delivery read it: these sections, one reward scorer
        (the evaluations' reward), no reference or environment; the trainer's loss is this one
        (set after GRPOConfig's checks, which admit only the grpo objective for apps.grpo)."""
        view = GRPOConfig(
            mode="sync", steps=self.steps, seed=self.seed, resume=self.resume, verbose=self.verbose,
            model=self.model, task=self.task, sampling=self.sampling, generator=self.generator,
            trainer=self.trainer, eval=self.eval, scorers=[ScorerConfig(kind="reward")],
            weights=self.weights, checkpoint=self.checkpoint, placement=self.placement,
            logging=self.logging, trace=self.trace,
        )
        view.loss = self.loss
        return view
