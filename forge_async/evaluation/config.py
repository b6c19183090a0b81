"""The eval config section (light: read before torch is imported). Guide: docs/evaluation.md."""

from dataclasses import dataclass

from forge_async.config.checks import AT_LEAST_0, AT_LEAST_1, Range, check_range


@dataclass
class EvalConfig:
    every_steps: int = 25  # evaluate at the start, every this many steps, and at the end; 0 = off
    # Held-out prompts per evaluation: built-in tasks set aside a fixed split never sampled for
    # training; datasets take the first rows of eval.dataset, or else a fixed split of task.dataset.
    prompts: int = 64
    samples_per_prompt: int = 1  # k of pass@k and mean@k
    # null: 0 (greedy) with one sample per prompt, else sampling.temperature
    temperature: float | None = None
    pass_reward: float = 1.0  # a sample passes (pass@k) when its reward reaches this
    dataset: str | None = None  # held-out prompts for task.name=dataset (same columns as task.dataset)

    def __post_init__(self) -> None:
        check_range("eval.every_steps", self.every_steps, AT_LEAST_0, note="0 = off")
        check_range("eval.prompts", self.prompts, AT_LEAST_1)
        check_range("eval.samples_per_prompt", self.samples_per_prompt, AT_LEAST_1)
        check_range("eval.temperature", self.temperature, Range(0), nullable=True, note="null = greedy for k=1")
        check_range("eval.pass_reward", self.pass_reward, Range())

    @property
    def enabled(self) -> bool:
        return self.every_steps > 0
