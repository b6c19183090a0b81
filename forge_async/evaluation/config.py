"""The eval config section (light: read before torch is imported). Guide: docs/evaluation.md."""

from dataclasses import dataclass

from forge_async.config.keys import key
from forge_async.config.checks import AT_LEAST_0, AT_LEAST_1, Range, check_range


@dataclass
class EvalConfig:
    every_steps: int = key(
        25,
        help="evaluate at the start, every this many steps and after the last step; 0 = off",
        accepts=">= 0",
    )
    prompts: int = key(
        64,
        help=(
            "held-out prompts: built-in tasks set aside a fixed split never trained on (at most half "
            "their distinct prompts); datasets: the first rows of `eval.dataset`, or a fixed split of "
            "`task.dataset`"
        ),
        accepts=">= 1",
    )
    samples_per_prompt: int = key(1, help="k of `eval/pass@k` and mean@k", accepts=">= 1")
    temperature: float | None = key(
        None,
        help="null: greedy for k = 1, else `sampling.temperature`",
        accepts=">= 0, or null",
    )
    pass_reward: float = key(
        1.0,
        help="a sample passes when its reward reaches this",
        accepts="a finite number",
    )
    dataset: str | None = key(
        None,
        help="`task.name=dataset` only: held-out prompts, same columns as `task.dataset`",
        accepts="a file or save_to_disk directory",
    )
    seats: list[str] = key(
        [],
        help=(
            "with `env.seats`: the seats evaluations play, e.g. `[policy,random]` for the win rate against a "
            "random player while training plays itself ([multiplayer.md](multiplayer.md)); "
            "[]: `env.seats`"
        ),
        accepts="[], or as many seats as `env.seats`, at least one `policy`",
    )

    def __post_init__(self) -> None:
        check_range("eval.every_steps", self.every_steps, AT_LEAST_0, note="0 = off")
        check_range("eval.prompts", self.prompts, AT_LEAST_1)
        check_range("eval.samples_per_prompt", self.samples_per_prompt, AT_LEAST_1)
        check_range("eval.temperature", self.temperature, Range(0), nullable=True, note="null = greedy for k=1")
        check_range("eval.pass_reward", self.pass_reward, Range())

    @property
    def enabled(self) -> bool:
        return self.every_steps > 0
