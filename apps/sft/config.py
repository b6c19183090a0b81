"""The SFT run's config: every key of apps.sft and its default (configs/sft.yaml composes it as
its schema).

Its sections are GRPO's (model, task, sampling, generator, trainer, loss, eval, weights,
checkpoint, placement, logging, trace: the same dataclasses, the same checks); what GRPO
alone has (groups, policy age, admission, the replay buffer's size, scorers, environments)
is not here: the run brings up a trainer and generators alone (`RunConfig.plan()`, mesh/run_plan.py).
"""

from dataclasses import dataclass, field

from forge_async.controller.config import RunConfig
from forge_async.config.keys import key
from forge_async.config.checks import AT_LEAST_1, check_range
from forge_async.errors import ConfigError
from forge_async.losses.config import LossConfig
from forge_async.process.interpreter import python
from forge_async.tasks.config import MULTI_TURN_TASKS


@dataclass
class SFTConfig(RunConfig):
    steps: int = key(100, help="optimizer steps", accepts=">= 1", resumable=True)
    prompts_per_step: int = key(
        32, help="the batch: demonstrations (prompt + answer) per optimizer step", accepts=">= 1"
    )
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
                f"the policy-gradient objective is {python()} -m apps.grpo"
            )
        if self.task.name in (*MULTI_TURN_TASKS, "seeds"):
            raise ConfigError(
                f"task.name={self.task.name}: its episodes are played turn by turn with an environment, "
                "there is no single completion to imitate; apps.sft takes the digit tasks, dataset or reasoning_gym"
            )
        if self.loss.max_tokens is None:  # constant aggregation: the completion budget
            self.loss.max_tokens = self.sampling.max_tokens
        self.resolve(self.steps)  # an evaluation's calls, one at a time
        self.check_sections()
