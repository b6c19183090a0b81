"""The tokens vLLM's sampler kept at each step (top-k / top-p / min-p), per request: the kept sets
a completion carries to the trainer (data/kept_sets.py).

vLLM's sampler applies the temperature and min-p, then top-k and top-p, and samples from what is
left. With `logprobs_mode="processed_logprobs"` (the engine option `logprobs_mode` below) its
top-k/top-p stage also returns the log-probabilities it sampled from, -inf outside the kept set:
the set is where they are finite. This capture wraps that stage of the engine's own sampler (the
engine runs in-process, as for routes: generation/route_capture.py) and keeps, after each engine
step, every request's set of that step, ascending ids, until the step's outputs are read.

A step's row that vLLM discards (a prompt still being prefilled in chunks) is read by no one: its
set is replaced at the next step. A greedy step (every request greedy) samples without the stage
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
        self._step: dict[str, np.ndarray | None] = {}  # request id -> its set (None: over the cap)

    @staticmethod
    def llm_kwargs() -> dict:
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
        """Each row's kept ids (ascending), by the request the row samples for."""
        kept = logprobs.isfinite()
        sizes = kept.sum(-1).tolist()
        ids = kept.nonzero()[:, 1].int().cpu().numpy()
        req_ids = self._runner.input_batch.req_ids
        self._step = {}
        start = 0
        for row, size in enumerate(sizes):
            self._step[req_ids[row]] = ids[start : start + size] if size <= self.cap else None
            start += size

    def take(self, engine_request_id: str) -> tuple[np.ndarray | None, bool]:
        """The kept set of a request's token sampled at the last step, and whether it was over the
        cap (then no set). (None, False): no set was recorded (a greedy step)."""
        if engine_request_id not in self._step:
            return None, False
        ids = self._step[engine_request_id]
        return ids, ids is None
