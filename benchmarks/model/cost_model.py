"""Cost model of an async GRPO run across hosts: predicted steps/s and what bounds them.

    python -m benchmarks.model.cost_model                                  # every preset
    python -m benchmarks.model.cost_model --scenario 8b-32node --generate-s 60
    python -m benchmarks.model.cost_model --scenario tiny-2host --train-s T --generate-s G  # measured T, G
    python -m benchmarks.model.cost_model --check runs.json                # predicted vs measured
    python -m benchmarks.model.cost_model --check runs.json --json PATH    # ... also in the report's result shape

The system. The trainer's host publishes each policy version (B bytes) into its shared
memory. A weight sender on that host sends each version over a gloo pair to one weight
relay per generator host; the relay writes it into its host's shared memory, where the
generators pick it up between engine steps. The trainer never waits for a transfer; a
relay still busy when newer versions are published is sent the newest next (the others
are skipped). Admission control: a sample generated with version p is trained by the
step that trains from version t only if t - p <= A; a host whose weights lag further
stops generating until they arrive.

Inputs: B model bytes, L link rate per NIC, M memcpy rate, H generator hosts (other than
the trainer's), T train step time, G time to generate one batch on one generator host,
A max_policy_age, c fixed latency per transfer (waking the sender and relay, the relay's answer).

Transfer time X of one version, from the sender's copy out of the trainer's channel
(stage, B/M) to the relay's write into its host's channel (commit, B/M):

    star (what forge_async does):  X = c + 2 B/M + H B/L
        the H pairs run at once through the sender's NIC, each at L/H
    tree (relays forwarding; not implemented):  X = r c + 2 B/M + r B/L,  r = ceil(log2(H + 1))
        a binomial tree: every host holding the version sends it to one more, r rounds
        of one copy per NIC, store-and-forward

Both give c + 2 B/M + B/L at H = 1. The trainer's own publish copy is part of T, and a
generator's load out of its host's channel is part of G.

Seconds per step S, in the steady state. Assumed: training and generation overlap fully
(async); the H hosts share each batch evenly, so a batch takes g = G/H; every host gets
a version at the same time; versions are treated as continuous. S is the largest of
three bounds:

    train:     T
    generate:  g = G/H
    weights:   W = (T + X + g) / (A + 1)             if that is >= X (no version skipped)
               W = max(T + X + g, 2 X) / (A + 1)      otherwise (relays skip versions)

Why W: the batch for step k needs a version p >= k - A. Version k - A is published when
step k - A - 1 ends (T after it starts), reaches the generator hosts X later, and the
batch then takes g; it must be ready when step k starts, A + 1 steps after step k - A - 1
started. So (A + 1) S >= T + X + g. When X is longer than a step, transfers run back to
back: each starts as the previous one lands, so it carries the newest version the
trainer reached while it was still waiting for the landing one. Versions then advance
by at most A + 1 per two transfers: (A + 1) S >= 2 X. (Counting only one transfer,
X / (A + 1), misses both the trip of the version and that second transfer.)

Predicted steps/s = 1 / max(T, g, W); the bottleneck is the largest bound. A = 0 is
the synchronous loop, S = T + X + g. At A = 1 the transfer costs nothing only while it
fits in the imbalance of the two sides, X <= |T - g|.

How close the formula is to its own assumptions: simulate_step_s runs the same pipeline
in whole versions, and both are printed. They agree where no version is skipped, and
where X is far longer than T + g. In between, with relays skipping versions and A >= 2,
the formula is an upper bound on steps/s: up to about 1.4x the simulated rate in the
cases tried.
"""

import argparse
import json
import math
import sys
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from benchmarks.harness.results import BenchmarkResult, Line, Series, Table, add_json_argument, this_command

GBIT = 1e9 / 8  # bytes/s in one Gbit/s
GB = 1e9
TOPOLOGIES = ("star", "tree")


