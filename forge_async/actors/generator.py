"""Generator: a vLLM engine in a Monarch actor, producing version-tagged completions.

The engine runs in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0) and is stepped by
a background task on the actor's event loop (see VersionedEngine). `generate`
queues requests and waits for them; up to generator.calls_at_once calls run at once,
their requests in one engine batch (a concurrent endpoint: other calls, `load_version`
among them, are answered meanwhile). With the shm weight transport, the loop
looks at the channel's LATEST pointer before every engine step and applies a
newer version by itself (generator.swap_mode): at once for inflight and
abort_resume (running requests keep their KV, or are re-submitted with their
prefix), after the running requests finish for drain.
With the torchstore transport, versions arrive through `load_version`.
With LoRA, the engine serves the checkpoint's weights plus one adapter, and each
version carries the adapter alone (generation/adapter_slot.py).
"""

import asyncio
import contextlib
import dataclasses
import logging
import os
import tempfile
import time
from typing import TYPE_CHECKING, cast

from monarch.actor import concurrent_endpoint, endpoint

from forge_async.mesh.proc_actor import ProcActor
from forge_async.generation.config import GeneratorConfig, SamplingConfig
from forge_async.generation.platform import EngineStarted, ModelRunner, model_runner, prepare_process
from forge_async.data.episode import Completion
from forge_async.errors import ConfigError
from forge_async.generation.engine_weights import plain_cpu_weights
from forge_async.generation.kept_set_capture import KeptSetCapture
from forge_async.generation.occupancy import Occupancy
from forge_async.generation.route_capture import route_capture
from forge_async.generation.sampler_rng import SamplerRngState
from forge_async.generation.stats import GeneratorStats
from forge_async.generation.versioned_engine import VersionedEngine
from forge_async.models.hf_checkpoint import Checkpoint
from forge_async.models.config import LoraConfig
from forge_async.mesh.reply_port import answers_on_port
from forge_async.weights.config import WeightsConfig
from forge_async.observability.span_names import DECODE, SWAP_WEIGHTS
from forge_async.observability.spans import TRACER
from forge_async.weights.scratch import temporary_files
from forge_async.weights.outcomes import Loaded
from forge_async.weights.shared_memory import SharedMemoryChannel

if TYPE_CHECKING:
    from vllm.config.model import ModelDType


def _not_rotary_reload_warning(record: logging.LogRecord) -> bool:
    """On every in-place reload vLLM warns "RotaryEmbedding: Failed to load weights": the
    rotary cache has no checkpoint tensor and is (correctly) kept as it was. A filter, not
    a level: vLLM's logging set-up resets the levels of its child loggers."""
    return not record.getMessage().startswith("RotaryEmbedding: Failed to load weights")


logging.getLogger("vllm.model_executor.model_loader.reload.layerwise").addFilter(_not_rotary_reload_warning)

_IDLE_POLL_S = 0.005


class PromptTooLongError(ValueError):
    """A prompt that leaves no room for the requested completion in the context."""


