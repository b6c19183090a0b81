"""The `rival` section: a second policy trained in the same run, playing env.seats' `rival` seats
(handles/rival.py). Everything not here (loss, sampling, batch_size, max_policy_age, the
trainer's other keys) is the trained policy's."""

from dataclasses import dataclass

from forge_async.config.checks import AT_LEAST_1, POSITIVE, check_range
from forge_async.config.keys import key


@dataclass
class RivalConfig:
    path: str | None = key(
        None,
        help=(
            "with a `rival` seat (env.seats): the rival's initial model, a Hugging Face checkpoint that "
            "shares the policy's tokenizer; null: the tiny model of `model.tiny` initialised from "
            "`rival.seed` ([multiplayer.md](multiplayer.md#two-trained-policies-the-rival-seat))"
        ),
        accepts="a checkpoint directory, or null",
    )
    seed: int | None = key(
        None,
        help="with a `rival` seat and no `rival.path`: the tiny rival's init seed; null: `model.tiny.seed + 1`",
        accepts="an integer, or null",
    )
    generators: int = key(
        1,
        help=(
            "with a `rival` seat: generator procs of the rival's own (vLLM engines on the trainer's node, "
            "after the trained policy's and a snapshot's), which play its seats' turns and take each "
            "version its trainer publishes"
        ),
        accepts=">= 1",
    )
    lr: float | None = key(
        None,
        help="with a `rival` seat: the rival's AdamW learning rate; null: `trainer.lr`",
        accepts="> 0, or null",
    )

    def __post_init__(self) -> None:
        check_range("rival.generators", self.generators, AT_LEAST_1)
        if self.lr is not None:
            check_range("rival.lr", self.lr, POSITIVE)