@dataclass(frozen=True)
class Inputs:
    model_bytes: float  # B
    link_gbit: float  # L, per NIC
    memcpy_gbs: float  # M, GB/s
    hosts: int  # H, generator hosts other than the trainer's
    train_s: float  # T, one train step
    generate_s: float  # G, one batch on one generator host
    max_policy_age: int  # A
    latency_ms: float  # c, per transfer (per round for a tree)

    def __post_init__(self):
        if self.hosts < 1 or self.max_policy_age < 0 or min(self.model_bytes, self.link_gbit, self.memcpy_gbs) <= 0:
            raise ValueError(f"need hosts >= 1, max_policy_age >= 0 and positive sizes and rates: {self}")


@dataclass(frozen=True)
class Prediction:
    transfer_s: float  # X
    bounds: dict[str, float]  # seconds per step: train, generate, weights
    step_s: float
    bottleneck: str

    @property
    def steps_per_s(self) -> float:
        return 1.0 / self.step_s


@dataclass(frozen=True)
class Scenario:
    about: str
    inputs: Inputs
    marks: dict[str, str] = field(default_factory=dict)  # input -> why it is not measured


def rounds(hosts: int, topology: str) -> int:
    """Network rounds a version takes to reach every host (each round: one copy per sending NIC)."""
    if topology == "star":
        return 1
    return math.ceil(math.log2(hosts + 1))


def link_bytes(inputs: Inputs, topology: str) -> float:
    """Bytes one NIC carries before the last host has the version: the sender's H copies
    (star), or one copy per round (tree)."""
    if topology == "star":
        return inputs.hosts * inputs.model_bytes
    return rounds(inputs.hosts, topology) * inputs.model_bytes


def fixed_s(inputs: Inputs, topology: str) -> float:
    """The part of a transfer that no link rate removes: latency and the two memcpys."""
    memcpy = 2 * inputs.model_bytes / (inputs.memcpy_gbs * GB)
    return rounds(inputs.hosts, topology) * inputs.latency_ms / 1e3 + memcpy


def transfer_s(inputs: Inputs, topology: str) -> float:
    """X: one version from the trainer's channel into every generator host's channel."""
    return fixed_s(inputs, topology) + link_bytes(inputs, topology) / (inputs.link_gbit * GBIT)


def batch_s(inputs: Inputs) -> float:
    """g: one batch, the generator hosts producing it together."""
    return inputs.generate_s / inputs.hosts


def weights_bound_s(train: float, batch: float, transfer: float, max_age: int) -> float:
    """W (see the module docstring)."""
    every_version = (train + transfer + batch) / (max_age + 1)
    if every_version >= transfer:
        return every_version
    return max(train + transfer + batch, 2 * transfer) / (max_age + 1)


def predict(inputs: Inputs, topology: str = "star") -> Prediction:
    transfer = transfer_s(inputs, topology)
    batch = batch_s(inputs)
    bounds = {
        "train": inputs.train_s,
        "generate": batch,
        "weights": weights_bound_s(inputs.train_s, batch, transfer, inputs.max_policy_age),
    }
    bottleneck = max(bounds, key=bounds.get)  # ties: the first listed
    return Prediction(transfer, bounds, bounds[bottleneck], bottleneck)


def longest_transfer_s(train: float, batch: float, max_age: int) -> float:
    """The longest X for which W stays <= max(T, g): W solved for X, branch by branch."""
    floor = max(train, batch)
    every_version = (max_age + 1) * floor - train - batch
    if every_version <= floor:
        return every_version
    return min(every_version, (max_age + 1) * floor / 2)


def link_to_unbind_gbit(inputs: Inputs, topology: str) -> float:
    """The link rate from which the weights bound no longer exceeds max(T, g); inf if none
    is enough (the latency and memcpys alone are too long, or A = 0)."""
    network = longest_transfer_s(inputs.train_s, batch_s(inputs), inputs.max_policy_age) - fixed_s(inputs, topology)
    if network <= 0:
        return math.inf
    return link_bytes(inputs, topology) / network / GBIT


