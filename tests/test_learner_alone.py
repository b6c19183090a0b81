"""The Learner (forge_async/learning/learner.py) trains with nothing but torch and TorchTitan: no Monarch,
vLLM or torchstore. benchmarks/components/gpu_trainer.py depends on it to measure the trainer on a GPU
machine that has torch and not the rest of the stack; this runs that benchmark at toy sizes
on CPU with those packages made unimportable."""

import math
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.harness.results import read_result

pytestmark = pytest.mark.procs

ROOT = Path(__file__).resolve().parents[1]

BLOCKED = ("monarch", "vllm", "torchstore")
RUN_WITHOUT_THEM = f"""
import runpy, sys
for name in {BLOCKED!r}:
    sys.modules[name] = None  # `import name` now raises ImportError
sys.argv = ["benchmarks/components/gpu_trainer.py"] + sys.argv[1:]
runpy.run_module("benchmarks.components.gpu_trainer", run_name="__main__")
"""


def test_the_learner_trains_dense_and_moe_models_without_monarch_vllm_or_torchstore(tmp_path):
    result_path = tmp_path / "result.json"
    args = ["--scale", "tiny", "--steps", "3", "--cases", "dense", "moe", "--json", str(result_path)]
    proc = subprocess.run(
        [sys.executable, "-c", RUN_WITHOUT_THEM, *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (table,) = read_result(result_path).tables
    cases = {row[0]: dict(zip(table.columns, row)) for row in table.rows}
    assert set(cases) == {"dense", "moe"}
    for case in cases.values():
        assert case["trained"] == case["parameters"] > 0
        assert math.isfinite(case["loss"]) and case["grad norm"] > 0
        assert case["published GiB"] > 0  # the weights reached the shared-memory channel
    # Random routes on 8 experts, 2 per token: the router's own choice rarely matches them all.
    assert cases["moe"]["route mismatch"] > 0.5
    assert "dense" in proc.stdout and "tokens/s" in proc.stdout
