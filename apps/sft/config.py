"""The SFT run's config: mirrors configs/sft.yaml key for key.

Its sections are GRPO's (model, task, sampling, generator, trainer, loss, eval, weights,
checkpoint, placement, logging, trace: the same dataclasses, the same checks); what GRPO
alone has (groups, policy age, admission, the replay buffer's size, scorers, environments)
is not here. `run_config` is the run as the shared machinery (procs, meshes, weight
delivery) reads it: a GRPOConfig with these sections.
"""

from dataclasses import dataclass, field

from forge_async.actors.generator_config import GeneratorConfig, SamplingConfig
from forge_async.actors.trainer_config import TrainerConfig
from forge_async.checkpoint.config import CheckpointConfig
from forge_async.config import GRPOConfig
from forge_async.config_checks import AT_LEAST_1, check_range
from forge_async.errors import ConfigError
from forge_async.evaluation.config import EvalConfig
from forge_async.launch.placement import PlacementConfig
from forge_async.losses.config import LossConfig
from forge_async.metric_sinks import LoggingConfig
from forge_async.models.config import ModelConfig
from forge_async.scoring.config import ScorerConfig
from forge_async.tasks.config import MULTI_TURN_TASKS, TaskConfig
from forge_async.tracing import TraceConfig
from forge_async.weights.config import WeightsConfig


@dataclass
class SFTConfig:
    steps: int = 200  # optimizer steps
    seed: int = 0  # the demonstrations' draw
    prompts_per_step: int = 32  # the batch: demonstrations (prompt + answer) per optimizer step
    # A run directory to continue from its newest complete checkpoint, with its saved config.
    resume: str | None = None
    # Show third-party output (vLLM, Monarch, torch) on the console; otherwise it goes to RUN_DIR/logs/.
    verbose: bool = False
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    # max_tokens: the completion budget (evaluations generate up to it; a longer demonstration
    # fails the run, or is skipped with task.skip_bad_rows); the rest, evaluations' sampling.
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    generator: GeneratorConfig = field(default_factory=GeneratorConfig)  # evaluations' generator(s)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    loss: LossConfig = field(default_factory=lambda: LossConfig(objective="sft"))
    eval: EvalConfig = field(default_factory=EvalConfig)
    weights: WeightsConfig = field(default_factory=WeightsConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    trace: TraceConfig = field(default_factory=TraceConfig)

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
        if self.generator.dtype is None:
            self.generator.dtype = self.trainer.dtype
        if self.trainer.lr_total_steps is None:
            self.trainer.lr_total_steps = self.steps
        if self.trainer.lr_schedule != "constant" and self.trainer.lr_total_steps < self.steps:
            raise ConfigError(
                f"trainer.lr_total_steps={self.trainer.lr_total_steps} is less than steps={self.steps}: "
                f"the {self.trainer.lr_schedule} decay must span the run"
            )
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
