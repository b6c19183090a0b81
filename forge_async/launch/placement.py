"""Which nodes run which meshes (node ranks as the launcher numbers them; 0 runs the controller)."""

from dataclasses import dataclass, field

from forge_async.errors import ConfigError


@dataclass
class PlacementConfig:
    # The trainer runs trainer.procs procs on each of these nodes (FSDP world = procs x nodes).
    trainer_hosts: list[int] = field(default_factory=lambda: [0])
    # generator.count generators are spread round-robin over these nodes.
    generator_hosts: list[int] = field(default_factory=lambda: [0])

    def check(self, nnodes: int) -> None:
        """Fail naming the key if a node rank does not exist in a run of `nnodes` nodes."""
        trainer = self.trainer_hosts
        if trainer and sorted(trainer) != list(range(min(trainer), min(trainer) + len(trainer))):
            raise ConfigError(f"placement.trainer_hosts={trainer}: must be consecutive node ranks")
        for key in ("trainer_hosts", "generator_hosts"):
            ranks = getattr(self, key)
            if not ranks:
                raise ConfigError(f"placement.{key} is empty: name at least one node rank")
            if len(set(ranks)) != len(ranks):
                raise ConfigError(f"placement.{key}={ranks}: a node rank appears twice")
            for rank in ranks:
                if not 0 <= rank < nnodes:
                    raise ConfigError(
                        f"placement.{key}={ranks}: node rank {rank} does not exist "
                        f"(this run has {nnodes} node{'s' if nnodes > 1 else ''}: 0..{nnodes - 1})"
                    )

    def generator_host(self, index: int) -> int:
        return self.generator_hosts[index % len(self.generator_hosts)]
