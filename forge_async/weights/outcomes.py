"""What bringing a version to a receiver came to, as the relays, the sender and the generators
answer it (light: the controller reads these without importing torch)."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Loaded:
    """The receiver holds `version` now (a sender sends the newest it has: maybe newer than asked)."""

    version: int


@dataclass(frozen=True)
class Sent:
    """The weight sender's pair brought `version` (`bytes` of it) into its relay's channel."""

    version: int
    bytes: int
    send_ms: float


@dataclass(frozen=True)
class LinkFailed:
    """A link did not open, or failed mid-version: the receiver's host keeps the version it had."""

    why: str


@dataclass(frozen=True)
class ReceiverLost:
    """The receiver is lost with its node: nothing more goes to it, nor to its generators."""

    why: str


LoadOutcome = Loaded | LinkFailed | ReceiverLost


@dataclass(frozen=True)
class WeightReceiver:
    """A receiver's tally over the run (weights/delivery.py; summary.json's `weight_receivers`)."""

    version: int  # the version it holds
    versions_skipped: int  # versions it never loaded: a newer one was ready first
    link_failures: int
    lost: bool  # lost with its node
    taken_back: int  # times its node came back
