"""The trainer's learning, without its actor: a TorchTitan model under FSDP2 on this proc's
device (one fp32 proc trains the plain model: models/parallelize.py), its AdamW optimizer and
LR schedule, one GRPO or SFT step on a batch of episodes, and the model's state in and out.

torch.distributed must be up before a Learner is built (actors/trainer.py brings it up on
the trainer's procs; a script can start a one-rank group itself). Every rank receives the
same list of episodes and trains on its own contiguous slice of the rows; gradients are
summed across ranks, so N ranks compute the same update as one. The version counts
optimizer steps (initial weights = 0). With LoRA (model.lora.rank set) the base weights are
frozen and only the adapters are in the optimizer (models/lora.py).

TorchTitan and torch.distributed.checkpoint are imported where they are used: the
controller imports the trainer's module to spawn the actor and needs neither (they would
cost it CPU at start-up); the trainer's procs load them as they start (mesh/procs.py,
PRELOAD).
"""

import resource
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from safetensors import SafetensorError

from forge_async.learning.config import TrainerConfig
from forge_async.learning.results import PolicySaved, SaveFailed, StateSaved, TrainedStep
from forge_async.learning.spec import LearnerSpec
from forge_async.data.batch import Row, TrainBatch, micro_batches, pack_rows, prompt_rows
from forge_async.data.episode import Episode
from forge_async.errors import ConfigError
from forge_async.losses.config import ImportanceConfig
from forge_async.losses.grpo import (
    MAXED,
    SUMMED,
    OffPolicySums,
    clipped_surrogate_loss,
    entropy_bonus,
    frozen_logprobs,
    importance_weights,
    policy_gradient_loss,
    reference_kl,
    response_logprobs,
    sequence_logprobs,
    token_scale,
)
from forge_async.losses.sft import demonstration_nll
from forge_async.losses.sliced_softmax import Sampled
from forge_async.models.hf_checkpoint import Checkpoint, save_checkpoint
from forge_async.models.lora import INIT_SEED, AdapterNames, is_adapter
from forge_async.models.routes import RouteMismatch, moe_step_metrics, routes_given, take_expert_load
from forge_async.models.parallelize import clip_grad_norm, experts_unsharded, parallelize, unsharded
from forge_async.models.peft import save_adapter
from forge_async.observability.span_names import BACKWARD, FORWARD, OPTIMIZER
from forge_async.observability.spans import TRACER

if TYPE_CHECKING:
    from torch.distributed.checkpoint.api import CheckpointException
    from torchtitan.components.optimizer.lr_scheduler import LRSchedulersContainer


_NEVER = 2**62  # a constant schedule's "total steps": its decay never starts


def device_type() -> str:
    """Where a learner computes: the GPU when this proc sees one."""
    return "cuda" if torch.cuda.is_available() else "cpu"


