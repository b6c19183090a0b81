"""Draw a run's metrics.jsonl into RUN_DIR/plots.png: `python -m forge_async.observability.plot RUN_DIR`.

Works while the run is still writing (a partly written last line is skipped),
and on older runs: a metric missing from the rows is left out of its panel.
The figure is drawn on matplotlib's Agg canvas directly, so importing this
module changes no global matplotlib state (backend, rcParams).
"""

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

PLOT_FILE = "plots.png"


class PlotError(ValueError):
    """A run dir that cannot be plotted (missing, or no metrics yet), naming the path."""


@dataclass(frozen=True)
class Line:
    key: str  # metrics.jsonl key
    label: str
    scale: float = 1.0  # e.g. 100 to show a fraction as a percentage
    width: float = 1.5
    alpha: float = 1.0
    x: str = "step"  # evaluations: the version they measured (version k is the policy after step k)
    marker: str | None = None  # for sparse series (evaluations)


@dataclass(frozen=True)
class Panel:
    title: str
    ylabel: str
    lines: tuple[Line, ...]
    ylim: tuple[float, float] | None = None
    shows_target_reward: bool = False


EVAL_X = "eval/version"


def eval_line(key: str, label: str) -> Line:
    """An evaluation's series: dots over the version each evaluation measured."""
    return Line(key, label, x=EVAL_X, marker="o")


PANELS = (
    Panel(
        "Reward",
        "reward (mean over batch)",
        (
            Line("reward/mean", "per step", width=1.0, alpha=0.4),
            Line("reward/smoothed", "moving average", width=2.5),
        ),
        shows_target_reward=True,
    ),
    Panel(
        "Policy age of trained samples",
        "age (policy versions)",
        (Line("policy/age_mean", "mean"), Line("policy/age_max", "max")),
    ),
    Panel(
        "Importance sampling: truncated weights",
        "tokens truncated (%)",
        (Line("is/truncated_frac", "truncated", scale=100),),
    ),
    Panel(
        "Importance sampling: generator/trainer mismatch",
        "KL (nats/token)",
        (
            Line("is/mismatch_kl", "mismatch KL"),
            Line("is/mismatch_kl_unmasked", "without the kept sets (sampling.keep_mask)"),
        ),
    ),
    Panel(
        "Generation throughput",
        "throughput (tokens/s)",
        (Line("generator/tokens_per_s", "generated tokens/s"),),
    ),
    Panel(
        "Idle time (since start of run)",
        "idle (% of wall time)",
        (
            Line("train/idle_frac", "trainer", scale=100),
            Line("generator/idle_frac", "generators", scale=100),
        ),
        ylim=(0, 100),
    ),
    Panel(
        "Completion length",
        "length (tokens)",
        (Line("completion/length_mean", "mean"), Line("completion/length_max", "max")),
    ),
    Panel(
        "Policy entropy",
        "entropy (nats/token)",
        (Line("train/entropy", "entropy"),),
    ),
    Panel(
        "Evaluation on held-out prompts",
        "reward / pass rate",
        (eval_line("eval/reward_mean", "mean reward"), eval_line("eval/pass@k", "pass@k")),
        shows_target_reward=True,
    ),
    Panel(
        "Evaluation: completion length",
        "length (tokens)",
        (eval_line("eval/len_mean", "mean"),),
    ),
)
# Supervised fine-tuning (apps.sft): its rows have train/loss and no reward.
SFT_PANELS = (
    Panel("Training loss", "NLL (nats per demonstration token)", (Line("train/loss", "loss"),)),
    Panel("Learning rate", "lr", (Line("train/lr", "lr"),)),
    Panel("Training throughput", "throughput (tokens/s)", (Line("train/tokens_per_s", "demonstration tokens/s"),)),
    Panel("Policy entropy", "entropy (nats/token)", (Line("train/entropy", "entropy"),)),
    PANELS[-2],  # evaluation on held-out prompts: as a GRPO run measures it
    PANELS[-1],
)
COLUMNS = 2  # panels per row of the grid


def panels_for(rows: list[dict]) -> tuple[Panel, ...]:
    """SFT's panels for a run whose steps have a loss and no reward, else GRPO's (with a
    Mixture-of-Experts model's two more)."""
    steps = [row for row in rows if EVAL_X not in row]
    sft = steps and all("train/loss" in row and "reward/mean" not in row for row in steps)
    if sft:
        return SFT_PANELS
    return PANELS + moe_panels(steps) if any("moe/expert_load_max" in row for row in steps) else PANELS


