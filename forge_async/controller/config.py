"""The GRPO run's configuration: every key of apps.grpo and its default, as dataclasses
(configs/grpo.yaml composes them as its schema).

Hydra validates every override against these types (an unknown key or a value
of the wrong type fails at start, naming the key); each section's `__post_init__`
checks its values' ranges (forge_async/config/checks.py) and names the offending
key; GRPOConfig's also checks what spans sections.
"""

import json
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol, runtime_checkable
from pathlib import Path

from forge_async.checkpoint.config import CheckpointConfig
from forge_async.config.choices import check_choices
from forge_async.config.keys import key
from forge_async.config.callables import load_callable
from forge_async.config.checks import (
    AT_LEAST_0,
    AT_LEAST_1,
    Range,
    check_range,
)
from forge_async.data.config import FilterConfig
from forge_async.envs.config import EnvConfig
from forge_async.envs.registry import check_environment_name
from forge_async.envs.seats import POLICY, RIVAL, SNAPSHOT, check_seats
from forge_async.envs.textarena import TEXTARENA
from forge_async.errors import ConfigError
from forge_async.process.interpreter import python
from forge_async.evaluation.config import EvalConfig
from forge_async.generation.config import GeneratorConfig, SamplingConfig
from forge_async.learning.config import TrainerConfig
from forge_async.learning.rival_config import RivalConfig
from forge_async.losses.config import ImportanceConfig, LossConfig
from forge_async.mesh.config import PlacementConfig
from forge_async.mesh.run_plan import BufferSpec, RivalSpec, RunPlan, SnapshotSpec
from forge_async.models.config import DENSE_MLP_PROJECTIONS, ModelConfig, MoeConfig
from forge_async.models.shape import ModelShape
from forge_async.observability.config import LoggingConfig, TraceConfig
from forge_async.rollout.config import StallConfig
from forge_async.scoring.config import (
    ScorerConfig,
    ScoringConfig,
    check_scorers,
)
from forge_async.tasks.config import MULTI_TURN_TASKS, TaskConfig
from forge_async.weights.config import WeightsConfig


@runtime_checkable
class AppKeys(Protocol):
    """The keys every app's config adds to RunConfig's sections, each with the app's own default
    (GRPOConfig below; apps/sft/config.py's SFTConfig): a run's config is always an app's."""

    steps: int
    prompts_per_step: int
    loss: LossConfig


