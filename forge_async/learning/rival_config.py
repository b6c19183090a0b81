"""The `rival` section: a second policy trained in the same run, playing env.seats' `rival` seats
(handles/rival.py). Everything not here (loss, sampling, batch_size, max_policy_age, the
trainer's other keys) is the trained policy's."""

from dataclasses import dataclass

from forge_async.config.checks import AT_LEAST_1, POSITIVE, check_range
from forge_async.config.keys import key
from forge_async.errors import ConfigError


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


def check_rival(config) -> None:
    """A run with a `rival` seat (config: GRPOConfig's), checked at start, one ConfigError naming
    the key: the rival's trainer and generators share the trained policy's one node and reach each
    other through its own shared-memory channel; it is not checkpointed, not LoRA-trained, not
    scored by model scorers, and evaluations play against a seat that is not trained."""
    seats = f"a `rival` seat (env.seats={list(config.env.seats)})"
    first = config.generator.count + config.snapshot_generators
    config.check_beside_trainer(seats, "rival.generators", first, config.rival.generators)
    placement = config.placement
    if placement.trainer_gpus is not None or placement.generator_gpus is not None:
        raise ConfigError(
            f"placement.trainer_gpus/generator_gpus: {seats} has no GPU placement of its own; leave both null"
        )
    if config.model.lora.rank is not None:
        raise ConfigError(
            f"model.lora.rank={config.model.lora.rank}: {seats} trains every weight; LoRA is not supported"
        )
    if config.resume is not None:
        raise ConfigError(f"resume={config.resume}: {seats} is not checkpointed, so its run cannot be resumed")
    for index, scorer in enumerate(config.scorers):
        if scorer.runs_a_model:
            raise ConfigError(
                f"scorers[{index}].kind={scorer.kind}: {seats} is scored by reward functions (and a reference KL "
                "in its trainer) only; a model scorer on procs of its own holds the policy's model"
            )
    if "rival" in config.eval.seats or (config.eval.enabled and not config.eval.seats):
        raise ConfigError(
            f"eval.seats={list(config.eval.seats)}: {seats} is trained as the run goes; evaluations play "
            "against a seat that is not, e.g. eval.seats=[policy,random] (or eval.every_steps=0)"
        )
