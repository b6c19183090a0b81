"""What vLLM's sampler did to each request's next-token distribution at each engine step: the
tokens it kept (top-k / top-p / min-p) and the log of their probability under the tempered
distribution over the whole vocabulary ("log mass"): what a completion carries to the trainer
(data/kept_sets.py).

vLLM's sampler applies the temperature, then `min_tokens` (the stop tokens masked) and min-p,
then top-k and top-p, and samples from what is left. With `logprobs_mode="processed_logprobs"`
(the engine option `logprobs_mode` below) its top-k/top-p stage also returns the
log-probabilities it sampled from, -inf outside the kept set: the set is where they are finite,
and those are the logprobs a completion reports. This capture wraps that stage of the engine's
own sampler (the engine runs in-process, as for routes: generation/route_capture.py) and, to
turn a reported logprob into one over the whole vocabulary, the sampler's entry, where it reads
the log-normaliser of the raw logits at each request's temperature. After each engine step it
keeps every request's set of that step (ascending ids; with `record_ids`) and log mass, until
the step's outputs are read.

A step's row that vLLM discards (a prompt still being prefilled in chunks) is read by no one: it
is forgotten before the next step. A greedy step (every request greedy) samples without the
stage and records nothing: its tokens get no set and a log mass of 0.
"""

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from forge_async.errors import ConfigError
from forge_async.generation.route_capture import in_process_runner

if TYPE_CHECKING:
    import torch

# The engine option under which the sampler's top-k/top-p stage returns the distribution it
# sampled from; the completions' logprobs are then that distribution's (tempered, truncated).
LOGPROBS_MODE = "processed_logprobs"
GREEDY_BELOW = 1e-5  # vLLM's sampler reads a temperature below this as greedy (and divides by 1)


class KeptStep(NamedTuple):
    """What the sampler kept for one token: its set (None: none recorded: ids not recorded, over
    the cap, or no row), the log of its whole-vocabulary mass (0: nothing cut), whether the set
    was over the cap, and whether the sampler's stage had a row for the token at all (a greedy
    step has none)."""

    ids: np.ndarray | None
    log_mass: float
    over_cap: bool
    recorded: bool = True


class KeptSetCapture:
    """Each request's kept set (when `record_ids`; sets larger than `cap` left out) and log mass at
    the last engine step."""

    def __init__(self, cap: int, record_ids: bool = True):
        self.cap = cap
        self.record_ids = record_ids
        self._runner: Any = None  # vLLM's model runner (in_process_runner), once attached
        # [rows] the raw logits' logsumexp at each row's temperature
        self._log_normaliser: torch.Tensor | None = None
        # the last step's sets: every row's ids one after the other, where each row's start, each
        # row's log mass, and the row of each request id
        self._ids = np.empty(0, np.int32)
        self._starts = np.zeros(1, np.int64)
        self._log_mass = np.zeros(0, np.float32)
        self._rows: dict[str, int] = {}

    @staticmethod
    def llm_kwargs() -> dict:
        """The processed logprobs. (Each step's sets are read with that step's outputs: the engine
        never schedules a step ahead, generation/platform.py.)"""
        return {"logprobs_mode": LOGPROBS_MODE}

    def attach(self, llm) -> None:
        """Wrap the entry and the top-k/top-p stage of `llm`'s sampler (built with `llm_kwargs`)."""
        runner = in_process_runner(llm, "sampling.keep_mask's kept sets")
        sampler = getattr(runner, "sampler", None)
        stage = getattr(sampler, "topk_topp_sampler", None)
        if sampler is None or stage is None:
            raise ConfigError(
                f"this engine's model runner ({type(runner).__module__}.{type(runner).__name__}) has no top-k/top-p "
                "sampler stage to read the sampled distribution and kept sets from: it is vLLM's V2 runner, which "
                "vLLM builds on a GPU unless VLLM_USE_V2_MODEL_RUNNER=0 is set when the engine is built (the "
                "generator sets it: generation/platform.py, model_runner)"
            )
        self._runner = runner
        enter, sample = sampler.forward, stage.forward

        def enter_noting_normaliser(logits, sampling_metadata, *args, **kwargs):
            self._note_normaliser(logits, sampling_metadata.temperature)
            return enter(logits, sampling_metadata, *args, **kwargs)

        def sample_and_keep_sets(logits, generators, k, p):
            sampled, logprobs = sample(logits, generators, k, p)
            self._keep(logits, sampled, logprobs)
            return sampled, logprobs

        sampler.forward = enter_noting_normaliser
        stage.forward = sample_and_keep_sets

    def _note_normaliser(self, logits, temperature) -> None:
        """log sum_i exp(z_i / T) over the whole vocabulary, per row, as the sampler tempers the
        logits (in fp32, a greedy row's temperature read as 1); None: every row greedy."""
        import torch

        if temperature is None:
            self._log_normaliser = None
            return
        tempered = logits.float() / torch.where(temperature < GREEDY_BELOW, 1.0, temperature).unsqueeze(1)
        self._log_normaliser = torch.logsumexp(tempered, dim=-1)

    def _keep(self, logits, sampled, logprobs) -> None:
        """Each row's log mass and (with `record_ids`) kept ids, by the request the row samples for.
        `logits`: what the stage sampled from, tempered; a sampled token's own logit is never masked,
        so its logprob over the whole vocabulary is z_y - log-normaliser. In numpy: a decode step of
        a small model takes about a millisecond, and each torch call on small tensors costs
        microseconds."""
        normaliser = self._log_normaliser
        if normaliser is None:  # the stage runs only for a step with a row that is not greedy
            raise RuntimeError("vLLM's top-k/top-p stage ran on a step whose rows were all greedy")
        count = len(logprobs)
        chosen = sampled.long().view(-1, 1)
        whole = logits.gather(1, chosen).squeeze(1).float() - normaliser[:count]
        self._log_mass = (whole - logprobs.gather(1, chosen).squeeze(1)).cpu().numpy()
        if self.record_ids:
            rows, ids = np.nonzero(logprobs.isfinite().cpu().numpy())
            self._ids = ids.astype(np.int32)
            self._starts = np.searchsorted(rows, np.arange(count + 1))
        self._rows = {req_id: row for row, req_id in enumerate(self._runner.input_batch.req_ids[:count])}

    def clear(self) -> None:
        """Forget the last step's sets (called before each engine step: a step that samples greedily
        records none, and must not hand out the step before's)."""
        self._rows = {}

    def take(self, engine_request_id: str) -> KeptStep:
        """What was kept for a request's token sampled at the last step."""
        row = self._rows.get(engine_request_id)
        if row is None:
            return KeptStep(None, 0.0, over_cap=False, recorded=False)
        log_mass = float(self._log_mass[row])
        if not self.record_ids:
            return KeptStep(None, log_mass, over_cap=False)
        start, end = self._starts[row], self._starts[row + 1]
        if end - start > self.cap:
            return KeptStep(None, log_mass, over_cap=True)
        return KeptStep(self._ids[start:end], log_mass, over_cap=False)