def sampling_params(sampling: SamplingConfig):
    """vLLM SamplingParams for version-tagged generation (token deltas, sampled logprobs)."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    return SamplingParams(
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=sampling.top_k,
        min_p=sampling.min_p,
        max_tokens=sampling.max_tokens,
        min_tokens=sampling.min_tokens,
        logprobs=0,  # the sampled token's own logprob
        output_kind=RequestOutputKind.DELTA,
        detokenize=False,  # the text is decoded once per completion (see VersionedEngine)
    )


def _check_runner(llm, runner: ModelRunner) -> None:
    """The engine runs the model runner chosen for it. vLLM reads VLLM_USE_V2_MODEL_RUNNER from the
    environment until an engine of the process has started, and from a cache after (vllm/envs.py,
    `enable_envs_cache`): an earlier engine in the process would have fixed it."""
    if llm.llm_engine.vllm_config.use_v2_model_runner != runner.v2:
        chose, got = ("V2", "V1") if runner.v2 else ("V1", "V2")
        raise RuntimeError(
            f"vLLM built the engine with its {got} model runner where the generator chose {chose} "
            f"({runner.why}): VLLM_USE_V2_MODEL_RUNNER was read before the generator set it (another "
            "engine started in this process first?)"
        )


class Generator(ProcActor):
    def __init__(
        self,
        checkpoint_path: str,
        config: GeneratorConfig,
        weights: WeightsConfig,
        lora: LoraConfig | None = None,
        sampling: SamplingConfig | None = None,
    ):
        """`sampling`: the run's, which decides what the engine reports: with a temperature other
        than 1 or a truncation, the logprobs of the distribution sampled from (vLLM's processed
        logprobs), and with sampling.keep_mask each token's kept set. Calls may sample otherwise
        (an evaluation); None: untempered, untruncated."""
        self.checkpoint = Checkpoint.open(checkpoint_path)
        self.sampling = sampling or SamplingConfig()
        self.lora = lora if lora is not None and lora.enabled else None
        self.config = config
        self.channel = SharedMemoryChannel(weights.chosen_dir) if weights.transport == "shm" else None
        self.scratch_dir = weights.channel_dir
        self._work = asyncio.Event()
        calls_at_once = config.calls_at_once_for(multi_turn=False)  # an app's config resolved it already
        self._call_slots = asyncio.Semaphore(calls_at_once) if calls_at_once else contextlib.nullcontext()
        self._weight_holds = 0  # while > 0, no new version is taken from the channel (hold_weights)
        self._taken: tuple[int, dict] | None = None  # a version copied aside (take_version: a lagged snapshot)
        self._decoding_since: int | None = None  # start (ns) of the current run of engine steps
        # Runs of engine steps (with the work between them: outputs, answering calls), and weight
        # swaps outside them: busy as the trace counts it (summary.json's generator_idle_frac).
        self._busy_s = 0.0
        self._asked = 0  # samples the generate calls in flight asked for
        self.occupancy = Occupancy()  # of the engine batch, step by step (generation/occupancy.py)

    @endpoint
    async def setup(self) -> EngineStarted:
        if self.scratch_dir is not None:
            # The engine's temporary files (vLLM's rendezvous file) and the LoRA adapter's
            # directory go with the run's scratch directory, which is removed however the run ends.
            tempfile.tempdir = str(temporary_files(self.scratch_dir))
        platform = prepare_process(self.config)
        from vllm import LLM  # heavy import, kept inside the generator's proc

        start = time.perf_counter()
        c = self.config
        self.max_model_len = c.max_model_len or self.checkpoint.shape.max_seq_len
        dtype = c.dtype or self.checkpoint.dtype  # null (composed alone): the checkpoint's own
        adapter = self._adapter_slot(dtype, platform.on_gpu)
        routes = self._route_capture(platform.on_gpu)
        kept_sets = self._kept_set_capture()
        moe = self.checkpoint.shape.moe is not None
        runner = model_runner(platform.on_gpu, moe, self.sampling, reads_sampler=kept_sets is not None)
        os.environ.update(runner.env())  # read as vLLM builds the engine
        with plain_cpu_weights(platform.plain_weights):
            llm = LLM(
                model=str(self.checkpoint.path),
                dtype=cast("ModelDType", dtype),  # generator.dtype's or config.json's name: vLLM checks it
                max_model_len=self.max_model_len,
                seed=c.seed,
                gpu_memory_utilization=c.gpu_memory_utilization,
                kv_cache_memory_bytes=c.kv_cache_bytes(self.checkpoint.shape, self.max_model_len, dtype),
                **platform.llm_kwargs(),
                **VersionedEngine.llm_kwargs(c.swap_mode),
                **(adapter.llm_kwargs() if adapter else {}),
                **(routes.llm_kwargs() if routes else {}),
                **self._logprobs_kwargs(kept_sets),
            )
        _check_runner(llm, runner)
        self.engine = VersionedEngine(llm, c.swap_mode, adapter=adapter, routes=routes, kept_sets=kept_sets)
        if platform.plain_weights and adapter is None and not self.engine.loads_in_place:
            logging.getLogger(__name__).warning(
                "generator.cpu_weights=plain: vLLM's CPU kernels for %s packed the linear layers "
                "anyway; every weight swap reloads them layer by layer",
                dtype,
            )
        self.tokenizer = llm.get_tokenizer()
        self._loop = asyncio.create_task(self._engine_loop())
        return EngineStarted(time.perf_counter() - start, runner.line())

    def _kept_set_capture(self) -> KeptSetCapture | None:
        """Where the engine reports the logprobs of the distribution it sampled from (tempered,
        truncated, stop tokens held back by min_tokens: what the trainer computes for such runs,
        losses/sliced_softmax.py), the capture of what the sampler kept at each token: each
        token's log mass, and its kept set with sampling.keep_mask. Else None: vLLM's default, the
        raw logprobs, are already those of the distribution sampled from."""
        s = self.sampling
        if not (s.truncates or s.logit_temperature != 1 or s.min_tokens > 0):
            return None
        return KeptSetCapture(s.kept_set_cap, record_ids=s.masks)

    def _logprobs_kwargs(self, kept_sets: KeptSetCapture | None) -> dict:
        """Which logprobs the engine reports: with a capture, those of the distribution it sampled
        from; else vLLM's default."""
        return kept_sets.llm_kwargs() if kept_sets is not None else {}

    def _route_capture(self, on_gpu: bool):
        """For an MoE model, the record of each token's experts (always: the trainer reports how
        often its routers differ, whether or not it replays them)."""
        shape = self.checkpoint.shape
        return (
            route_capture(shape.moe, shape.n_layers, on_gpu, self.config.swap_mode) if shape.moe is not None else None
        )

    def _adapter_slot(self, dtype: str, on_gpu: bool):
        """With LoRA, the adapter every request runs with (zero until a version arrives)."""
        if self.lora is None:
            return None
        if self.checkpoint.shape.moe is not None and not on_gpu:
            raise ConfigError(
                "model.lora.rank: LoRA on a Mixture-of-Experts model needs a GPU generator: vLLM 0.32 runs "
                "the MoE layers of a LoRA engine with its Triton kernel only, which has no CPU backend"
            )
        import torch
        from forge_async.generation.adapter_slot import AdapterSlot  # imports vLLM

        return AdapterSlot(self.lora, self.checkpoint, getattr(torch, dtype))

    async def __cleanup__(self, exc: Exception | None) -> None:
        """Remove the LoRA adapter's directory before the proc ends (ProcActor's stop ends it at
        once, without the finalizers that would)."""
        engine = getattr(self, "engine", None)
        if engine is not None and engine.adapter is not None:
            engine.adapter.remove()
        await super().__cleanup__(exc)

    @endpoint
    async def rng_state(self) -> SamplerRngState:
        """The random state the engine samples with (torch's generators and numpy's: sampler_rng.py)."""
        return SamplerRngState.capture()

    @endpoint
    async def set_rng_state(self, state: SamplerRngState | dict) -> None:
        """`state` as `rng_state` gave it, or as a checkpoint written before numpy's state was kept
        (a dict of torch's generators)."""
        SamplerRngState.of(state).restore()

    @endpoint
    async def get_version(self) -> int:
        return self.engine.version

    @endpoint
    async def stats(self) -> GeneratorStats:
        e = self.engine
        return GeneratorStats(
            version=e.version,
            busy_s=self._busy_s + self._decoding_s(),
            swap_pauses=dataclasses.replace(e.swap_pauses),
            resumed_requests=e.resumed_requests,
            resumed_prefix_tokens=e.resumed_prefix_tokens,
            preempting_resets=e.preempting_resets,
        )

    @endpoint
    async def occupancy_totals(self) -> Occupancy:
        """The engine batch's occupancy over the engine steps so far (generation/occupancy.py): a
        copy, the engine loop's own keeps counting."""
        return dataclasses.replace(self.occupancy)

    def _prompt_ids(self, prompt: str | list[int], max_tokens: int) -> list[int]:
        ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        if len(ids) + max_tokens > self.max_model_len:
            shown = prompt if isinstance(prompt, str) else f"{len(ids)} token ids"
            raise PromptTooLongError(
                f"prompt ({shown!r}) has {len(ids)} tokens; with max_tokens={max_tokens} it "
                f"exceeds the context of {self.max_model_len}"
            )
        return ids

    @concurrent_endpoint
    @answers_on_port
    async def generate(
        self, prompts: list[str | list[int]], sampling: SamplingConfig, n: int = 1
    ) -> list[list[Completion]]:
        """`n` completions for each prompt, each token tagged with the version that sampled it."""
        async with self._call_slots:  # calls start in the order they came (the semaphore is FIFO)
            return await self._generate(prompts, sampling, n)

    async def _generate(
        self, prompts: list[str | list[int]], sampling: SamplingConfig, n: int
    ) -> list[list[Completion]]:
        if sampling.masks and (self.engine.kept_sets is None or not self.engine.kept_sets.record_ids):
            raise ConfigError(
                "sampling.keep_mask: this generator was built without kept sets (its run's sampling "
                "keeps every token); build it with the sampling it is called with"
            )
        params = sampling_params(sampling)
        all_ids = [self._prompt_ids(p, sampling.max_tokens) for p in prompts]
        loop = asyncio.get_running_loop()
        groups = []
        for ids in all_ids:
            futures = [loop.create_future() for _ in range(n)]
            for future in futures:
                self.engine.submit(ids, params, future.set_result, future.set_exception)
            groups.append(futures)
        self._work.set()
        self._asked += n * len(all_ids)
        try:
            return [list(await asyncio.gather(*futures)) for futures in groups]
        finally:
            self._asked -= n * len(all_ids)

    async def _engine_loop(self) -> None:
        while True:
            try:
                self._maybe_swap()
                if self.engine.has_work:
                    self._decoding_since = self._decoding_since or time.time_ns()
                    self.occupancy.record(self.engine.unfinished, self._asked)
                    self.engine.step()
                    await asyncio.sleep(0)  # let endpoint handlers run between engine steps
                else:
                    self._end_decoding()
                    await self._idle()
            except Exception as err:  # fail the callers, keep the loop alive
                self.engine.fail_all(err)

    def _decoding_s(self) -> float:
        """Seconds into the current run of engine steps (0: none)."""
        return 0.0 if self._decoding_since is None else (time.time_ns() - self._decoding_since) / 1e9

    def _end_decoding(self) -> None:
        """Close the current run of engine steps: one "decode" span."""
        if self._decoding_since is not None:
            end = time.time_ns()
            TRACER.add(DECODE, self._decoding_since, end)
            self._busy_s += (end - self._decoding_since) / 1e9
            self._decoding_since = None

    async def _idle(self) -> None:
        """Wait for new work; wake every few ms to look for new weights."""
        self._work.clear()
        try:
            await asyncio.wait_for(self._work.wait(), timeout=_IDLE_POLL_S)
        except TimeoutError:
            pass

    @endpoint
    async def hold_weights(self, hold: bool) -> int:
        """Keep (True) the weights in use, taking no newer version from the channel until released
        (False), across calls: an evaluation pinned to one version (weights/delivery.py). Returns
        the version.

        A hold first takes the channel's newest version, as the engine loop would before its
        next step: admission control counts every call it admitted before the hold as sampled
        with at least that version, and holding an older one would make those calls stale."""
        if hold:
            await self._take_newest()
        self._weight_holds += 1 if hold else -1
        return self.engine.version

    async def _take_newest(self) -> None:
        """Until the engine holds the version the channel had when asked (drain mode: after the
        running requests finish). No wait under another hold: that one keeps its version."""
        latest = self.channel.latest() if self.channel is not None else None
        while latest is not None and self.engine.version < latest and not self._weight_holds:
            self._maybe_swap()
            if self.engine.version < latest:
                await asyncio.sleep(_IDLE_POLL_S)

    def _maybe_swap(self) -> None:
        if self.channel is None:
            return
        if self._weight_holds:
            self.engine.draining = False  # drain mode: the swap waits for the hold, not for requests
            return
        latest = self.channel.latest()
        if latest is None or latest <= self.engine.version:
            return
        if self.engine.running and self.engine.swap_mode == "drain":
            self.engine.draining = True  # no new requests until the running ones finish
            return
        with self.channel.reading(latest) as (version, state_dict):
            self._swap(state_dict, version)

    def _swap(self, state_dict: dict, version: int) -> None:
        start = time.time_ns()
        with TRACER.span(SWAP_WEIGHTS, lane="weights"):
            self.engine.swap(state_dict, version)
        if self._decoding_since is None:  # inside a run of engine steps, the run counts it
            self._busy_s += (time.time_ns() - start) / 1e9

    @endpoint
    @answers_on_port
    async def load_version(self, version: int) -> Loaded:
        """Load policy `version` (or a newer one, from the shm channel) while generate calls run,
        as generator.swap_mode says: in drain mode once the running requests have finished."""
        if self.channel is not None:
            await self._drain()
            with self.channel.reading(version) as (version, state_dict):
                self._swap(state_dict, version)
            return Loaded(version)
        from forge_async.weights import store  # heavy to import: only for its transport

        state_dict = await store.get_policy(version)
        await self._drain()
        self._swap(state_dict, version)
        return Loaded(version)

    @endpoint
    async def take_version(self, version: int) -> int:
        """Copy the channel's `version` (or the newer one in its slot by now) aside, for `use_taken`
        (a snapshot that lags: handles/generators/snapshot.py); returns which version."""
        if self.channel is None:
            raise RuntimeError("take_version: this generator reads no channel (weights.transport is torchstore)")
        with self.channel.reading(version) as (found, state_dict):
            self._taken = found, {name: tensor.clone() for name, tensor in state_dict.items()}
        return found

    @endpoint
    @answers_on_port
    async def use_taken(self) -> Loaded:
        """Swap in the version copied aside, as `load_version` swaps (none taken: keep the weights)."""
        if self._taken is not None:
            (version, state_dict), self._taken = self._taken, None
            await self._drain()
            self._swap(state_dict, version)
        return Loaded(self.engine.version)

    async def _drain(self) -> None:
        """In drain mode, before a swap: no new request starts until the running ones have
        finished, so that each completion is sampled by one version (the swap lets them in)."""
        if self.engine.swap_mode != "drain":
            return
        self.engine.draining = True
        while self.engine.running:
            await asyncio.sleep(0)  # one look per pass of the engine loop, which steps in between

    @endpoint
    async def score(self, sequences: list[list[int]]) -> list[list[float]]:
        """log p(token t | tokens < t) for t >= 1 of each sequence, under the engine's weights."""
        from vllm import SamplingParams

        if self.engine.has_work:  # LLM.generate would step the loop's requests too
            raise RuntimeError("score() needs an idle generator; call it between generate calls")
        params = SamplingParams(max_tokens=1, prompt_logprobs=0)
        # vLLM 0.32's LoRA logits layer indexes adapters per request, not per prompt token:
        # prompt logprobs of several requests in one batch fail, so with LoRA one at a time.
        batches = [[seq] for seq in sequences] if self.engine.adapter else [sequences]
        outputs = [
            out
            for batch in batches
            for out in self.engine.llm.generate(
                [{"prompt_token_ids": seq} for seq in batch],
                params,
                use_tqdm=False,
                lora_request=self.engine.lora_request,
            )
        ]
        return [
            [out.prompt_logprobs[t][tok].logprob for t, tok in enumerate(seq) if t > 0]
            for seq, out in zip(sequences, outputs)
        ]