def simulate_step_s(train: float, batch: float, transfer: float, max_age: int, steps: int = 400) -> float:
    """Seconds per step of the same pipeline stepped in whole versions.

    The trainer runs step k (from version k, publishing k + 1) once batch k is ready; the
    relays send the newest published version whenever they are free and something newer
    exists; batch k is generated, `batch` long, once a version >= k - max_age has arrived.
    The formula is exact where no version is skipped and where X is much longer than
    T + g; in between, whole versions can make the pipeline slower than the formula.
    """
    published = [0.0]  # published[v]: when version v was published
    arrivals = [(0.0, 0)]  # (when, version) of each transfer landed, in order
    usable = 0  # arrivals[usable]: the first to land with a version batch k may use
    starts = []
    relay_free = generator_free = trainer_free = 0.0
    for k in range(steps):
        while arrivals[-1][1] < k - max_age:  # the next transfer: batch k needs it
            start = max(relay_free, published[arrivals[-1][1] + 1])
            newest = arrivals[-1][1] + 1
            while newest + 1 < len(published) and published[newest + 1] <= start:
                newest += 1
            relay_free = start + transfer
            arrivals.append((relay_free, newest))
        while arrivals[usable][1] < k - max_age:
            usable += 1
        generator_free = max(generator_free, arrivals[usable][0]) + batch
        starts.append(max(trainer_free, generator_free))
        trainer_free = starts[-1] + train
        published.append(trainer_free)
    half = steps // 2
    return (starts[-1] - starts[half]) / (steps - 1 - half)


def simulated_steps_per_s(inputs: Inputs, topology: str) -> float:
    step = simulate_step_s(inputs.train_s, batch_s(inputs), transfer_s(inputs, topology), inputs.max_policy_age)
    return 1.0 / step


PLACEHOLDER = "placeholder: pass the measured value"
SCENARIOS = {
    "tiny-2host": Scenario(
        "tiny CPU model, 2 simulated hosts: trainer on node 0, generators on node 1",
        Inputs(533_248, 20, 6, 1, 0.035, 0.04, 1, 2),
        {
            "link_gbit": "placeholder: unshaped veth",
            "memcpy_gbs": PLACEHOLDER,
            "train_s": PLACEHOLDER,
            "generate_s": PLACEHOLDER,
            "latency_ms": PLACEHOLDER,
        },
    ),
    "tiny-4host": Scenario(
        "tiny CPU model, 4 simulated hosts: trainer on node 0, generators on nodes 1-3",
        Inputs(533_248, 20, 6, 3, 0.035, 0.04, 1, 2),
        {
            "link_gbit": "placeholder: unshaped veth",
            "memcpy_gbs": PLACEHOLDER,
            "train_s": PLACEHOLDER,
            "generate_s": PLACEHOLDER,
            "latency_ms": PLACEHOLDER,
        },
    ),
    "8b-32node": Scenario(
        "8B-parameter bf16 policy, 32 nodes of 8 GPUs: 8 trainer nodes (the sender on one), 24 generator hosts",
        Inputs(16e9, 400, 20, 24, 20, 400, 1, 5),
        {
            "link_gbit": "assumed: the NIC's rate; gloo pairs over TCP get less",
            "memcpy_gbs": "assumed: a multi-threaded copy",
            "train_s": "assumed: a 512-sample batch on 8 nodes",
            "generate_s": "assumed: 512 long samples on 1 node, sized so G/H ~ T",
            "latency_ms": "assumed",
        },
    ),
}

INPUT_LABELS = {
    "model_bytes": ("model bytes B", "bytes"),
    "link_gbit": ("link rate L", "Gbit/s per NIC"),
    "memcpy_gbs": ("memcpy rate M", "GB/s"),
    "hosts": ("generator hosts H", ""),
    "train_s": ("train step T", "s"),
    "generate_s": ("generate G, one host", "s per batch"),
    "max_policy_age": ("max_policy_age A", ""),
    "latency_ms": ("latency c", "ms"),
}


def num(value: float) -> str:
    return f"{value:.4g}"


