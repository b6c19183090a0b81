"""summary.json, typed: what a run did, one field per key, in the file's order.

`RunSummary` is a GRPO run's (apps.grpo, apps.distill), written by controller/summary.py;
`SFTSummary` a supervised fine-tuning run's (apps.sft), written by controller/sft_summary.py.
The console's report (cli/report.py) and the distillation's teacher read them back typed
(`RunSummary.read(run_dir)`). A key that holds an object is a nested dataclass where the summary
owns its shape (`target_reached`, `generators_taken_back`, `weight_receivers`), a plain dict
where another part does (the buffer's `dropped_stale_by_len`, the evaluation rows, `placement`,
the rival seat's `rival`).

A GRPO run accounts for every sample that reached its buffer (data/accounting.py):

    generated = trained + dropped_stale + dropped_other + left_in_buffer + in_flight
                + lost_in_failed_step

Drops are also given by reason (`dropped_by_reason`: stale, overflow, buffer_lost, zero_variance,
scorer_error, env_error, ...). Episodes dropped before their first model turn (an environment's
reset failed, no session came free) never reached a generator: they are `not_started` (with
`not_started_by_reason`), outside `generated` and the identity; `dropped_by_reason` counts them
with the rest. A resumed run continues the counters of its checkpoint.
"""

import json
import types
import typing
from dataclasses import asdict, dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any, ClassVar, Self

from forge_async.observability.outputs import replace_text
from forge_async.weights.outcomes import WeightReceiver

SUMMARY_FILE = "summary.json"


class SummaryFile:
    """A dataclass kept as RUN_DIR/summary.json: a key per field, in field order; a nested
    dataclass (or a list of them, or None) as its own object."""

    __dataclass_fields__: ClassVar[dict[str, Any]]  # each subclass is a dataclass

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def write(self, run_dir: Path) -> None:
        """RUN_DIR/summary.json, replaced whole (observability/outputs.py: a failed write is reported)."""
        replace_text(run_dir / SUMMARY_FILE, json.dumps(self.to_json(), indent=2))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        """From summary.json's object: every field's key must be there; keys of no field are left out."""
        missing = [f.name for f in fields(cls) if f.name not in data]
        if missing:
            raise ValueError(f"not a {cls.__name__}: summary.json lacks {', '.join(missing)}")
        return _built(cls, data)

    @classmethod
    def read(cls, run_dir: Path) -> Self:
        """RUN_DIR/summary.json."""
        return cls.from_json(json.loads((run_dir / SUMMARY_FILE).read_text()))


def _built(cls: Any, data: dict[str, Any]) -> Any:
    """An instance of dataclass `cls` from its JSON object."""
    hints = typing.get_type_hints(cls)
    return cls(**{f.name: _value(hints[f.name], data[f.name]) for f in fields(cls)})


def _value(hint: Any, value: Any) -> Any:
    """`value` as a field annotated `hint` holds it: nested dataclasses built, anything else as read."""
    if value is None:
        return None
    if is_dataclass(hint):
        return _built(hint, value)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list and args and is_dataclass(args[0]):
        return [_built(args[0], v) for v in value]
    if origin in (types.UnionType, typing.Union):
        nested = [a for a in args if is_dataclass(a)]
        return _built(nested[0], value) if nested else value
    return value


@dataclass(frozen=True)
class TargetReached:
    """The first step whose moving average of the reward reached target_reward."""

    step: int
    wall_s: float


@dataclass(frozen=True)
class TakenBack:
    """A generator spawned again on a lost node that came back."""

    generator: int
    proc: str  # its new proc, as error messages name it
    samples_before: int  # its generator_samples count when it came back


