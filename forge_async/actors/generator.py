"""Generator: a vLLM engine in a Monarch actor, producing version-tagged completions.

The engine runs in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0): one process per
generator, which works inside Monarch procs on CPU and GPU alike. New weights
are loaded in place from torchstore by version, without restarting the engine,
and the prefix cache is reset so no KV computed by old weights is reused.
"""

import logging
import os
import time
from dataclasses import dataclass

from monarch.actor import Actor, endpoint

from forge_async.data.episode import Completion
from forge_async.models.checkpoint import Checkpoint
from forge_async.weights import store


@dataclass
class GeneratorConfig:
    count: int = 1  # generator actors (one proc each)
    max_model_len: int | None = None  # default: the checkpoint's max_position_embeddings
    dtype: str = "float32"
    seed: int = 0
    # vLLM CPU OpenMP thread binding, e.g. "0" (core 0), "0-3", "auto", "nobind".
    cpu_threads_bind: str = "auto"
    gpu_memory_utilization: float = 0.5


@dataclass
class SamplingConfig:
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 16


# On every in-place reload vLLM warns "RotaryEmbedding: Failed to load weights": the
# rotary cache has no checkpoint tensor and is (correctly) kept as it was.
logging.getLogger("vllm.model_executor.model_loader.reload.layerwise").setLevel(logging.ERROR)


class PromptTooLongError(ValueError):
    """A prompt that leaves no room for the requested completion in the context."""


class Generator(Actor):
    def __init__(self, checkpoint_path: str, config: GeneratorConfig):
        self.checkpoint = Checkpoint.open(checkpoint_path)
        self.config = config
        self.version = 0
        self.busy_s = 0.0  # time spent inside generate calls

    @endpoint
    async def setup(self) -> dict[str, float]:
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", self.config.cpu_threads_bind)
        from vllm import LLM  # heavy import, kept inside the generator's proc

        start = time.perf_counter()
        c = self.config
        self.max_model_len = c.max_model_len or self.checkpoint.shape.max_seq_len
        self.llm = LLM(
            model=str(self.checkpoint.path),
            dtype=c.dtype,
            max_model_len=self.max_model_len,
            seed=c.seed,
            enforce_eager=True,
            gpu_memory_utilization=c.gpu_memory_utilization,
        )
        self.tokenizer = self.llm.get_tokenizer()
        return {"engine_start_s": time.perf_counter() - start}

    @endpoint
    async def get_version(self) -> int:
        return self.version

    @endpoint
    async def busy_seconds(self) -> float:
        return self.busy_s

    def _prompt_ids(self, prompt: str | list[int], max_tokens: int) -> list[int]:
        ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        if len(ids) + max_tokens > self.max_model_len:
            shown = prompt if isinstance(prompt, str) else f"{len(ids)} token ids"
            raise PromptTooLongError(
                f"prompt ({shown!r}) has {len(ids)} tokens; with max_tokens={max_tokens} it "
                f"exceeds the context of {self.max_model_len}"
            )
        return ids

    @endpoint
    async def generate(
        self, prompts: list[str | list[int]], sampling: SamplingConfig, n: int = 1
    ) -> list[list[Completion]]:
        """`n` completions for each prompt, each token tagged with the current version."""
        from vllm import SamplingParams

        params = SamplingParams(
            n=n,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_tokens,
            logprobs=0,  # the sampled token's own logprob
        )
        requests = [{"prompt_token_ids": self._prompt_ids(p, sampling.max_tokens)} for p in prompts]
        start = time.perf_counter()
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        self.busy_s += time.perf_counter() - start
        return [
            [self._completion(out.prompt_token_ids, c) for c in out.outputs] for out in outputs
        ]

    def _completion(self, prompt_ids: list[int], c) -> Completion:
        token_ids = list(c.token_ids)
        return Completion(
            prompt_ids=list(prompt_ids),
            token_ids=token_ids,
            logprobs=[c.logprobs[i][tok].logprob for i, tok in enumerate(token_ids)],
            versions=[self.version] * len(token_ids),
            text=c.text,
            finish_reason=c.finish_reason or "length",
        )

    @endpoint
    async def score(self, sequences: list[list[int]]) -> list[list[float]]:
        """log p(token t | tokens < t) for t >= 1 of each sequence, under the engine's weights."""
        from vllm import SamplingParams

        params = SamplingParams(max_tokens=1, prompt_logprobs=0)
        outputs = self.llm.generate(
            [{"prompt_token_ids": seq} for seq in sequences], params, use_tqdm=False
        )
        return [
            [out.prompt_logprobs[t][tok].logprob for t, tok in enumerate(seq) if t > 0]
            for seq, out in zip(sequences, outputs)
        ]

    @endpoint
    async def load_version(self, version: int) -> dict[str, float]:
        """Replace the engine's weights with policy `version` from torchstore, in place."""
        start = time.perf_counter()
        state_dict = await store.get_policy(version)
        fetched = time.perf_counter()
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": list(state_dict.items())})
        self.llm.reset_prefix_cache()
        self.version = version
        end = time.perf_counter()
        return {"version": version, "fetch_ms": (fetched - start) * 1e3, "load_ms": (end - fetched) * 1e3}