def aligned(rows: list[list[str]], indent: str = "  ") -> str:
    """Rows as columns: the first left-aligned, the others right-aligned."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [cell.rjust(width) for cell, width in zip(row[1:], widths[1:])]
        lines.append(indent + "  ".join(cells).rstrip())
    return "\n".join(lines)


def input_rows(scenario: Scenario) -> list[list[str]]:
    """Each input: its label, value, unit and, where it is not measured, why."""
    return [
        [label, num(getattr(scenario.inputs, name)), unit, scenario.marks.get(name, "")]
        for name, (label, unit) in INPUT_LABELS.items()
    ]


def input_lines(scenario: Scenario) -> str:
    rows = input_rows(scenario)
    lines = aligned([row[:2] for row in rows]).splitlines()
    return "\n".join(
        " ".join(filter(None, (line, unit, f"({mark})" if mark else "")))
        for line, (_, _, unit, mark) in zip(lines, rows)
    )


def prediction_rows(inputs: Inputs, topologies: tuple[str, ...]) -> list[list[str]]:
    predictions = [predict(inputs, t) for t in topologies]
    return [
        ["", *topologies],
        ["transfer X (s)", *(num(p.transfer_s) for p in predictions)],
        ["train bound T (s)", *(num(p.bounds["train"]) for p in predictions)],
        ["generate bound G/H (s)", *(num(p.bounds["generate"]) for p in predictions)],
        ["weights bound W (s)", *(num(p.bounds["weights"]) for p in predictions)],
        ["predicted steps/s", *(num(p.steps_per_s) for p in predictions)],
        ["simulated steps/s (whole versions)", *(num(simulated_steps_per_s(inputs, t)) for t in topologies)],
        ["bottleneck", *(p.bottleneck for p in predictions)],
        ["link for W <= max(T, G/H) (Gbit/s)", *(num(link_to_unbind_gbit(inputs, t)) for t in topologies)],
    ]


def report(name: str, scenario: Scenario, topologies: tuple[str, ...]) -> str:
    return f"{name}: {scenario.about}\n{input_lines(scenario)}\n\n{aligned(prediction_rows(scenario.inputs, topologies))}\n"


def overridden(scenario: Scenario, given: dict[str, float]) -> Scenario:
    """The scenario with the inputs given on the command line (no longer marked)."""
    marks = {name: mark for name, mark in scenario.marks.items() if name not in given}
    return replace(scenario, inputs=replace(scenario.inputs, **given), marks=marks)


CHECK_KEYS = ("hosts", "model_bytes", "train_s", "generate_s", "link_gbit", "measured_steps_per_s")


@dataclass(frozen=True)
class Checked:
    """One measured run against its prediction."""

    name: str
    inputs: Inputs
    topology: str
    prediction: Prediction
    simulated_steps_per_s: float
    measured_steps_per_s: float

    @property
    def measured_over_predicted(self) -> float:
        return self.measured_steps_per_s / self.prediction.steps_per_s


def checked_runs(path: Path, defaults: Inputs) -> list[Checked]:
    """Each run of a JSON list against its prediction; a run's missing inputs come from `defaults`."""
    checked = []
    for i, run in enumerate(json.loads(path.read_text())):
        missing = [key for key in CHECK_KEYS if key not in run]
        if missing:
            raise SystemExit(f"{path}: run {i} has no {', '.join(missing)}")
        given = {f.name: run[f.name] for f in fields(Inputs) if f.name in run}
        inputs = replace(defaults, **given)
        topology = run.get("topology", "star")
        checked.append(
            Checked(
                str(run.get("name", i)),
                inputs,
                topology,
                predict(inputs, topology),
                simulated_steps_per_s(inputs, topology),
                run["measured_steps_per_s"],
            )
        )
    return checked


def check_rows(checked: list[Checked]) -> list[list[str]]:
    """A header, then a row per run."""
    return [["run", "hosts", "topology", "predicted", "simulated", "measured", "measured/predicted", "bottleneck"]] + [
        [
            c.name,
            str(c.inputs.hosts),
            c.topology,
            num(c.prediction.steps_per_s),
            num(c.simulated_steps_per_s),
            num(c.measured_steps_per_s),
            num(c.measured_over_predicted),
            c.prediction.bottleneck,
        ]
        for c in checked
    ]


TITLE = "Cost model across hosts"
LINK_GBITS = [m * 10**e for e in range(-1, 5) for m in (1, 2, 5)]  # 0.1 to 50,000 Gbit/s


