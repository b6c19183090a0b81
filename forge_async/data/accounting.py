"""Where every sample a policy generated went: one identity for the trained policy and a rival.

    generated = trained + dropped_stale + dropped_other + left_in_buffer + in_flight + lost

`generated` counts the samples that reached the policy's buffer; `in_flight` those a step had
taken but not yet trained on when the run ended (a rival's step left unfinished, the trained
policy's rollouts counted at the end), `lost` those of a failed trainer step.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class SampleAccount:
    generated: int
    trained: int
    dropped_stale: int
    dropped_other: int
    left_in_buffer: int
    in_flight: int = 0
    lost: int = 0

    @property
    def accounted(self) -> int:
        return self.trained + self.dropped_stale + self.dropped_other + self.left_in_buffer + self.in_flight + self.lost

    @property
    def balanced(self) -> bool:
        """Whether every generated sample is accounted for, once."""
        return self.accounted == self.generated
