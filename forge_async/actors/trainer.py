"""Trainer: the Learner (learning/learner.py) on a mesh of procs, and the weights it publishes.

`setup` brings torch.distributed up on the procs and builds the learner: the policy under
FSDP2, its optimizer and schedule. Each endpoint is one call into it. After a step,
`push_weights` publishes the weights in Hugging Face names under the learner's version
(`train_and_push` does both in one call) through weights/publisher.py: into a
shared-memory file that every rank writes its own shard of (same host), or into torchstore
as one DTensor shard per rank. With LoRA only the adapters are published, in PEFT names.

The controller imports this module to spawn the actor: the learner (FSDP2, DTensor) and the
publisher are imported where the actor is built, and TorchTitan as the learner is, on the
trainer's procs, which preload them (mesh/procs.py, PRELOAD).
"""

import os
import time
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from monarch.actor import endpoint

from forge_async.data.episode import Episode
from forge_async.learning.results import PolicySaved, Published, SaveFailed, StateSaved, StepResult, TrainedStep
from forge_async.learning.spec import LearnerSpec
from forge_async.cluster.hosts import pin_collectives_to_node_address
from forge_async.mesh.proc_actor import ProcActor
from forge_async.mesh.reply_port import answers_on_port
from forge_async.observability.span_names import PUBLISH_WEIGHTS
from forge_async.observability.spans import TRACER
from forge_async.weights.config import WeightsConfig

if TYPE_CHECKING:
    from forge_async.learning.learner import Learner


class Trainer(ProcActor):
    def __init__(self, spec: LearnerSpec, weights: WeightsConfig):
        from forge_async.weights.publisher import WeightPublisher

        self.spec = spec
        self.publisher = WeightPublisher(weights)
        self._learner: Learner | None = None  # built by `setup`, once torch.distributed is up

    @property
    def learner(self) -> "Learner":
        if self._learner is None:
            raise RuntimeError("the trainer's learner is asked for before its setup")
        return self._learner

    @endpoint
    async def setup(self) -> None:
        from forge_async.learning.learner import Learner, device_type

        torch.set_num_threads(self.spec.config.threads)
        device = device_type()
        if device == "cuda":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        pin_collectives_to_node_address()
        dist.init_process_group("nccl" if device == "cuda" else "gloo")
        self._learner = Learner(self.spec)

    @endpoint
    async def train_step(self, episodes: list[Episode]) -> TrainedStep:
        """One optimizer step on the whole batch, accumulated over micro-batches (the loss of each
        is scaled by global counts, so the sum of their gradients is the full-batch gradient)."""
        return self.learner.train_step(episodes)

    @endpoint
    @answers_on_port
    async def train_and_push(self, episodes: list[Episode], transports: tuple[str, ...] | None = None) -> StepResult:
        """`train_step`, then `push_weights`, in one call: the training loop's step, one round
        trip fewer on the path from a batch to the generators' next weights."""
        trained = self.learner.train_step(episodes)
        published = await self._push_weights(transports)
        return StepResult(published.version, trained.metrics, published.push_ms, published.weight_bytes)

    @endpoint
    async def push_weights(self, transports: tuple[str, ...] | None = None) -> Published:
        """Publish the current weights under the current version, to each of `transports`.

        "shm": this node's shared-memory channel (every rank must be on this node);
        "torchstore": the store, one shard per rank (for other nodes and relays).
        Default: the configured transport. `weight_bytes`: the size of what one
        version is (all ranks' shards together), moved once per transport.
        """
        return await self._push_weights(transports)

    async def _push_weights(self, transports: tuple[str, ...] | None) -> Published:
        start = time.perf_counter()
        version = self.learner.version
        with TRACER.span(PUBLISH_WEIGHTS):
            weight_bytes = await self.publisher.publish(version, self.learner.published_state_dict(), transports)
        return Published(version, (time.perf_counter() - start) * 1e3, weight_bytes)

    @endpoint
    async def sequence_logprobs(self, sequences: list[list[int]]) -> list[list[float]]:
        """log p(token t | tokens < t) for t >= 1 of each sequence, under the current weights."""
        return self.learner.sequence_logprobs(sequences)

    @endpoint
    async def full_state_dict(self, merged: bool = True) -> dict[str, torch.Tensor]:
        """The policy's weights, unsharded, in Hugging Face names (a collective). With LoRA and
        not `merged`: the frozen base weights alone."""
        return self.learner.full_state_dict(merged)

    @endpoint
    async def adapter_state_dict(self) -> dict[str, torch.Tensor]:
        """The LoRA adapters, unsharded, in PEFT names (a collective; LoRA runs only)."""
        return self.learner.adapter_state_dict()

    @endpoint
    async def state_bytes(self) -> int:
        """Bytes of this rank's model and optimizer state: about what its checkpoint shard weighs."""
        return self.learner.state_bytes()

    @endpoint
    async def save_state(self, directory: str) -> StateSaved | SaveFailed:
        """Model and optimizer state into `directory`, one shard per rank (DCP); a failed write
        comes back as SaveFailed rather than ending the actor."""
        return self.learner.save_state(directory)

    @endpoint
    async def load_state(self, directory: str) -> int:
        """Restore what `save_state` wrote (any number of ranks may read it); returns the version."""
        return self.learner.load_state(directory)

    @endpoint
    async def save_hf(self, directory: str, adapter_directory: str | None = None) -> PolicySaved | SaveFailed:
        """The current policy as a Hugging Face checkpoint (rank 0 writes; see Learner.save_hf)."""
        return self.learner.save_hf(directory, adapter_directory)