def check_result(checked: list[Checked]) -> BenchmarkResult:
    result = BenchmarkResult("cost_model", TITLE, this_command())
    for c in checked:
        result.figure(f"measured / predicted steps/s, {c.name}", c.measured_over_predicted, "x")
    header, *rows = check_rows(checked)
    result.tables.append(Table("Predicted vs measured steps/s", header, rows))
    names = [c.name for c in checked]
    lines = [
        Line("predicted", names, [c.prediction.steps_per_s for c in checked]),
        Line("simulated (whole versions)", names, [c.simulated_steps_per_s for c in checked]),
        Line("measured", names, [c.measured_steps_per_s for c in checked]),
    ]
    result.series.append(Series("Predicted vs measured steps/s", "", "steps/s", lines, bars=True))
    return result


def scenarios_result(scenarios: dict[str, Scenario], topologies: tuple[str, ...]) -> BenchmarkResult:
    """Each scenario's prediction (its printed tables), and its steps/s against the link rate."""
    result = BenchmarkResult("cost_model", TITLE, this_command())
    for name, scenario in scenarios.items():
        for topology in topologies:
            result.figure(
                f"predicted steps/s, {name}, {topology}", predict(scenario.inputs, topology).steps_per_s, "steps/s"
            )
        result.tables.append(Table(f"{name}: inputs", ["input", "value", "unit", "not measured"], input_rows(scenario)))
        header, *rows = prediction_rows(scenario.inputs, topologies)
        result.tables.append(Table(f"{name}: {scenario.about}", header, rows))
        lines = [
            Line(
                topology,
                LINK_GBITS,
                [predict(replace(scenario.inputs, link_gbit=link), topology).steps_per_s for link in LINK_GBITS],
            )
            for topology in topologies
        ]
        result.series.append(
            Series(
                f"{name}: predicted steps/s against the link rate",
                "link rate (Gbit/s per NIC)",
                "steps/s",
                lines,
                log_x=True,
            )
        )
    return result


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--scenario",
        action="append",
        choices=sorted(SCENARIOS),
        help="a preset (repeatable; default: all); the flags below override its inputs",
    )
    parser.add_argument("--topology", choices=(*TOPOLOGIES, "both"), default="both")
    parser.add_argument(
        "--check",
        type=Path,
        metavar="FILE.json",
        help='a JSON list of runs: {"hosts", "model_bytes", "train_s", "generate_s", '
        '"link_gbit", "measured_steps_per_s"} (optional: "memcpy_gbs", "max_policy_age", '
        '"latency_ms", "topology", "name"; missing ones: the flags, else tiny-2host\'s)',
    )
    parser.add_argument("--model-bytes", type=float, help="B, bytes of one version")
    parser.add_argument("--link-gbit", type=float, help="L, Gbit/s per NIC")
    parser.add_argument("--memcpy-gbs", type=float, help="M, GB/s")
    parser.add_argument("--hosts", type=int, help="H, generator hosts other than the trainer's")
    parser.add_argument("--train-s", type=float, help="T, seconds per train step")
    parser.add_argument("--generate-s", type=float, help="G, seconds to generate one batch on one host")
    parser.add_argument("--max-policy-age", type=int, help="A")
    parser.add_argument("--latency-ms", type=float, help="c, fixed latency per transfer")
    add_json_argument(parser)
    return parser.parse_args(argv)


def given_inputs(args: argparse.Namespace) -> dict[str, float]:
    return {f.name: getattr(args, f.name) for f in fields(Inputs) if getattr(args, f.name) is not None}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    given = given_inputs(args)
    try:
        if args.check is not None:
            checked = checked_runs(args.check, replace(SCENARIOS["tiny-2host"].inputs, **given))
            print(aligned(check_rows(checked)))
            result = check_result(checked)
        else:
            topologies = TOPOLOGIES if args.topology == "both" else (args.topology,)
            scenarios = {name: overridden(SCENARIOS[name], given) for name in args.scenario or SCENARIOS}
            for name, scenario in scenarios.items():
                print(report(name, scenario, topologies))
            result = scenarios_result(scenarios, topologies)
    except ValueError as err:
        sys.exit(f"error: {err}")
    if args.json:
        result.write(args.json)


if __name__ == "__main__":
    sys.exit(main())