@dataclass(frozen=True)
class RunSummary(SummaryFile):
    """A GRPO run's summary.json (apps.grpo, apps.distill)."""

    mode: str  # async or sync
    steps: int
    wall_s: float  # every segment of a resumed run
    interrupted: bool
    stop_reason: str | None  # the signal that interrupted the run
    # what a stop past checkpoint.stop_grace_s abandoned or did not save; [] when nothing was
    cut_short: list[str]
    failure: str | None  # what ended the run early
    resumable: bool  # resume=RUN_DIR can continue it (not with a rival)
    generated: int  # episodes that reached the replay buffer
    trained: int
    dropped_stale: int
    dropped_other: int
    dropped_by_reason: dict[str, int]
    not_started: int  # dropped before reaching a generator: not generated
    not_started_by_reason: dict[str, int]
    dropped_zero_variance: int  # part of dropped_other
    # episodes of groups with equal rewards trained on: over filter.max_oversampling
    kept_zero_variance: int
    # per completion-length quartile, and the longest's drop rate over the shortest's (docs/staleness.md)
    dropped_stale_by_len: dict[str, Any]
    left_in_buffer: int
    in_flight: int  # workers are drained into the buffer before the summary is written: 0
    lost_in_failed_step: int  # taken for a step that a failed trainer never finished
    reward_first: float | None  # mean over the first STEP_ENDS steps (observability/record.py); None before any
    reward_last: float | None
    # evaluation on held-out prompts (eval.*): the rows of the first and the last, or None
    eval_first: dict[str, Any] | None
    eval_last: dict[str, Any] | None
    target_reward: float | None  # None for a game (env.seats), whose rewards have no target
    target_reached: TargetReached | None
    samples_per_s: float
    trainer_idle_frac: float
    generator_idle_frac: float
    gen_paused_for_admission_s: float  # admission control's hold on generation
    generator_restarts: int
    generator_samples: list[int]  # per generator (rollout_routing spreads them)
    generators_lost: list[str]  # generators lost with their host (the run went on without them): why, each
    generators_taken_back: list[TakenBack]
    lost_requests: int  # completions whose generate call died with its generator, issued again
    checkpoint_s: float
    inflight_swaps: int  # weight swaps made with requests running
    swap_pause_ms_mean: float | None  # None without such a swap
    swap_pause_ms_max: float | None
    # swap_mode=abort_resume: requests re-submitted with their generated prefix, and the
    # prefix tokens (prompt + generated) prefilled again
    resumed_requests: int
    resumed_prefix_tokens: int
    stored_versions: list[int]  # policy versions still held by the weight transport
    torchstore_versions: list[int]  # versions kept for relays / generators
    # per weight relay (or generator, under weights.transport=torchstore)
    weight_receivers: list[WeightReceiver]
    placement: dict[str, list[int]]  # the node ranks each mesh runs on (handles/run.py)
    skipped_rows: dict[str, int]  # dataset rows skipped at load, by reason (task.skip_bad_rows)
    # a `rival` seat's policy (controller/rival_loop.py): its version and samples, accounted as the run's
    rival: dict[str, Any] | None
    accounting_ok: bool  # the identity above holds
    final_model: str | None
    run_dir: str


@dataclass(frozen=True)
class SFTSummary(SummaryFile):
    """A supervised fine-tuning run's summary.json (apps.sft)."""

    objective: str  # sft
    steps: int
    wall_s: float
    interrupted: bool
    stop_reason: str | None
    cut_short: list[str]  # as RunSummary's
    failure: str | None
    resumable: bool
    trained: int  # demonstrations
    trained_tokens: int  # their completion tokens, EOS included
    skipped_demonstrations: dict[str, int]
    loss_window: int  # steps the first and the last loss average
    loss_first: float | None
    loss_last: float | None
    eval_first: dict[str, Any] | None
    eval_last: dict[str, Any] | None
    samples_per_s: float
    tokens_per_s: float
    checkpoint_s: float
    generator_restarts: int
    placement: dict[str, list[int]]
    skipped_rows: dict[str, int]
    final_model: str | None
    grpo_command: str | None  # GRPO from the final policy (controller/sft_summary.py)
    run_dir: str