class Learner:
    def __init__(self, spec: LearnerSpec):
        """The policy from `spec`'s checkpoint, sharded over torch.distributed's ranks, and its optimizer."""
        from forge_async.models.titan import build_titan_model, state_dict_adapter

        self.checkpoint = Checkpoint.open(spec.checkpoint_path)
        self.config = spec.config
        self.pad_id = spec.pad_id
        self.loss = spec.loss
        self.importance = spec.importance
        self.kl_coef = spec.kl_coef
        # Demonstrations (sft) were sampled by no policy: their NLL is of the model's own logits.
        self.temperature = spec.temperature if spec.loss.objective == "grpo" else 1.0
        self.reference_path = spec.reference_path
        self.lora = spec.lora if spec.lora is not None and spec.lora.enabled else None
        self.replay_routes = spec.moe is not None and spec.moe.replay  # rollout routing replay (models/moe.py)
        self.device_type = device_type()
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.version = 0
        config, shape = self.config, self.checkpoint.shape
        self.moe = shape.moe is not None
        self.adapter = state_dict_adapter(shape)
        model = build_titan_model(
            shape,
            seed=INIT_SEED if self.lora else None,
            lora=self.lora,
            expert_parallel=config.expert_parallel > 1,
        )
        weights = self.adapter.from_hf(self.checkpoint.load_hf_state_dict())
        self._load_base(model, weights)
        self.adapter_names = AdapterNames(model, self.adapter) if self.lora else None
        self.model = self._parallelize(model)
        self.reference = self._build_reference(self.reference_path, weights) if self.reference_path else None
        # What sharing a prompt's forward saves, in attention's units (data/batch.py); None: no sharing
        self.token_cost = shape.token_cost_in_attention_pairs if config.share_prompts else None
        # Everything but a LoRA run's frozen base: the optimizer and the clipping see only these.
        self.trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            self.trainable,
            lr=config.lr,
            betas=(config.beta1, config.beta2),
            eps=config.eps,
            weight_decay=config.weight_decay,
        )
        self.lr_scheduler = _lr_scheduler(self.optimizer, config)

    def _load_base(self, model: torch.nn.Module, weights: dict[str, torch.Tensor]) -> None:
        """The checkpoint's weights (TorchTitan names) into `model`; with LoRA the adapters keep
        their initialisation."""
        missing, unexpected = model.load_state_dict(weights, strict=False)
        absent = [name for name in missing if not (self.lora and is_adapter(name))]
        if absent or unexpected:
            raise RuntimeError(f"checkpoint does not fit the model: missing {absent}, unexpected {unexpected}")

    def _build_reference(self, path: str, policy_weights: dict[str, torch.Tensor]) -> torch.nn.Module:
        """The frozen reference policy (the checkpoint at `path`), sharded and computed in the same
        dtype as the policy, so that its logprobs equal the policy's exactly before the first step.
        The initial policy's `policy_weights`, already read, are not read from disk again."""
        from forge_async.models.titan import load_frozen_model

        checkpoint = Checkpoint.open(path)
        same = checkpoint.path == self.checkpoint.path
        model = load_frozen_model(
            checkpoint, policy_weights if same else None, expert_parallel=self.config.expert_parallel > 1
        )
        return self._parallelize(model)

    def _parallelize(self, model: torch.nn.Module) -> torch.nn.Module:
        """`model` on this rank's device, checkpointed, compiled and sharded as trainer.* says."""
        c = self.config
        return parallelize(
            model.to(self.device_type),
            self.device_type,
            dtype=c.dtype,
            activation_checkpointing=c.activation_checkpointing,
            compile=c.compile,
            expert_parallel=c.expert_parallel,
        )

    def _local_episodes(self, episodes: list[Episode]) -> list[Episode]:
        """This rank's contiguous share of the batch's episodes."""
        n = len(episodes)
        if n < self.world:
            raise ValueError(f"a batch of {n} episodes cannot be split across {self.world} ranks")
        bounds = torch.linspace(0, n, self.world + 1).round().long().tolist()
        return episodes[bounds[self.rank] : bounds[self.rank + 1]]

    def _micro_batches(self, episodes: list[Episode]) -> list[list[Row]]:
        """This rank's micro-batches, padded with empty ones to the same count on every rank:
        each forward/backward runs FSDP collectives that every rank must join. Without a
        budget every rank has exactly one: no count to agree on."""
        rows = prompt_rows(self._local_episodes(episodes), self.token_cost)
        micro = micro_batches(rows, self.config.micro_batch_tokens)
        if self.config.micro_batch_tokens is None:
            return micro
        count = torch.tensor(len(micro), device=self.device_type)
        dist.all_reduce(count, op=dist.ReduceOp.MAX)
        return micro + [[] for _ in range(int(count) - len(micro))]

    def train_step(self, episodes: list[Episode]) -> TrainedStep:
        start = time.perf_counter()
        if self.device_type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        # The model's own tokens: a multi-turn episode's environment tokens are in no per-token figure.
        num_tokens = sum(e.completion.model_tokens for e in episodes)
        loss, entropy, whole_entropy = torch.zeros(3, device=self.device_type)
        off_policy = []
        mismatch = RouteMismatch(self.model) if self.moe else None
        for micro in self._micro_batches(episodes):
            step = self._forward_backward(micro, len(episodes), num_tokens, mismatch)
            if step is not None:
                loss, entropy, whole_entropy = loss + step[0], entropy + step[1], whole_entropy + step[2]
                off_policy.append(step[3])
        with TRACER.span(OPTIMIZER):
            lr = self.optimizer.param_groups[0]["lr"]
            grad_norm = clip_grad_norm(self.trainable, self.config.grad_clip, self.config.expert_parallel)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.lr_scheduler.step()
            self.version += 1
            global_loss, global_entropy, global_whole_entropy = _all_reduce_sum(loss, entropy, whole_entropy)
            off_policy_metrics = {}
            if self.loss.objective == "grpo":  # demonstrations (sft) were sampled by no policy
                off_policy_metrics = _reduce_off_policy(off_policy, self.device_type)
                if not self.kl_coef:
                    del off_policy_metrics["kl/reference"]  # no reference: no KL to report
                if not any(e.completion.kept_sets is not None and e.completion.kept_sets.records_ids for e in episodes):
                    del off_policy_metrics["is/mismatch_kl_unmasked"]  # no kept sets: the same as is/mismatch_kl
            moe_metrics = self._moe_metrics(mismatch) if mismatch is not None else {}
        metrics = {
            **off_policy_metrics,
            **moe_metrics,
            "train/loss": global_loss,
            "train/grad_norm": unsharded(grad_norm).item(),
            "train/entropy": global_entropy / max(num_tokens, 1),
            "train/entropy_whole": global_whole_entropy / max(num_tokens, 1),
            "train/response_tokens": num_tokens,
            "train/lr": lr,
            "train/peak_memory_gib": peak_memory_bytes(self.device_type) / 2**30,
            "train/step_ms": (time.perf_counter() - start) * 1e3,
        }
        return TrainedStep(self.version, metrics)

    def _forward_backward(
        self, rows: list[Row], num_sequences: int, num_tokens: int, mismatch: RouteMismatch | None = None
    ):
        """One micro-batch's forward and backward; returns its (loss, entropy sum over what the
        sampler kept, entropy sum over the whole vocabulary, off-policy sums),
        or None for an empty micro-batch (a zero-loss pass that only joins the collectives).
        An MoE model's routers hold the generator's routes through both (a recomputation in the
        backward routes as the forward did), replaying them with moe.routing_replay=rollout."""
        if not rows:
            with TRACER.span(FORWARD):
                tokens = torch.full((1, 2), self.pad_id, device=self.device_type)
                if self.reference is not None:
                    self.reference(tokens)  # its collectives too
                loss = self.model(tokens).sum() * 0.0
            with TRACER.span(BACKWARD):
                loss.backward()
            return None
        batch = pack_rows(rows, self.pad_id).to(self.device_type)
        with routes_given(self.model, batch.routes, self.replay_routes):
            with TRACER.span(FORWARD):
                if self.reference is not None:
                    reference = frozen_logprobs(self.reference, batch, self.temperature)
                    batch = replace(batch, reference_logprobs=reference)
                # The entropy has a gradient only if loss.entropy_coef puts it in the loss.
                # The KL penalty to a reference is over the whole vocabulary: its log p needs a gradient.
                sampled = response_logprobs(self.model, batch, self.temperature, whole_grad=bool(self.kl_coef))
                if mismatch is not None:
                    mismatch.add_last_forward()
                loss, off_policy = self._loss(sampled, batch, num_sequences, num_tokens)
                entropy = (sampled.entropy.detach() * batch.response_mask).sum()
                whole_entropy = (sampled.whole_entropy * batch.response_mask).sum()
            with TRACER.span(BACKWARD):
                loss.backward()
        return loss.detach(), entropy, whole_entropy, off_policy

    def _moe_metrics(self, mismatch: RouteMismatch) -> dict[str, float]:
        """The step's route mismatch and expert load over every rank (one collective)."""
        load = take_expert_load(self.model)
        layers = len(mismatch.layers)
        totals = torch.cat([mismatch.differ, mismatch.compared, load.flatten()]).to(self.device_type)
        dist.all_reduce(totals)
        totals = totals.cpu()
        return moe_step_metrics(totals[:layers], totals[layers : 2 * layers], totals[2 * layers :].view_as(load))

    def _loss(self, sampled: Sampled, local: TrainBatch, num_sequences: int, num_tokens: int):
        """This micro-batch's share of the loss (loss.*, the KL penalty, the entropy bonus; see
        losses/grpo.py) and its off-policy sums; with loss.objective=sft, the demonstrations'
        NLL (losses/sft.py) and no off-policy sums."""
        c = self.loss
        logprobs, entropy, unmasked = sampled.logprobs, sampled.entropy, sampled.unmasked
        scale = token_scale(local.response_mask, c.aggregation, num_sequences, num_tokens, c.max_tokens)
        if c.objective == "sft":
            loss = demonstration_nll(logprobs, local, scale)
            return (loss + entropy_bonus(entropy, scale, c.entropy_coef) if c.entropy_coef else loss), None
        clip = c.clip
        if clip is None:
            weights, off_policy = importance_weights(logprobs, local, self.importance, unmasked)
            loss = policy_gradient_loss(logprobs, local, scale, weights)
        else:
            _, off_policy = importance_weights(logprobs, local, ImportanceConfig(cap=None), unmasked)  # statistics
            loss, off_policy.clipped = clipped_surrogate_loss(logprobs, local, scale, *clip)
        if self.kl_coef:
            kl = reference_kl(unmasked, local)
            loss = loss + self.kl_coef * (kl * scale).sum()
            off_policy.reference_kl = kl.detach().sum()
        if c.entropy_coef:
            loss = loss + entropy_bonus(entropy, scale, c.entropy_coef)
        return loss, off_policy

    def published_state_dict(self) -> dict[str, torch.Tensor]:
        """What generators load, in the compute dtype (bfloat16 halves the bytes moved):
        the weights in Hugging Face names, or with LoRA the adapters in PEFT names. Experts split
        across ranks are gathered first: every rank publishes the same names and shapes."""
        dtype = getattr(torch, self.config.dtype)
        state_dict = self.model.state_dict()
        if self.lora:
            published = self._adapters().to_peft(state_dict)
        else:
            published = self.adapter.to_hf(experts_unsharded(state_dict))
        return {name: t.to(dtype) for name, t in published.items()}

    def sequence_logprobs(self, sequences: list[list[int]]) -> list[list[float]]:
        """log p(token t | tokens < t) for t >= 1 of each sequence, under the current weights."""
        return sequence_logprobs(self.model, sequences, self.pad_id, self.device_type)

    def _full_state_dict(self) -> dict[str, torch.Tensor]:
        """Every parameter, unsharded, in TorchTitan names (a collective: all ranks call it)."""
        return {name: unsharded(t).cpu() for name, t in self.model.state_dict().items()}

    def _merged(self, full: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """A full TorchTitan state dict as a plain model: with LoRA, base + (alpha / rank) B A."""
        return self._adapters().merge(full, self.lora.scale) if self.lora else full

    def full_state_dict(self, merged: bool = True) -> dict[str, torch.Tensor]:
        """The policy's weights, unsharded, in Hugging Face names (a collective). With LoRA and
        not `merged`: the frozen base weights alone."""
        full = self._full_state_dict()
        return self.adapter.to_hf(self._merged(full) if merged else full)

    def adapter_state_dict(self) -> dict[str, torch.Tensor]:
        """The LoRA adapters, unsharded, in PEFT names (a collective; LoRA runs only)."""
        return self._adapters().to_peft(self._full_state_dict())

    def _adapters(self) -> AdapterNames:
        """The LoRA adapters' names (LoRA runs only)."""
        if self.adapter_names is None:
            raise RuntimeError("this trainer has no LoRA adapters (model.lora.rank is null)")
        return self.adapter_names

    def state_bytes(self) -> int:
        """Bytes of this rank's model and optimizer state: about what its checkpoint shard weighs."""
        return _local_bytes(self.model.state_dict()) + _local_bytes(self.optimizer.state_dict()["state"])

    def save_state(self, directory: str) -> StateSaved | SaveFailed:
        """Model and optimizer state into `directory`: each rank writes its own shard (DCP).

        A write that fails (a full disk) comes back as SaveFailed on every rank (DCP gathers
        each rank's failure): the trainer's endpoint that raised would end its actor, and a
        full disk is no reason to lose the trainer."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.api import CheckpointException
        from torch.distributed.checkpoint.state_dict import get_state_dict

        start = time.perf_counter()
        model, optimizer = get_state_dict(self.model, self.optimizer)
        state = {"model": model, "optimizer": optimizer, "version": self.version}
        try:
            dcp.save(state, checkpoint_id=directory)
        except CheckpointException as err:
            return SaveFailed(_first_failure(err))
        return StateSaved(self.version, (time.perf_counter() - start) * 1e3)

    def load_state(self, directory: str) -> int:
        """Restore what `save_state` wrote (any number of ranks may read it); returns the version."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        model, optimizer = get_state_dict(self.model, self.optimizer)
        state: dict[str, Any] = {"model": model, "optimizer": optimizer, "version": 0}  # loaded in place
        dcp.load(state, checkpoint_id=directory)
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
        self.version = state["version"]
        self.lr_scheduler.load_state_dict({"last_epoch": self.version})  # a function of the step
        return self.version

    def save_hf(self, directory: str, adapter_directory: str | None = None) -> PolicySaved | SaveFailed:
        """Save the current policy as a Hugging Face checkpoint (rank 0 writes); with LoRA,
        merged (base + scaled adapter product), and the adapter alone in PEFT's layout into
        `adapter_directory` when given."""
        full = self._full_state_dict()
        if self.rank == 0:
            hf_state_dict = self.adapter.to_hf(self._merged(full))
            try:
                save_checkpoint(directory, self.checkpoint.hf_config, hf_state_dict, self.checkpoint.path)
                if self.lora and adapter_directory:
                    peft = self._adapters().to_peft(full)
                    save_adapter(adapter_directory, peft, self.lora, str(self.checkpoint.path))
            except (OSError, SafetensorError) as err:  # returned, not raised (see save_state)
                return SaveFailed(getattr(err, "strerror", None) or str(err))
        return PolicySaved(directory)


def _local_bytes(tree) -> int:
    """Bytes of the tensors in a (nested) state dict, each counted as this rank holds it."""
    if isinstance(tree, torch.Tensor):
        local = tree.to_local() if hasattr(tree, "to_local") else tree  # a DTensor: this rank's shard
        return local.numel() * local.element_size()
    if isinstance(tree, dict):
        return sum(_local_bytes(v) for v in tree.values())
    return 0


def _first_failure(err: "CheckpointException") -> str:
    """What failed first in a DCP save, in a few words (its own message is every rank's traceback)."""
    failure = next(iter(err.failures.values()))[0]
    return getattr(failure, "strerror", None) or str(failure)


def _lr_scheduler(optimizer: torch.optim.Optimizer, c: TrainerConfig) -> "LRSchedulersContainer":
    """TorchTitan's warmup + decay schedule; `constant` is a warmup then no decay, ever."""
    from torchtitan.components.optimizer.lr_scheduler import LRSchedulersContainer

    constant = c.lr_schedule == "constant"
    if c.lr_total_steps is None and not constant:
        raise ConfigError(f"trainer.lr_schedule={c.lr_schedule!r} needs trainer.lr_total_steps (the app sets it)")
    schedule = LRSchedulersContainer.Config(
        warmup_steps=c.warmup_steps,
        decay_ratio=0.0 if constant else c.decay_ratio,
        decay_type="linear" if constant else c.lr_schedule,
        min_lr_factor=c.min_lr_factor,
    )
    return schedule.build(optimizers=[optimizer], training_steps=_NEVER if constant else c.lr_total_steps)


def _reduce_off_policy(sums: list[OffPolicySums], device_type: str) -> dict[str, float]:
    """The off-policy metrics over every micro-batch of every rank (a collective)."""
    local = sum(sums[1:], start=sums[0]) if sums else None
    totals = local.as_tensor() if local else torch.zeros(len(SUMMED), device=device_type)
    maxima = local.maxima() if local else torch.zeros(len(MAXED), device=device_type)
    dist.all_reduce(totals)
    dist.all_reduce(maxima, op=dist.ReduceOp.MAX)
    return OffPolicySums.summary(totals, maxima)


def peak_memory_bytes(device_type: str) -> int:
    """The trainer's peak memory: on GPU, allocated by torch this step; on CPU, the proc's peak
    resident set (the proc's lifetime: it only grows)."""
    if device_type == "cuda":
        return torch.cuda.max_memory_allocated()
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def _all_reduce_sum(*scalars: torch.Tensor) -> list[float]:
    """Sums of per-rank scalars over the trainer's ranks, in one collective."""
    totals = torch.stack([s.detach().float() for s in scalars])
    dist.all_reduce(totals)
    return totals.tolist()
