"""Each role's actors spawned on the run's procs, as the run's plan says (the first time
on the procs spawned early, later on new ones: a respawn).

Handles (forge_async/handles/) call these to bring their role up, and again to
bring it back after a failure.
"""

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from monarch.actor import ProcMesh

from forge_async.errors import UserError
from forge_async.handles import meshes
from forge_async.learning.spec import LearnerSpec
from forge_async.mesh import roles
from forge_async.mesh.procs import RunProcs
from forge_async.mesh.run_plan import RunPlan
from forge_async.models.hf_checkpoint import Checkpoint
from forge_async.weights.config import WeightsConfig


@dataclass
class RoleSpawner:
    procs: RunProcs
    checkpoint: Checkpoint  # the initial policy
    pad_id: int
    # A rival's spawner (`for_rival`): its trainer's role, its own weight channel, its learning rate
    trainer_role: roles.Role = roles.TRAINER
    own_weights: WeightsConfig | None = None  # None: the run's
    lr: float | None = None  # None: trainer.lr

    def for_rival(self, checkpoint: Checkpoint, channel_dir: str, lr: float | None) -> "RoleSpawner":
        """The spawner of a `rival` seat's policy (handles/rival.py): its trainer (rival_trainer) and
        generators start from `checkpoint` and meet at the shared-memory channel `channel_dir`."""
        weights = replace(self.plan.weights, channel_dir=channel_dir)
        return replace(self, checkpoint=checkpoint, trainer_role=roles.RIVAL_TRAINER, own_weights=weights, lr=lr)

    @property
    def weights(self) -> WeightsConfig:
        return self.own_weights or self.plan.weights

    @property
    def plan(self) -> RunPlan:
        return self.procs.plan

    async def trainer(self) -> tuple[ProcMesh, Any]:
        """(procs, Trainer) with torch.distributed up and the initial weights loaded."""
        return await meshes.spawn_trainer(
            self.learner_spec(),
            self.weights,
            self.procs.host(self.trainer_role),
            procs=self.procs.take(self.trainer_role),
        )

    def learner_spec(self) -> LearnerSpec:
        """What the trainer's learner is built from, as the plan says."""
        c = self.plan
        reference = None if c.trainer_reference is None else str(self.scorer_checkpoint(c.trainer_reference).path)
        return LearnerSpec(
            str(self.checkpoint.path),
            c.trainer if self.lr is None else replace(c.trainer, lr=self.lr),
            self.pad_id,
            c.loss,
            c.importance,
            c.kl_coef,
            reference,
            c.model.lora,
            c.moe,
            c.sampling.logit_temperature,
        )

    async def generator(self, index: int) -> tuple[ProcMesh, Any, float]:
        """(procs, Generator, its engine's start-up in seconds) with the initial weights loaded."""
        c = self.plan
        return await meshes.spawn_generator(
            self.checkpoint,
            c.generator,
            self.weights,
            index,
            procs=self.procs.take(roles.generator(index)),
            lora=c.model.lora,
            sampling=c.sampling,
        )

    async def replay_buffer(self) -> tuple[ProcMesh, Any]:
        b = self.plan.replay_buffer
        if b is None:
            raise RuntimeError("a replay buffer is asked for, but the run's plan has none")
        return await meshes.spawn_replay_buffer(
            max_policy_age=b.max_policy_age,
            capacity=b.capacity,
            procs=self.procs.take(roles.REPLAY_BUFFER),
            drop_zero_variance=b.drop_zero_variance,
            max_zero_variance_drops=b.max_zero_variance_drops,
        )

    async def weight_relay(self, node: int) -> tuple[ProcMesh, Any]:
        role = roles.weight_relay(node)
        return await meshes.spawn_weight_relay(
            self.plan.weights.chosen_dir, self.procs.host(role), node, procs=self.procs.take(role)
        )

    async def weight_sender(self) -> tuple[ProcMesh, Any]:
        w = self.plan.weights
        return await meshes.spawn_weight_sender(
            w.chosen_dir,
            w.link_timeout_s,
            self.procs.host(roles.WEIGHT_SENDER),
            procs=self.procs.take(roles.WEIGHT_SENDER),
        )

    async def scorer(self, index: int) -> tuple[ProcMesh, Any]:
        """(procs, LogprobModel) for model scorer `index`: its checkpoint, or the initial policy's."""
        role = roles.scorer(index)
        return await meshes.spawn_logprob_model(
            self.scorer_checkpoint(index),
            self.pad_id,
            str(role),
            self.plan.scorers[index].threads,
            procs=self.procs.take(role),
            temperature=self.plan.sampling.logit_temperature,
            channel_dir=self.plan.weights.channel_dir if self.plan.scorers[index].is_self else None,
        )

    def environment_host(self, index: int, new_environment: Callable[[], object]) -> tuple[ProcMesh, Any]:
        """(procs, EnvironmentHost) making environments with `new_environment`."""
        return meshes.spawn_environment_host(
            new_environment, str(roles.environment(index)), procs=self.procs.take(roles.environment(index))
        )

    def scorer_checkpoint(self, index: int) -> Checkpoint:
        """Scorer `index`'s checkpoint, checked to share the policy's vocabulary."""
        path = self.plan.scorers[index].path
        if path is None:
            return self.checkpoint
        checkpoint = Checkpoint.open(path)
        if checkpoint.shape.vocab_size != self.checkpoint.shape.vocab_size:
            raise UserError(
                f"scorers[{index}].path={path}: vocabulary of {checkpoint.shape.vocab_size} tokens, the policy's "
                f"has {self.checkpoint.shape.vocab_size}; a scorer must use the policy's tokenizer"
            )
        return checkpoint
