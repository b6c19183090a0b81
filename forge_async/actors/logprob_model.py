"""LogprobModel: a frozen model on procs of its own that scores given tokens.

The model scorers use it (forge_async/scoring/model_scorers.py): the reference
policy of the KL penalty, and the teacher of on-policy distillation. It is a
TorchTitan forward of a Hugging Face checkpoint, the same model code the trainer
runs, so a reference equal to the policy gives the trainer's logprobs exactly.

A teacher that is the policy itself (`model: self`, scoring/self_teacher.py) starts
from the initial policy and reads the trainer's shared-memory channel when told:
`take_version` copies the newest version aside, `use_taken` loads it into the model.
"""

import time

import torch
from monarch.actor import endpoint

from forge_async.mesh.proc_actor import ProcActor
from forge_async.data.batch import pack_rows, prompt_rows
from forge_async.data.episode import Completion, Episode
from forge_async.losses.grpo import frozen_logprobs
from forge_async.models.hf_checkpoint import Checkpoint
from forge_async.observability.span_names import FORWARD
from forge_async.observability.spans import TRACER
from forge_async.weights.shared_memory import SharedMemoryChannel

SEQUENCES_PER_FORWARD = 64  # bounds the logits' memory: tokens x vocabulary floats


class LogprobModel(ProcActor):
    def __init__(
        self,
        checkpoint_path: str,
        pad_id: int,
        threads: int = 1,
        temperature: float = 1.0,
        channel_dir: str | None = None,
    ):
        """`temperature`: the policy's sampling temperature; the logprobs are those of the logits
        divided by it, over the whole vocabulary (never over the sets the student's sampler kept:
        scoring/model_scorers.py).
        `channel_dir`: the trainer's shared-memory channel, for a teacher that is the policy itself."""
        self.checkpoint = Checkpoint.open(checkpoint_path)
        self.pad_id = pad_id
        self.threads = threads
        self.temperature = temperature
        self.channel = None if channel_dir is None else SharedMemoryChannel(channel_dir)
        self.version = 0  # the policy version its weights are (0: the checkpoint's)
        self._taken: tuple[int, dict[str, torch.Tensor]] | None = None  # a version copied aside

    @endpoint
    async def setup(self) -> dict[str, float]:
        """Load the checkpoint; returns how long that took."""
        from forge_async.models.titan import load_frozen_model  # TorchTitan: this proc's, not the controller's

        start = time.perf_counter()
        torch.set_num_threads(self.threads)
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model = load_frozen_model(self.checkpoint).to(self.device)
        return {"load_s": time.perf_counter() - start}

    @endpoint
    async def completion_logprobs(self, prompts: list[list[int]], completions: list[list[int]]) -> list[list[float]]:
        """log p(each completion token | prompt, the completion's earlier tokens), per completion,
        p over the whole tempered vocabulary. Completions of one prompt share a row behind it, as in
        the trainer (data/batch.py)."""
        episodes = [_unscored(*given) for given in zip(prompts, completions, strict=True)]
        scored: dict[int, list[float]] = {}
        token_cost = self.checkpoint.shape.token_cost_in_attention_pairs
        with TRACER.span(FORWARD):
            for start in range(0, len(episodes), SEQUENCES_PER_FORWARD):
                rows = prompt_rows(episodes[start : start + SEQUENCES_PER_FORWARD], token_cost)
                batch = pack_rows(rows, self.pad_id).to(self.device)
                logprobs = frozen_logprobs(self.model, batch, self.temperature).cpu()
                for row, episode in zip(logprobs, (e for r in rows for e in r)):  # the batch's order
                    scored[id(episode)] = row[: len(episode.completion.token_ids)].tolist()
        return [scored[id(e)] for e in episodes]

    @endpoint
    async def take_version(self, version: int) -> int:
        """Copy the trainer's `version` (or the newer one in its slot by now) aside; returns which."""
        if self.channel is None:
            raise RuntimeError("take_version: this model was given no channel_dir (it is not a self teacher)")
        with self.channel.reading(version) as (found, state_dict):
            self._taken = found, {name: tensor.clone() for name, tensor in state_dict.items()}
        return found

    @endpoint
    async def use_taken(self) -> int:
        """Load the version taken aside into the model (none taken: keep its weights); returns the
        version it holds."""
        if self._taken is not None:
            from forge_async.models.titan import state_dict_adapter

            version, hf_weights = self._taken
            self.model.load_state_dict(state_dict_adapter(self.checkpoint.shape).from_hf(hf_weights))
            self.version, self._taken = version, None
        return self.version


def _unscored(prompt: list[int], tokens: list[int]) -> Episode:
    """The packer's unit for a completion to score: only its tokens are read (no kept sets, so the
    batch's logprobs are over the whole vocabulary)."""
    n = len(tokens)
    return Episode(Completion(prompt, tokens, [0.0] * n, [0] * n, "", "stop"), 0.0, 0.0)
