"""The loop's own figures of one training step, each declared with its metrics.jsonl key.

What the batch says (reward/, policy/, completion/) comes from metrics.batch_metrics,
what the trainer measured from the trainer, what the scorers and multi-turn
rollouts measured from them; these are the figures of the pipeline around them.
"""

import time
from collections import deque
from dataclasses import dataclass, field, fields

# Drop reasons logged every step (besides stale and the dropped_other total), 0 until one happens.
SHOWN_DROPS = ("zero_variance", "scorer_error", "env_error", "env_timeout")


def _key(name: str):
    return field(metadata={"key": name})


@dataclass
class PipelineFigures:
    version: int = _key("policy/version")
    trained: int = _key("samples/trained")
    dropped_stale: int = _key("samples/dropped_stale")
    dropped_other: int = _key("samples/dropped_other")
    not_started: int = _key("samples/not_started")  # dropped before reaching a generator: not generated
    kept_zero_variance: int = _key("samples/kept_zero_variance")
    buffered: int = _key("samples/buffered")
    in_flight: int = _key("samples/in_flight")
    generator_paused_s: float = _key("generator/paused_s")
    generator_tokens_per_s: float | None = _key("generator/tokens_per_s")  # None: not measured yet (TokenRate)
    generator_idle_frac: float = _key("generator/idle_frac")  # no generate call in flight, this segment
    generator_restarts: int = _key("generator/restarts")
    trainer_idle_frac: float = _key("train/idle_frac")
    push_ms: float = _key("weights/push_ms")
    sync_ms: float = _key("weights/sync_ms")  # push + the last receiver's load
    weight_bytes: int = _key("weights/bytes")
    wall_s: float = _key("time/wall_s")
    dropped_by_reason: dict[str, int] = field(default_factory=dict)  # samples/dropped_<reason>, SHOWN_DROPS
    samples_by_generator: list[int] = field(default_factory=list)  # generator/<i>/samples: returned, over the run

    def row(self) -> dict[str, float]:
        row = {
            f.metadata["key"]: getattr(self, f.name)
            for f in fields(self)
            if "key" in f.metadata and getattr(self, f.name) is not None  # a figure not measured: no key
        }
        row.update({f"samples/dropped_{reason}": self.dropped_by_reason.get(reason, 0) for reason in SHOWN_DROPS})
        row.update({f"generator/{i}/samples": n for i, n in enumerate(self.samples_by_generator)})
        return row


class TokenRate:
    """Completion tokens per second over the last `window` steps."""

    def __init__(self, tokens: int, window: int = 10):
        self._marks = deque([(time.perf_counter(), tokens)], maxlen=window + 1)
        self._started_at = tokens

    def mark(self, tokens: int) -> float | None:
        """The rate up to now, `tokens` being the total produced so far; None while no call has
        returned a token since it started: a resumed run's first steps may train on the episodes its
        checkpoint kept in the buffer before any generate call of its own comes back."""
        self._marks.append((time.perf_counter(), tokens))
        if tokens == self._started_at:
            return None
        (t0, tokens0), (t1, tokens1) = self._marks[0], self._marks[-1]
        return (tokens1 - tokens0) / max(t1 - t0, 1e-9)
