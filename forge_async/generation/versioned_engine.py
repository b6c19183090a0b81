"""A vLLM engine whose weights may change between steps, tagging every token with its version.

vLLM's LLMEngine is stepped here one engine step at a time. Each step samples at
most one new token per running request, with the weights in place at that
moment, so each token is tagged with the version current at its step. `swap`
replaces the weights between two steps:

- swap_mode=inflight: running requests keep going (with the KV cache they built
  under the old weights); prefix caching is off, so no *new* request can reuse
  KV computed by old weights.
- swap_mode=drain: the caller sets `draining` when a new version waits; no new
  request is admitted until running ones finish; then `swap` runs with the
  engine idle and the prefix cache is reset (a swap made with requests still
  running preempts them to reset it: they compute their KV again under the new
  weights, and the swap is counted in `preempting_resets`).
- swap_mode=abort_resume: `swap` aborts every request vLLM holds, loads the
  weights, resets the prefix cache and re-submits each request (under a fresh
  vLLM id) with its prompt + the tokens it has so far as the new prompt, and its
  max_tokens / min_tokens reduced by those tokens. vLLM prefills that prefix again
  under the new weights, so no KV of the old weights is used after the swap. The
  caller's Completion keeps the original prompt; its prefix tokens keep their old
  versions and logprobs, the resumed ones carry the new version.

With an AdapterSlot (LoRA), every request runs base + adapter and `swap` replaces
the adapter alone, under the same modes; the base weights never change. Full weights are
copied into place where the engine keeps them plain (CPU, generator.cpu_weights=plain), else
reloaded by vLLM layer by layer (generation/engine_weights.py).

Requests are sampled with detokenize=False: vLLM's incremental detokenizer, run on
every step, is a large share of a small model's decode time on CPU (docs/benchmarks.md,
pipeline). A completion's text is decoded once, when it finishes, with the engine's
tokenizer.

Consecutive submits of one prompt with one SamplingParams object (a GRPO group) reach
vLLM as one request with n samples: vLLM processes the input once and fans it out to n
sequences, where n separate requests would each be validated and deep-copied. Each
sample is still its own `Request` here, finishing on its own.

For a Mixture-of-Experts model a route capture (generation/route_capture.py) records the experts
each token went to; a finished sample's routes travel on its Completion. With abort_resume they
are those of the resumed computation, which prefilled the whole prefix again. Likewise a kept-set
capture (generation/kept_set_capture.py) records the tokens the sampler kept at each step and
their log mass; a resumed request's earlier tokens keep the sets they were sampled with.
"""

import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, get_args

from forge_async.data.episode import Completion
from forge_async.data.kept_sets import KeptSets
from forge_async.generation.kept_set_capture import GREEDY_BELOW
from forge_async.generation import engine_weights
from forge_async.generation.route_capture import sample_request_id
from forge_async.generation.stats import SwapPauses

if TYPE_CHECKING:
    import numpy as np
    from vllm import SamplingParams

SwapMode = Literal["inflight", "drain", "abort_resume"]
SWAP_MODES: tuple[SwapMode, ...] = get_args(SwapMode)


@dataclass
class Request:
    prompt_ids: list[int]
    params: "SamplingParams"
    on_done: Callable[[Completion], None] | None = None
    on_error: Callable[[Exception], None] | None = None
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    result: Completion | None = None
    engine_id: str | None = None  # vLLM's id of the request running this sample
    # with a kept-set capture, per token: the set (or None) and its log mass (data/kept_sets.py)
    kept: list["np.ndarray | None"] = field(default_factory=list)
    kept_log_mass: list[float] = field(default_factory=list)
    kept_over_cap: int = 0
    kept_missing: int = 0


