"""Which nodes run which meshes (node ranks as the launcher numbers them; 0 runs the controller),
which GPUs of its node each proc sees (CUDA_VISIBLE_DEVICES, set in the proc's bootstrap), and
how the procs of a node share its cores as they start."""

from dataclasses import dataclass

from forge_async.config.keys import key
from forge_async.config.checks import Range, check_range
from forge_async.errors import ConfigError
from forge_async.mesh.roles import Kind, Role


@dataclass
class PlacementConfig:
    trainer_hosts: list[int] = key(
        [0],
        help="node ranks running the trainer (`trainer.procs` procs on each)",
        accepts="consecutive node ranks of the run",
        resumable=True,
    )
    generator_hosts: list[int] = key(
        [0],
        help="node ranks the generators are spread over, round-robin",
        accepts="node ranks of the run, each once",
        resumable=True,
    )
    trainer_gpus: list[int] | None = key(
        None,
        help=(
            "`CUDA_VISIBLE_DEVICES` of the trainer's procs on each trainer node; rank `LOCAL_RANK` takes "
            "the `LOCAL_RANK`-th. null = left as the node has it"
        ),
        accepts="GPU indices, one per trainer proc (`trainer.procs` of them), each once; or null",
        resumable=True,
    )
    generator_gpus: list[int] | None = key(
        None,
        help=(
            "one GPU (`CUDA_VISIBLE_DEVICES`) per generator, in the order the generators land on their "
            "node. null = left as the node has it (every generator then uses the node's GPU 0)"
        ),
        accepts="GPU indices, at least one per generator on a node (unless `share_gpus`), each once; or null",
        resumable=True,
    )
    share_gpus: bool = key(
        False,
        help=(
            "allow the trainer and generators of one node on the same GPU(s), and several generators on "
            "one GPU (round-robin); their memory must fit together (`generator.gpu_memory_utilization`)"
        ),
        resumable=True,
    )
    import_nice: int = key(
        5,
        help=(
            "niceness at which every proc but the generators runs its start-up imports (`os.nice` in its "
            "bootstrap's thread; Linux keeps a niceness per thread, so the actor's own threads keep the "
            "usual priority). On shared cores the generator's import of vLLM is the critical path of "
            "start-up and the others wait for it anyway: on the 2-core box the first step came 0.65-1.25 "
            "s sooner, steady-state steps/s unchanged "
            "([benchmarks.md](benchmarks.md#start-up-and-teardown-benchmarkspipelinestartuppy)). 0 = all procs "
            "alike"
        ),
        accepts="0-19",
        resumable=True,
    )

    def __post_init__(self) -> None:
        check_range("placement.import_nice", self.import_nice, Range(0, 19), note="0 = all procs alike")

    def check(self, nnodes: int) -> None:
        """Fail naming the key if a node rank does not exist in a run of `nnodes` nodes."""
        trainer = self.trainer_hosts
        if trainer and sorted(trainer) != list(range(min(trainer), min(trainer) + len(trainer))):
            raise ConfigError(f"placement.trainer_hosts={trainer}: must be consecutive node ranks")
        for name in ("trainer_hosts", "generator_hosts"):
            ranks = getattr(self, name)
            if not ranks:
                raise ConfigError(f"placement.{name} is empty: name at least one node rank")
            if len(set(ranks)) != len(ranks):
                raise ConfigError(f"placement.{name}={ranks}: a node rank appears twice")
            for rank in ranks:
                if not 0 <= rank < nnodes:
                    raise ConfigError(
                        f"placement.{name}={ranks}: node rank {rank} does not exist "
                        f"(this run has {nnodes} node{'s' if nnodes > 1 else ''}: 0..{nnodes - 1})"
                    )

    def generator_host(self, index: int) -> int:
        return self.generator_hosts[index % len(self.generator_hosts)]

    def generators_per_node(self, count: int) -> int:
        """The most generators any node runs, `count` spread round-robin."""
        return -(-count // len(self.generator_hosts))

    def visible_gpus(self, role: Role) -> str | None:
        """CUDA_VISIBLE_DEVICES for `role`'s procs (the trainer's, a generator's); None: leave it."""
        if role.kind is Kind.TRAINER and self.trainer_gpus is not None:
            return ",".join(map(str, self.trainer_gpus))
        if role.kind is Kind.GENERATOR and self.generator_gpus is not None:
            slot = role.number // len(self.generator_hosts)  # among its node's
            return str(self.generator_gpus[slot % len(self.generator_gpus)])
        return None

    def check_gpus(self, trainer_procs: int, generator_count: int) -> None:
        """Fail naming the key if a GPU list is malformed, does not match the procs it serves,
        or gives a trainer's GPU to a generator on the same node (unless share_gpus)."""
        for name in ("trainer_gpus", "generator_gpus"):
            _check_gpu_list(f"placement.{name}", getattr(self, name))
        trainer, generator = self.trainer_gpus, self.generator_gpus
        if trainer is not None and len(trainer) != trainer_procs:
            raise ConfigError(
                f"placement.trainer_gpus={trainer} names {len(trainer)} GPU(s) for "
                f"trainer.procs={trainer_procs}: one GPU per trainer proc"
            )
        if self.share_gpus:
            return
        most = self.generators_per_node(generator_count)
        if generator is not None and len(generator) < most:
            raise ConfigError(
                f"placement.generator_gpus={generator} names {len(generator)} GPU(s) for {most} generators "
                f"on a node (generator.count={generator_count} over placement.generator_hosts="
                f"{self.generator_hosts}): one GPU per generator, or placement.share_gpus=true"
            )
        self._check_no_shared_gpus()

    def _check_no_shared_gpus(self) -> None:
        """On a node that runs both, trainer and generators get GPUs of their own."""
        nodes = sorted(set(self.trainer_hosts) & set(self.generator_hosts))
        trainer, generator = self.trainer_gpus, self.generator_gpus
        if not nodes or (trainer is None and generator is None):
            return
        if trainer is None or generator is None:
            unset = "trainer_gpus" if trainer is None else "generator_gpus"
            raise ConfigError(
                f"placement.{unset} is null while the other is set, and node(s) {nodes} run both the "
                "trainer and generators: the null side would see every GPU (and use GPU 0); set both"
            )
        if shared := sorted(set(trainer) & set(generator)):
            raise ConfigError(
                f"placement.trainer_gpus={trainer} and placement.generator_gpus={generator} share GPU(s) "
                f"{shared} on node(s) {nodes}: give them distinct GPUs, or set placement.share_gpus=true "
                "(with generator.gpu_memory_utilization low enough for both)"
            )


def _check_gpu_list(key: str, gpus: list[int] | None) -> None:
    if gpus is None:
        return
    if not gpus:
        raise ConfigError(f"{key}=[] is empty: name GPU indices, or null to leave CUDA_VISIBLE_DEVICES alone")
    if len(set(gpus)) != len(gpus):
        raise ConfigError(f"{key}={gpus}: a GPU appears twice")
    if min(gpus) < 0:
        raise ConfigError(f"{key}={gpus}: GPU indices are >= 0")
