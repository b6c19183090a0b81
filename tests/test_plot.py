"""plots.png from metrics.jsonl: draw_plots and `python -m forge_async.observability.plot RUN_DIR`."""

import json
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import pytest

from forge_async.observability.plot import PANELS, PlotError, draw_plots, panels_for, series, target_reward

pytestmark = pytest.mark.unit

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def row(step: int) -> dict:
    """One metrics.jsonl row with every key the plots read."""
    return {
        "step": step,
        "reward/mean": 0.1 + 0.02 * step,
        "reward/smoothed": 0.1 + 0.018 * step,
        "policy/age_mean": 1.2,
        "policy/age_max": 3,
        "is/truncated_frac": 0.01,
        "is/mismatch_kl": 1e-4,
        "generator/tokens_per_s": 5000.0 + step,
        "train/idle_frac": 0.3,
        "generator/idle_frac": 0.05,
        "completion/length_mean": 120.0,
        "completion/length_max": 256,
        "train/entropy": 0.8,
    }


def write_run(run_dir: Path, rows: list[dict], tail: str = "") -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + tail)
    return run_dir


def run_cli(run_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "forge_async.observability.plot", str(run_dir)],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        timeout=60,
    )


def test_draws_a_png_while_the_last_line_is_still_being_written(tmp_path):
    run_dir = write_run(tmp_path / "run", [row(s) for s in range(1, 31)], tail='{"step": 31, "rew')
    (run_dir / "config.yaml").write_text("target_reward: 0.8\n")
    out = draw_plots(run_dir)
    assert out == run_dir / "plots.png"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    height, width, _ = matplotlib.image.imread(out).shape
    assert width > 800 and height > 600


def test_rows_missing_metrics_still_plot(tmp_path):
    old_style = [{"step": s, "reward/mean": 0.5} for s in range(1, 4)]
    partial = [{k: v for k, v in row(s).items() if not k.startswith("is/")} for s in range(4, 8)]
    assert draw_plots(write_run(tmp_path / "run", old_style + partial)).is_file()


def test_evaluation_rows_are_drawn_at_the_version_they_measured(tmp_path):
    """An evaluation row is logged at the step trained when it ended; it is drawn at its version,
    and the per-step panels pass it by."""
    evaluation = {"step": 4, "eval/version": 2, "eval/reward_mean": 0.4, "eval/pass@k": 0.25, "eval/len_mean": 2.5}
    rows = [row(1), row(2), row(3), row(4), evaluation, row(5)]
    panel = next(p for p in PANELS if p.title == "Evaluation on held-out prompts")
    assert [series(rows, line) for line in panel.lines] == [([2], [0.4]), ([2], [0.25])]
    assert series(rows, PANELS[0].lines[0])[0] == [1, 2, 3, 4, 5]
    assert draw_plots(write_run(tmp_path / "run", rows)).is_file()


def test_an_moe_run_gets_route_mismatch_per_layer_and_expert_load(tmp_path):
    moe = {
        "moe/route_mismatch": 0.05,
        "moe/route_mismatch/layer_0": 0.02,
        "moe/route_mismatch/layer_10": 0.08,
        "moe/route_mismatch/layer_2": 0.04,
        "moe/expert_load_max": 2.5,
    }
    rows = [row(s) | moe for s in range(1, 6)]
    assert panels_for([row(1)]) == PANELS
    mismatch, load = panels_for(rows)[len(PANELS) :]
    assert [line.label for line in mismatch.lines] == ["all layers", "layer 0", "layer 2", "layer 10"]
    assert series(rows, mismatch.lines[3]) == ([1, 2, 3, 4, 5], [8.0] * 5)
    assert series(rows, load.lines[0])[1] == [2.5] * 5
    assert draw_plots(write_run(tmp_path / "run", rows)).is_file()


def test_a_corrupt_line_before_the_last_is_an_error(tmp_path):
    run_dir = write_run(tmp_path / "run", [row(1)], tail="not json\n" + json.dumps(row(3)) + "\n")
    with pytest.raises(PlotError, match="metrics.jsonl:2"):
        draw_plots(run_dir)


@pytest.mark.procs
def test_cli_writes_plots_and_prints_the_path(tmp_path):
    run_dir = write_run(tmp_path / "run", [row(s) for s in range(1, 6)])
    result = run_cli(run_dir)
    assert result.returncode == 0, result.stderr
    assert f"wrote {run_dir / 'plots.png'}" in result.stdout
    assert (run_dir / "plots.png").is_file()


@pytest.mark.procs
@pytest.mark.parametrize("case", ["no rows", "no metrics file", "no run dir"])
def test_cli_errors_name_the_path(tmp_path, case):
    run_dir = tmp_path / "run"
    if case == "no rows":
        write_run(run_dir, [], tail="\n")
        named = run_dir / "metrics.jsonl"
    elif case == "no metrics file":
        run_dir.mkdir()
        named = run_dir / "metrics.jsonl"
    else:
        named = run_dir
    result = run_cli(run_dir)
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and str(named) in result.stderr


def test_the_target_line_is_the_run_s_and_a_game_has_none(tmp_path):
    """A game's rewards have no pass threshold: summary.json says null, and config.yaml's default
    is not drawn for a run with env.seats (the report prints no target either)."""
    run_dir = write_run(tmp_path / "run", [row(1)])
    (run_dir / "config.yaml").write_text("target_reward: 0.8\n")
    assert target_reward(run_dir) == 0.8
    (run_dir / "config.yaml").write_text("target_reward: 0.8\nenv:\n  seats: [policy, snapshot]\n")
    assert target_reward(run_dir) is None
    (run_dir / "summary.json").write_text('{"target_reward": 0.9}')
    assert target_reward(run_dir) == 0.9
    (run_dir / "summary.json").write_text('{"target_reward": null}')
    assert target_reward(run_dir) is None