@dataclass
class RunConfig:
    """The sections every app's run has (apps.grpo, apps.sft): the model, where prompts come from,
    sampling, the generator and trainer, evaluation, weights, checkpoints, placement, logging."""

    seed: int = key(0, help="prompt sampling seed")
    resume: str | None = key(
        None,
        help=("continue that run from its newest checkpoint, with its saved config ([checkpoints.md](checkpoints.md))"),
        accepts="a run directory, or null",
    )
    verbose: bool = key(
        False,
        help=("show third-party output (vLLM, Monarch, torch) on the console; otherwise it goes to `RUN_DIR/logs/`"),
        resumable=True,
    )
    model: ModelConfig = field(default_factory=ModelConfig)
    # Mixture-of-Experts models: rollout routing replay (docs/moe.md).
    moe: MoeConfig = field(default_factory=MoeConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    generator: GeneratorConfig = field(default_factory=GeneratorConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    # Evaluation on held-out prompts during training: docs/evaluation.md.
    eval: EvalConfig = field(default_factory=EvalConfig)
    weights: WeightsConfig = field(default_factory=WeightsConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    trace: TraceConfig = field(default_factory=TraceConfig)

    def resolve(self, steps: int, multi_turn: bool = False) -> None:
        """What null means, resolved once: generator.dtype, the trainer's; generator.calls_at_once
        (`calls_at_once_for`); the LR schedule spans `steps` unless told otherwise, and a decay
        shorter than the run is refused (TorchTitan's would go on below min_lr_factor: negative,
        for linear)."""
        if self.generator.dtype is None:
            self.generator.dtype = self.trainer.dtype
        self.generator.calls_at_once = self.generator.calls_at_once_for(multi_turn)
        if self.trainer.lr_total_steps is None:
            self.trainer.lr_total_steps = steps
        if self.trainer.lr_schedule != "constant" and self.trainer.lr_total_steps < steps:
            raise ConfigError(
                f"trainer.lr_total_steps={self.trainer.lr_total_steps} is less than steps={steps}: "
                f"the {self.trainer.lr_schedule} decay must span the run"
            )

    def plan(self) -> RunPlan:
        """What the run brings up and what each role is built from (mesh/run_plan.py): a trainer with
        the run's loss and generators; GRPO adds its own roles. Built once the config is final (the
        weights' channel resolved)."""
        if not isinstance(self, AppKeys):
            raise TypeError(f"{type(self).__name__} is no app's config: it has no steps, prompts_per_step or loss")
        return RunPlan(
            placement=self.placement,
            trainer=self.trainer,
            generator=self.generator,
            sampling=self.sampling,
            weights=self.weights,
            model=self.model,
            moe=self.moe,
            trace=self.trace.enabled,
            loss=self.loss,
        )

    @property
    def resumable(self) -> bool:
        """Whether `resume=RUN_DIR` can continue this run."""
        return True

    def check_sections(self) -> None:
        """What spans sections: GPUs for the trainer and generators, a trainer on several hosts and its
        weight channel, a held-out file and its task."""
        self.placement.check_gpus(self.trainer.procs, self.generator.count)
        trainer_hosts = self.placement.trainer_hosts
        if len(trainer_hosts) > 1 and self.weights.transport == "shm" and self.weights.cross_host == "gloo":
            raise ConfigError(
                f"placement.trainer_hosts={trainer_hosts}: weights.cross_host=gloo sends each version from the "
                "trainer's one host; a trainer on several hosts needs weights.cross_host=torchstore"
            )
        if self.eval.dataset is not None and self.task.name != "dataset":
            raise ConfigError(
                f"eval.dataset={self.eval.dataset}: held-out files are for task.name=dataset; "
                f"task.name={self.task.name} sets aside held-out prompts of its own"
            )

    def check_paths(self) -> None:
        """Fail naming the key if an input file or directory is missing, or a reward function cannot
        be imported: called before any proc starts, so a typo costs a second, not a start-up (the
        loaders check again, in detail). Then whether the tokenizer can read the inputs."""
        self._check_inputs()
        self.check_text_on_digits()

    def _check_inputs(self) -> None:
        if self.model.path is not None and not Path(self.model.path).expanduser().is_dir():
            raise ConfigError(f"model.path: checkpoint directory not found: {self.model.path}")
        self.check_model()
        if self.task.name == "dataset" and self.task.dataset and not Path(self.task.dataset).exists():
            raise ConfigError(f"task.dataset not found: {self.task.dataset}")
        if self.eval.dataset is not None and not Path(self.eval.dataset).exists():
            raise ConfigError(f"eval.dataset not found: {self.eval.dataset}")
        if self.task.name == "dataset":
            load_callable(self.task.reward_fn, "task.reward_fn")
        if self.task.name == "reasoning_gym":
            from forge_async.tasks.reasoning_gym import (
                check_config,  # reasoning-gym: only for this task
            )

            check_config(self.task.reasoning_gym)

    def check_text_on_digits(self) -> None:
        """Text prompts or observations on the tiny model's digit tokenizer, which reads digits only:
        the task would fail once the procs are up, or every episode be dropped."""
        if self.model.path is not None or self.model.tiny.tokenizer != "digits":
            return
        text = self._text_input()
        if text is not None:
            raise ConfigError(
                f"{text}, which the tiny model's digit tokenizer (model.tiny.tokenizer=digits) cannot read: "
                "set model.tiny.tokenizer=bytes"
            )

    def _text_input(self) -> str | None:
        """What feeds the model text, as the start of a sentence naming its key; None: digits (or unknown)."""
        if self.task.name == "reasoning_gym":
            return "task.name=reasoning_gym: its questions are text"
        if self.task.name == "dataset" and self.task.dataset and self.task.dataset.endswith(".jsonl"):
            prompt = _first_jsonl_prompt(Path(self.task.dataset), self.task.prompt_column)
            if prompt is not None and not prompt.isdigit():
                return f"task.dataset={self.task.dataset}: its first prompt {prompt[:40]!r} is text"
        return None

    def check_model(self) -> None:
        """The settings that need a Mixture-of-Experts model, or a dense one, against model.path's
        config.json (whose architecture is checked here too) or model.tiny.family."""
        if self.model.path is None:
            tiny = self.model.tiny
            num_experts = tiny.num_experts if tiny.family == "qwen3_moe" else None
        else:
            config_file = Path(self.model.path).expanduser() / "config.json"
            if not config_file.is_file():
                return  # the checkpoint loader names what is missing
            shape = ModelShape.from_hf_config(json.loads(config_file.read_text()), f"model.path={self.model.path}")
            num_experts = shape.moe.num_experts if shape.moe is not None else None
        moe = num_experts is not None
        self._check_expert_parallel(num_experts)
        if self.moe.replay and not moe:
            raise ConfigError(
                "moe.routing_replay=rollout: the model is dense (no Mixture-of-Experts layers whose routes "
                "could be replayed); set moe.routing_replay=off"
            )
        if moe and self.generator.cpu_weights == "packed":
            raise ConfigError(
                "generator.cpu_weights=packed: vLLM's layer-wise reload leaves a Mixture-of-Experts model's CPU "
                "experts in the old layout after a weight swap; use generator.cpu_weights=plain"
            )
        dense_targets = [t for t in self.model.lora.targets if t in DENSE_MLP_PROJECTIONS]
        if moe and self.model.lora.enabled and dense_targets:
            raise ConfigError(
                f"model.lora.targets: {', '.join(dense_targets)} are dense MLP projections; a Mixture-of-Experts "
                "model's experts take no adapters (they stay frozen): set model.lora.targets=[q_proj,k_proj,v_proj,o_proj]"
            )

    def _check_expert_parallel(self, num_experts: int | None) -> None:
        """trainer.expert_parallel splits every MoE layer's experts evenly across that many ranks."""
        ep = self.trainer.expert_parallel
        if ep == 1:
            return
        if num_experts is None:
            raise ConfigError(
                f"trainer.expert_parallel={ep}: the model is dense (no Mixture-of-Experts layers whose "
                "experts could be split across ranks); set trainer.expert_parallel=1"
            )
        if num_experts % ep:
            raise ConfigError(
                f"trainer.expert_parallel={ep} must divide the model's num_experts={num_experts} "
                "(each rank holds an equal share of every layer's experts)"
            )


@dataclass
class GRPOConfig(RunConfig):
    mode: Literal["async", "sync"] = key(
        "async",
        help="`async`: generation and training overlap. `sync`: generate a batch, train, sync weights, repeat",
    )
    steps: int = key(400, help="optimizer steps", accepts=">= 1", resumable=True)
    max_policy_age: int = key(
        1,
        help=("samples whose oldest token is more than this many versions behind the trainer are dropped (counted)"),
        accepts=">= 0",
    )
    admission_control: bool = key(
        True,
        help=("admit generation only when it can be trained within `max_policy_age` ([staleness.md](staleness.md))"),
    )
    group_size: int = key(
        8,
        help="completions per prompt (GRPO group); group-relative advantages need at least two",
        accepts=">= 2",
    )
    prompts_per_step: int = key(16, help="batch = `prompts_per_step * group_size` episodes", accepts=">= 1")
    rollout_workers: int = key(
        2,
        help="generate calls kept in flight (async mode), spread over the generators",
        accepts=">= 1",
    )
    rollout_routing: Literal["least_outstanding", "round_robin"] = key(
        "least_outstanding",
        help=(
            "which generator each call goes to: the live one that would finish it first (its samples in "
            "flight plus the call's, at the pace it has kept so far: samples returned per second with a "
            "call in flight), chosen per call among those whose weights are recent enough for admission "
            "control to admit the call at all (one whose relay lags too far behind a slow link is passed "
            "over, not waited for), so a slow generator gets a call only when the others are that much "
            "deeper in work; or worker w on generator w % count (a lost generator's workers move to a "
            "live one). Admission control judges each call by the version of the generator it goes to. "
            "Sync mode spreads a batch's calls round-robin"
        ),
    )
    prompts_per_rollout: int = key(16, help="prompts per generate call", accepts="1 to `prompts_per_step`")
    buffer_capacity: int = key(
        4096,
        help="replay buffer size in episodes; the oldest beyond it are evicted (counted as `dropped_other`)",
        accepts=">= one batch",
    )
    target_reward: float = key(
        0.8,
        help="reported: first step whose 10-step moving-average reward reaches it",
        accepts="a finite number",
        resumable=True,
    )
    # Multi-turn episodes: the environment and its limits (docs/environments.md).
    env: EnvConfig = field(default_factory=EnvConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    importance: ImportanceConfig = field(default_factory=ImportanceConfig)
    filter: FilterConfig = field(default_factory=FilterConfig)
    scorers: list[ScorerConfig] = key(
        [ScorerConfig(), ScorerConfig(kind="reference_kl", coef=0.02, runs_on="trainer")],
        help=(
            "the task's own reward, and a KL penalty to the initial policy, computed in the trainer "
            "([scoring.md](scoring.md#reference-kl)), that keeps every seed exploring "
            "([benchmarks.md](benchmarks.md#learning-reliability-benchmarkslearninglearning_reliabilitypy)); "
            "`grpo_gpu` and `grpo_long` take the reward alone; `scorers=[{kind:reward}]` drops the "
            "penalty"
        ),
        accepts="a list of scorer entries",
    )
    scoring: ScoringConfig = field(default_factory=ScoringConfig)
    # A run whose episodes all drop stops; the console says drops as they go on (rollout/progress_watch.py).
    stall: StallConfig = field(default_factory=StallConfig)
    rival: RivalConfig = field(default_factory=RivalConfig)  # a `rival` seat's policy (env.seats)

    def __post_init__(self) -> None:
        check_choices(self, "")
        for name in ("steps", "prompts_per_step", "rollout_workers", "prompts_per_rollout", "buffer_capacity"):
            check_range(name, getattr(self, name), AT_LEAST_1)
        check_range(
            "group_size",
            self.group_size,
            Range(2),
            note="group-relative advantages need at least two completions per prompt",
        )
        check_range("max_policy_age", self.max_policy_age, AT_LEAST_0)
        check_range("target_reward", self.target_reward, Range())
        if self.prompts_per_rollout > self.prompts_per_step:
            # A rollout larger than a batch could never be admitted at max_policy_age=0.
            raise ConfigError(
                f"prompts_per_rollout={self.prompts_per_rollout} must be <= prompts_per_step={self.prompts_per_step}"
            )
        if self.mode == "async" and self.max_policy_age == 0 and self.samples_per_prompt > self.batch_size:
            # A multi-turn call plays one prompt's group, each episode giving a sample per policy seat.
            raise ConfigError(
                f"max_policy_age=0: one prompt's group gives {self.samples_per_prompt} samples (group_size="
                f"{self.group_size} x {self.policy_seats} policy seats of env.seats), more than a batch "
                f"({self.batch_size} = prompts_per_step * group_size): no call could ever be admitted; raise "
                f"prompts_per_step to at least {self.policy_seats}"
            )
        if self.eval.seats and not self.env.seats:
            raise ConfigError(
                f"eval.seats={list(self.eval.seats)} names the seats of a multi-player game: env.seats names its "
                "seats in training"
            )
        if self.eval.seats and len(self.eval.seats) != len(self.env.seats):
            raise ConfigError(
                f"eval.seats={list(self.eval.seats)}: evaluations play env.seats' game, of "
                f"{len(self.env.seats)} seats (env.seats={list(self.env.seats)}); name as many"
            )
        if self.snapshot_generators:
            self._check_snapshot_placement()
        if RIVAL in self.env.seats:
            self._check_rival()
        if self.loss.objective != "grpo":
            raise ConfigError(
                f"loss.objective={self.loss.objective}: GRPO trains with the policy-gradient objective (grpo); "
                f"supervised fine-tuning on demonstrations is {python()} -m apps.sft"
            )
        if self.loss.clipped and self.importance.corrects:
            raise ConfigError(
                f"loss.clip_low/clip_high are set and importance corrects too (importance.mode="
                f"{self.importance.mode}, importance.cap={self.importance.cap}): the clipped ratio is the "
                "off-policy correction; set importance.cap=null (mode truncate)"
            )
        self.check_sections()
        check_scorers(self.scorers)
        if any(s.is_self for s in self.scorers):
            self._check_self_teacher()
        if self.task.name == "seeds" and self.env.name is None:
            raise ConfigError(
                "task.name=seeds hands out seeds, not prompts: name the environment that deals episodes "
                "from them, e.g. env.name=textarena:GuessTheNumber-v0"
            )
        if self.env.procs and not self.multi_turn:
            raise ConfigError(
                f"env.procs={self.env.procs}: task.name={self.task.name} has no environment to host; "
                "name one with env.name=module:callable"
            )
        if self.loss.max_tokens is None:  # constant aggregation: the generation budget
            self.loss.max_tokens = self.sampling.max_tokens * (self.env.max_turns if self.multi_turn else 1)
        self.resolve(self.steps, self.multi_turn)
        if self.buffer_capacity < self.batch_size:
            raise ConfigError(
                f"buffer_capacity={self.buffer_capacity} is smaller than one training batch "
                f"({self.batch_size} = prompts_per_step * group_size)"
            )

    def _check_self_teacher(self) -> None:
        """A teacher that is the policy itself reads the trainer's shared-memory channel from node 0,
        where model scorers run (scoring/self_teacher.py): full weights, that transport, the trainer there."""
        index = next(i for i, s in enumerate(self.scorers) if s.is_self)
        key = f"scorers[{index}].model=self"
        if self.weights.transport != "shm":
            raise ConfigError(
                f"{key}: the teacher reads the trainer's shared-memory channel; weights.transport="
                f"{self.weights.transport} publishes elsewhere (use shm)"
            )
        if list(self.placement.trainer_hosts) != [0]:
            raise ConfigError(
                f"{key}: the teacher runs on node 0 and reads the trainer's channel there; "
                f"placement.trainer_hosts={list(self.placement.trainer_hosts)} must be [0]"
            )
        if self.model.lora.enabled:
            raise ConfigError(f"{key}: with model.lora.rank the trainer publishes its adapters alone, not a model")

    def _check_rival(self) -> None:
        """A run with a `rival` seat, checked at start, one ConfigError naming
        the key: the rival's trainer and generators share the trained policy's one node and reach each
        other through its own shared-memory channel; it is not checkpointed, not LoRA-trained, not
        scored by model scorers, and evaluations play against a seat that is not trained."""
        seats = f"a `rival` seat (env.seats={list(self.env.seats)})"
        first = self.generator.count + self.snapshot_generators
        self.check_beside_trainer(seats, "rival.generators", first, self.rival.generators)
        placement = self.placement
        if placement.trainer_gpus is not None or placement.generator_gpus is not None:
            raise ConfigError(
                f"placement.trainer_gpus/generator_gpus: {seats} has no GPU placement of its own; leave both null"
            )
        if self.model.lora.rank is not None:
            raise ConfigError(
                f"model.lora.rank={self.model.lora.rank}: {seats} trains every weight; LoRA is not supported"
            )
        if self.resume is not None:
            raise ConfigError(f"resume={self.resume}: {seats} is not checkpointed, so its run cannot be resumed")
        for index, scorer in enumerate(self.scorers):
            if scorer.runs_a_model:
                raise ConfigError(
                    f"scorers[{index}].kind={scorer.kind}: {seats} is scored by reward functions (and a reference KL "
                    "in its trainer) only; a model scorer on procs of its own holds the policy's model"
                )
        if RIVAL in self.eval.seats or (self.eval.enabled and not self.eval.seats):
            raise ConfigError(
                f"eval.seats={list(self.eval.seats)}: {seats} is trained as the run goes; evaluations play "
                "against a seat that is not, e.g. eval.seats=[policy,random] (or eval.every_steps=0)"
            )

    def _check_snapshot_placement(self) -> None:
        """A snapshot's generators read the trainer's shared-memory channel (handles/generators/snapshot.py)."""
        seats = f"a `{SNAPSHOT}` seat (env.seats={list(self.env.seats)}, eval.seats={list(self.eval.seats)})"
        self.check_beside_trainer(seats, "env.snapshot.generators", self.generator.count, self.env.snapshot.generators)

    def check_beside_trainer(self, seats: str, key: str, first: int, count: int) -> None:
        """`count` generators of `seats`' own (procs generator<first> on, set by `key`) that read a
        trainer's shared-memory channel: that transport, on the trainer's one node."""
        if self.weights.transport != "shm":
            raise ConfigError(
                f"weights.transport={self.weights.transport}: {seats} plays on generators that read a "
                "trainer's shared-memory channel; use weights.transport=shm"
            )
        placement = self.placement
        nodes = sorted({placement.generator_host(first + j) for j in range(count)})
        if len(placement.trainer_hosts) != 1 or nodes != list(placement.trainer_hosts):
            raise ConfigError(
                f"{key}={count}: {seats} plays on generators placed after the trained policy's "
                f"(placement.generator_hosts={list(placement.generator_hosts)} puts them on node(s) {nodes}); "
                f"they read a trainer's channel, on its one node (placement.trainer_hosts="
                f"{list(placement.trainer_hosts)})"
            )

    def _check_inputs(self) -> None:
        """RunConfig's, and the scorers' checkpoints and functions, and the environment's name."""
        super()._check_inputs()
        for index, scorer in enumerate(self.scorers):
            if scorer.path is not None and not Path(scorer.path).expanduser().is_dir():
                raise ConfigError(f"scorers[{index}].path: checkpoint directory not found: {scorer.path}")
            if scorer.fn is not None:
                load_callable(scorer.fn, f"scorers[{index}].fn")
        if self.env.name is not None:
            check_environment_name(self.env)
        check_seats(self.eval.seats, "eval.seats")
        if RIVAL in self.env.seats and self.rival.path is not None and not Path(self.rival.path).expanduser().is_dir():
            raise ConfigError(f"rival.path: checkpoint directory not found: {self.rival.path}")

    def _text_input(self) -> str | None:
        if self.env.name is not None and self.env.name.startswith(TEXTARENA):
            return f"env.name={self.env.name}: the game speaks text"
        return super()._text_input()

    def plan(self) -> RunPlan:
        """The run's plan with what GRPO brings up beside its trainer and generators: a replay
        buffer, the scorers, environment procs, a snapshot's generators and a rival's policy
        (env.seats), importance correction and the reference's KL."""
        buffer = BufferSpec(
            self.max_policy_age,
            self.buffer_capacity,
            self.filter.zero_variance_groups,
            self.filter.max_drops(self.batch_size),
        )
        return replace(
            super().plan(),
            importance=self.importance,
            kl_coef=self.kl_coef,
            trainer_reference=self.trainer_reference,
            replay_buffer=buffer,
            scorers=tuple(self.scorers),
            environment_procs=self.env.procs,
            snapshot=self._snapshot_spec(),
            rival=self._rival_spec(),
        )

    def _snapshot_spec(self) -> SnapshotSpec | None:
        if not self.snapshot_generators:
            return None
        c = self.env.snapshot
        return SnapshotSpec(c.generators, c.lag, c.refresh_steps, self.generator.count, self.env.turn_batch_wait_s)

    def _rival_spec(self) -> RivalSpec | None:
        if RIVAL not in self.env.seats:
            return None
        return RivalSpec(
            self.rival,
            seed=self.model.tiny.seed + 1 if self.rival.seed is None else self.rival.seed,
            first_generator=self.generator.count + self.snapshot_generators,
            turn_batch_wait_s=self.env.turn_batch_wait_s,
            mode=self.mode,
            batch_size=self.batch_size,
            max_policy_age=self.max_policy_age,
            buffer_capacity=self.buffer_capacity,
        )

    @property
    def snapshot_generators(self) -> int:
        """The generators of a `snapshot` seat in env.seats or eval.seats (procs after
        generator.count's; handles/generators/snapshot.py); 0: no snapshot seat."""
        return self.env.snapshot.generators if SNAPSHOT in [*self.env.seats, *self.eval.seats] else 0

    @property
    def resumable(self) -> bool:
        """Whether `resume=RUN_DIR` can continue this run: a rival's policy is not checkpointed."""
        return RIVAL not in self.env.seats

    @property
    def multi_turn(self) -> bool:
        """Whether episodes are played in an environment: env.name's, or the task's own."""
        return self.env.name is not None or self.task.name in MULTI_TURN_TASKS

    @property
    def kl_coef(self) -> float:
        """The reference_kl scorer's coef: the trainer's KL penalty (0: none)."""
        return next((s.coef for s in self.scorers if s.kind == "reference_kl"), 0.0)

    @property
    def trainer_reference(self) -> int | None:
        """The index of the reference_kl scorer that runs in the trainer, if there is one."""
        return next((i for i, s in enumerate(self.scorers) if s.runs_on == "trainer"), None)

    @property
    def batch_size(self) -> int:
        return self.prompts_per_step * self.group_size

    @property
    def policy_seats(self) -> int:
        """The seats of an episode the trained policy plays (env.seats; 1 without seats)."""
        return max(1, sum(seat == POLICY for seat in self.env.seats))

    @property
    def samples_per_prompt(self) -> int:
        """The most samples one prompt's group gives: a completion per episode and policy seat."""
        return self.group_size * self.policy_seats

    @property
    def episodes_in_flight(self) -> int:
        """The most episodes the run plays at once: the groups the rollout workers keep going (sync
        mode: one step's), each of group_size, plus one evaluation's."""
        groups = self.rollout_workers * self.prompts_per_rollout if self.mode == "async" else self.prompts_per_step
        evaluation = self.eval.prompts * self.eval.samples_per_prompt if self.eval.enabled else 0
        return groups * self.group_size + evaluation


def _first_jsonl_prompt(path: Path, column: str) -> str | None:
    """The text of a .jsonl dataset's first prompt (a chat prompt's contents joined); None where the
    file or its first row cannot say (the loader names what is wrong)."""
    try:
        with path.open(encoding="utf-8") as lines:
            first = next((line for line in lines if line.strip()), None)
        prompt = json.loads(first)[column] if first is not None else None
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        return None
    if isinstance(prompt, list):
        prompt = "".join(m.get("content", "") for m in prompt if isinstance(m, dict))
    return prompt if isinstance(prompt, str) and prompt else None