def moe_panels(steps: list[dict]) -> tuple[Panel, Panel]:
    """Route mismatch, overall and per MoE layer, and the busiest expert's load."""
    layers = sorted(
        {key for row in steps for key in row if key.startswith("moe/route_mismatch/layer_")},
        key=lambda key: int(key.rsplit("_", 1)[1]),
    )
    per_layer = tuple(
        Line(key, key.rsplit("/", 1)[1].replace("_", " "), scale=100, width=1.0, alpha=0.5) for key in layers
    )
    return (
        Panel(
            "MoE: routes the trainer's routers would choose differently",
            "token routes (%)",
            (Line("moe/route_mismatch", "all layers", scale=100, width=2.5),) + per_layer,
        ),
        Panel("MoE: expert load", "busiest expert / mean", (Line("moe/expert_load_max", "worst layer"),)),
    )


def read_metrics(run_dir: Path) -> list[dict]:
    """The rows of RUN_DIR/metrics.jsonl, without a last line the run has not finished writing."""
    if not run_dir.is_dir():
        raise PlotError(f"run dir not found: {run_dir}")
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        raise PlotError(f"no metrics file: {path}")
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    rows = []
    for number, line in enumerate(lines, start=1):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as err:
            if number == len(lines):
                break
            raise PlotError(f"{path}:{number}: not a JSON row ({err})") from err
    if not rows:
        raise PlotError(f"no rows yet in {path}")
    return rows


def target_reward(run_dir: Path) -> float | None:
    """From summary.json (the value in force at the end, even after a resume; null for a game's
    rewards, which have no pass threshold), else config.yaml (none with env.seats)."""
    for name, parse in (("summary.json", json.loads), ("config.yaml", yaml.safe_load)):
        path = run_dir / name
        if not path.is_file():
            continue
        try:
            saved = parse(path.read_text()) or {}
        except (ValueError, yaml.YAMLError):  # being written right now: draw without the line
            continue
        value = saved.get("target_reward")
        if name == "config.yaml" and (saved.get("env") or {}).get("seats"):
            value = None
        return None if value is None else float(value)
    return None


def series(rows: list[dict], line: Line) -> tuple[list[float], list[float]]:
    """(x, values) of the rows that have `line.key`."""
    points = [(row[line.x], row[line.key] * line.scale) for row in rows if row.get(line.key) is not None]
    return [step for step, _ in points], [value for _, value in points]


def draw_panel(ax: Axes, panel: Panel, rows: list[dict], target: float | None) -> None:
    ax.set_title(panel.title)
    ax.set_ylabel(panel.ylabel)
    ax.grid(True, alpha=0.3)
    drawn = 0
    for line in panel.lines:
        steps, values = series(rows, line)
        if steps:
            marker = "o" if len(steps) == 1 else line.marker  # a one-point line would be invisible
            ax.plot(steps, values, label=line.label, linewidth=line.width, alpha=line.alpha, marker=marker)
            drawn += 1
    if drawn == 0:
        ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center", color="gray")
        return
    if panel.shows_target_reward and target is not None:
        ax.axhline(target, color="black", linestyle="--", linewidth=1, label=f"target {target:g}")
        drawn += 1
    if panel.ylim is not None:
        ax.set_ylim(*panel.ylim)
    if drawn > 1:
        ax.legend(loc="best", fontsize="small")


def draw_plots(run_dir: Path) -> Path:
    """Write RUN_DIR/plots.png from RUN_DIR/metrics.jsonl and return its path."""
    run_dir = Path(run_dir)
    rows = read_metrics(run_dir)
    target = target_reward(run_dir)
    panels = panels_for(rows)
    grid_rows = -(-len(panels) // COLUMNS)
    figure = Figure(figsize=(14, 2.5 * grid_rows), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.subplots(grid_rows, COLUMNS, sharex=True).flatten()
    for ax, panel in zip(axes, panels, strict=True):
        draw_panel(ax, panel, rows, target)
    axes[0].set_xlim(left=0)  # shared by all panels
    for ax in axes[-COLUMNS:]:
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    figure.suptitle(f"{run_dir}: up to step {rows[-1]['step']}", fontsize="x-large")
    figure.tight_layout()
    out = run_dir / PLOT_FILE
    figure.savefig(out)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m forge_async.observability.plot",
        description=f"Draw RUN_DIR/metrics.jsonl into RUN_DIR/{PLOT_FILE} (also while the run is going).",
    )
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    args = parser.parse_args(argv)
    try:
        out = draw_plots(args.run_dir)
    except PlotError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
