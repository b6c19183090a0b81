"""What a generator answers `stats` with: its version and its work so far (light: the controller
reads it without importing vLLM). summary.json sums these over the run's generators."""

from dataclasses import dataclass


@dataclass
class SwapPauses:
    """The generation pauses of a run's swaps, as a tally: a days-long run swaps millions of times."""

    count: int = 0
    total_ms: float = 0.0
    max_ms: float = 0.0

    def add(self, pause_ms: float) -> None:
        self.count += 1
        self.total_ms += pause_ms
        self.max_ms = max(self.max_ms, pause_ms)


@dataclass(frozen=True)
class GeneratorStats:
    version: int  # the policy version the engine samples with
    busy_s: float  # seconds of engine steps and of weight swaps (summary.json's generator_idle_frac)
    swap_pauses: SwapPauses  # of the swaps made with requests running (a copy: the engine's own keeps counting)
    # generator.swap_mode=abort_resume: requests re-submitted with their generated prefix, and the
    # prefix tokens (prompt + generated) prefilled again
    resumed_requests: int
    resumed_prefix_tokens: int
    preempting_resets: int  # swaps whose prefix-cache reset preempted the running requests