class VersionedEngine:
    def __init__(self, llm, swap_mode: str, version: int = 0, adapter=None, routes=None, kept_sets=None):
        """`adapter`: an AdapterSlot (generation/adapter_slot.py) when serving LoRA, else None.
        `routes`: a route capture (generation/route_capture.py) for an MoE model, attached to
        `llm` here (which was built with its `llm_kwargs`), else None. `kept_sets`: likewise a
        KeptSetCapture (generation/kept_set_capture.py) when the engine reports processed logprobs."""
        if swap_mode not in SWAP_MODES:
            raise ValueError(f"swap_mode={swap_mode!r}: one of {', '.join(SWAP_MODES)}")
        self.llm = llm
        self.engine = llm.llm_engine
        self.tokenizer = llm.get_tokenizer()
        self.swap_mode = swap_mode
        self.adapter = adapter
        self.lora_request = adapter.request if adapter is not None else None
        self.loads_in_place = adapter is None and engine_weights.loads_in_place(llm)
        self.routes = routes
        if routes is not None:
            routes.attach(llm)
        self.kept_sets = kept_sets
        if kept_sets is not None:
            kept_sets.attach(llm)
        self.version = version
        self.draining = False
        self.swap_pauses = SwapPauses()  # of the swaps made with requests running
        # abort_resume: requests re-submitted with a generated prefix, and their prefix lengths
        # (prompt + generated), the tokens vLLM prefills again after a swap
        self.resumed_requests = 0
        self.resumed_prefix_tokens = 0
        # swaps whose prefix-cache reset had to preempt requests still holding KV (_reset_prefix_cache)
        self.preempting_resets = 0
        self.unfinished = 0  # samples submitted and not finished (queued or running)
        self._ids = itertools.count()
        self._queue: list[Request] = []
        self._running: dict[str, list[Request]] = {}  # by vLLM request id: its samples, by index

    @staticmethod
    def llm_kwargs(swap_mode: str) -> dict:
        """Engine options this class relies on."""
        return {"enable_prefix_caching": swap_mode != "inflight"}

    @property
    def running(self) -> bool:
        return self.engine.has_unfinished_requests()

    @property
    def has_work(self) -> bool:
        return bool(self._queue) or self.running

    def submit(self, prompt_ids: list[int], params: "SamplingParams", on_done=None, on_error=None) -> Request:
        """Queue a request; `params` must use RequestOutputKind.DELTA, logprobs=0 and detokenize=False."""
        request = Request(list(prompt_ids), params, on_done, on_error)
        self._queue.append(request)
        self.unfinished += 1
        return request

    def step(self) -> None:
        """Admit queued requests (unless draining), then one engine step."""
        if self._queue and not self.draining:
            for group in _groups(self._queue):
                self._add(group, group[0].prompt_ids, group[0].params)
            self._queue.clear()
        if not self.running:
            return
        if self.kept_sets is not None:
            self.kept_sets.clear()
        for output in self.engine.step():
            self._record(output)

    def _add(self, group: list[Request], prompt_ids: list[int], params: "SamplingParams") -> None:
        """One vLLM request sampling `prompt_ids` len(group) times, sample i for group[i]."""
        from vllm.inputs import tokens_input  # vLLM stays out of the controller, which imports this module

        request_id = str(next(self._ids))
        if len(group) > 1:
            params = params.clone()
            params.n = len(group)
        # Token ids in, as vLLM's own renderer would hand them over (a raw prompt is deprecated).
        prompt = tokens_input(prompt_ids)
        engine_id = self.engine.add_request(request_id, prompt, params, lora_request=self.lora_request)
        for index, request in enumerate(group):
            request.engine_id = sample_request_id(engine_id, index, len(group))
        self._running[request_id] = group

    def _record(self, output) -> None:
        group = self._running.get(output.request_id)
        if group is None:  # a request aborted by an abort_resume swap: its id is retired
            return
        for delta in output.outputs:
            request = group[delta.index]
            request.token_ids.extend(delta.token_ids)
            request.logprobs.extend(lp[tok].logprob for lp, tok in zip(delta.logprobs, delta.token_ids))
            request.versions.extend([self.version] * len(delta.token_ids))
            if self.kept_sets is not None:
                self._record_kept_sets(request, len(delta.token_ids))
            if delta.finish_reason is not None or (output.finished and request.result is None):
                self._finish(request, delta.finish_reason or "length", delta)
        if output.finished:
            del self._running[output.request_id]

    def _record_kept_sets(self, request: Request, new_tokens: int) -> None:
        """The kept set of the token the last step sampled for `request` (one token a step: no
        speculative decoding here)."""
        if new_tokens == 0:
            return
        if new_tokens > 1:
            raise RuntimeError(f"vLLM gave {new_tokens} tokens of one request in one step: kept sets are per step")
        kept = self.kept_sets.take(request.engine_id)
        if not kept.recorded:
            if request.params.temperature >= GREEDY_BELOW:
                raise RuntimeError(
                    f"vLLM sampled a token of request {request.engine_id} at a step whose sampler recorded no "
                    "kept set for it: the kept-set capture (generation/kept_set_capture.py) is out of step "
                    "with the engine"
                )
            request.kept_missing += 1  # greedy: no distribution to record
        request.kept.append(kept.ids)
        request.kept_log_mass.append(kept.log_mass)
        request.kept_over_cap += kept.over_cap

    def _finish(self, request: Request, finish_reason: str, output) -> None:
        routes = None
        if self.routes is not None:
            fed = len(request.prompt_ids) + len(request.token_ids) - 1  # the last token is never fed
            routes = self.routes.take(request.engine_id, fed, output)
        request.result = Completion(
            prompt_ids=request.prompt_ids,
            token_ids=request.token_ids,
            logprobs=request.logprobs,
            versions=request.versions,
            text=self.tokenizer.decode(request.token_ids, skip_special_tokens=True),
            finish_reason=finish_reason,
            routes=routes,
            kept_sets=(
                KeptSets.of(request.kept, request.kept_log_mass, request.kept_over_cap, request.kept_missing)
                if self.kept_sets is not None
                else None
            ),
        )
        self.unfinished -= 1
        if request.on_done is not None:
            request.on_done(request.result)

    def swap(self, state_dict: dict, version: int) -> float:
        """Load `state_dict` as `version`: full weights (Hugging Face names), or with an adapter
        slot the adapter (PEFT names). Returns the pause in ms (with abort_resume: abort, load and
        re-submit; the prefill of the resumed prefixes comes in the next steps)."""
        in_flight = self.running
        start = time.perf_counter()
        aborted = self._abort_running() if self.swap_mode == "abort_resume" else []
        if self.adapter is not None:
            self.adapter.load(self.llm, state_dict)
        elif self.loads_in_place:
            engine_weights.load_in_place(self.llm, state_dict)
        else:
            engine_weights.reload(self.llm, state_dict)
        if self.swap_mode != "inflight":
            self._reset_prefix_cache()
        self.version = version
        self.draining = False
        for request in aborted:
            self._resume(request)
        pause_ms = (time.perf_counter() - start) * 1e3
        if in_flight:
            self.swap_pauses.add(pause_ms)
        return pause_ms

    def _reset_prefix_cache(self) -> None:
        """Forget every cached prefix, so that no KV computed by the old weights is used again.

        vLLM resets only while no request holds KV blocks and otherwise returns False, keeping
        every cached prefix (vllm/v1/core/block_pool.py, `BlockPool.reset_prefix_cache`). drain and
        abort_resume swap with none running; a swap made with requests still running (a caller
        that did not drain) would leave the old weights' prefixes in the cache silently. Then the
        reset is made again as vLLM's own pause with `clear_cache` makes it (`reset_running_requests`:
        vllm/v1/engine/core.py, `EngineCore._reset_caches`; vllm/v1/core/sched/scheduler.py,
        `Scheduler.reset_prefix_cache`): the running requests are preempted, their blocks freed,
        and they compute their KV again, under the new weights, when next scheduled (their
        tokens so far are kept; those sampled from here on carry the new version). Counted in
        `preempting_resets`; vLLM raises if even that reset fails."""
        if self.llm.reset_prefix_cache():
            return
        self.llm.reset_prefix_cache(reset_running_requests=True)
        self.preempting_resets += 1
        logging.getLogger(__name__).warning(
            "weight swap with requests still holding KV (swap_mode=%s): they were preempted to reset the "
            "prefix cache and compute their KV again under the new weights",
            self.swap_mode,
        )

    def _abort_running(self) -> list[Request]:
        """Abort every request vLLM holds (decoding, waiting or mid-prefill), freeing all KV blocks.
        Returns the samples not finished yet."""
        aborted = [request for group in self._running.values() for request in group if request.result is None]
        if self._running:
            self.engine.abort_request(list(self._running))
            self._running.clear()
        return aborted

    def _resume(self, request: Request) -> None:
        """Re-submit `request` with its generated tokens appended to its prompt, for what remains."""
        done = len(request.token_ids)
        params = request.params.clone()
        if params.max_tokens is None:  # the generator's sampling_params always set it
            raise RuntimeError("a request to resume has no max_tokens: what remains of it is unbounded")
        params.max_tokens -= done
        params.min_tokens = max(0, params.min_tokens - done)
        if done:
            self.resumed_requests += 1
            self.resumed_prefix_tokens += len(request.prompt_ids) + done
        self._add([request], request.prompt_ids + request.token_ids, params)

    def fail_all(self, error: Exception) -> None:
        """Drop every queued and running request after an engine error, telling their owners."""
        failed = self._queue + self._abort_running()
        self._queue = []
        self.unfinished = 0
        for request in failed:
            if request.on_error is not None:
                request.on_error(error)


def _groups(queue: list[Request]) -> list[list[Request]]:
    """Runs of consecutive requests with the same prompt and the same SamplingParams object
    (greedy ones stay alone: vLLM takes n > 1 only when sampling)."""
    from vllm.sampling_params import SamplingType

    groups: list[list[Request]] = []
    for request in queue:
        last = groups[-1][0] if groups else None
        if (
            last is not None
            and last.params is request.params
            and last.prompt_ids == request.prompt_ids
            and request.params.sampling_type != SamplingType.GREEDY
        ):
            groups[-1].append(request)
        else:
            groups.append([request])
    return groups
