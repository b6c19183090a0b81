"""The tokens vLLM's sampler kept at each step (top-k / top-p / min-p), per request: the kept sets
a completion carries to the trainer (data/kept_sets.py).

vLLM's sampler applies the temperature and min-p, then top-k and top-p, and samples from what is
left. With `logprobs_mode="processed_logprobs"` (the engine option `logprobs_mode` below) its
top-k/top-p stage also returns the log-probabilities it sampled from, -inf outside the kept set:
the set is where they are finite. This capture wraps that stage of the engine's own sampler (the
engine runs in-process, as for routes: generation/route_capture.py) and keeps, after each engine
step, every request's set of that step, ascending ids, until the step's outputs are read.

A step's row that vLLM discards (a prompt still being prefilled in chunks) is read by no one: its
set is forgotten before the next step. A greedy step (every request greedy) samples without the stage
and records nothing: its tokens get no set, and the trainer uses the whole vocabulary there.
"""

import numpy as np

from forge_async.errors import ConfigError
from forge_async.generation.route_capture import in_process_runner

# The engine option under which the sampler's top-k/top-p stage returns the distribution it
# sampled from; the completions' logprobs are then that distribution's (tempered, truncated).
LOGPROBS_MODE = "processed_logprobs"


class KeptSetCapture:
    """The kept set of each request at the last engine step, sets larger than `cap` left out."""

    def __init__(self, cap: int):
        self.cap = cap
        self._runner = None
        # the last step's sets: every row's ids one after the other, where each row's start, and
        # the row of each request id
        self._ids = np.empty(0, np.int32)
        self._starts = np.zeros(1, np.int64)
        self._rows: dict[str, int] = {}

    @staticmethod
    def llm_kwargs() -> dict:
        """The processed logprobs. (Each step's sets are read with that step's outputs: the engine
        never schedules a step ahead, generation/platform.py.)"""
        return {"logprobs_mode": LOGPROBS_MODE}

    def attach(self, llm) -> None:
        """Wrap the top-k/top-p stage of `llm`'s sampler (built with `llm_kwargs`)."""
        runner = in_process_runner(llm, "sampling.keep_mask's kept sets")
        stage = getattr(getattr(runner, "sampler", None), "topk_topp_sampler", None)
        if stage is None:
            raise ConfigError(
                f"sampling.keep_mask: this engine's model runner ({type(runner).__name__}) has no top-k/top-p "
                "sampler stage to read the kept sets from (vLLM's V2 model runner, an MoE model on a GPU, "
                "is not supported yet); set sampling.keep_mask=false"
            )
        self._runner = runner
        sample = stage.forward

        def sample_and_keep_sets(logits, generators, k, p):
            sampled, logprobs = sample(logits, generators, k, p)
            self._keep(logprobs)
            return sampled, logprobs

        stage.forward = sample_and_keep_sets

    def _keep(self, logprobs) -> None:
        """Each row's kept ids (ascending), by the request the row samples for. In numpy: a decode
        step of a small model takes about a millisecond, and each torch call on small tensors
        costs microseconds."""
        kept = logprobs.isfinite().cpu().numpy()
        rows, ids = np.nonzero(kept)
        self._ids = ids.astype(np.int32)
        self._starts = np.searchsorted(rows, np.arange(len(kept) + 1))
        self._rows = {req_id: row for row, req_id in enumerate(self._runner.input_batch.req_ids[: len(kept)])}

    def clear(self) -> None:
        """Forget the last step's sets (called before each engine step: a step that samples greedily
        records none, and must not hand out the step before's)."""
        self._rows = {}

    def take(self, engine_request_id: str) -> tuple[np.ndarray | None, bool]:
        """The kept set of a request's token sampled at the last step, and whether it was over the
        cap (then no set). (None, False): no set was recorded (a greedy step)."""
        row = self._rows.get(engine_request_id)
        if row is None:
            return None, False
        start, end = self._starts[row], self._starts[row + 1]
        if end - start > self.cap:
            return None, True
        return self._ids[start:end], False
