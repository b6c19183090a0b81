"""The public composition API: a run's actor meshes, spawned and driven from your own script.

One of the three ways to use forge_async (beside the apps and the multi-host launcher), and
everything docs/compose.md shows comes from here:

- `Composition`: the async context in which a script spawns its trainer, generators, replay
  buffer and model scorers (`spawn_*`). It resolves the configs they share (one weight channel),
  refuses bad settings in one line before any proc starts, and when the block ends, however it
  ends (Ctrl-C included), stops every proc and removes the channel directory.
- The configs those take: `LearnerSpec` (with `TrainerConfig`, `LossConfig`, `LoraConfig`),
  `GeneratorConfig`, `SamplingConfig`, `WeightsConfig`.
- The replay buffer's typed arguments: `DropCounts` (the samples lost on their way, by reason),
  and what it answers: `BufferStats`, `Episode`, `Completion`.
- What a script builds its episodes with: a checkpoint (`Checkpoint.open`; a tiny one made here
  by `create_tiny_checkpoint` with `TinyModelConfig`), a tokenizer (`build_digit_tokenizer`), a
  built-in task (`TaskConfig`, `build_task`) and the scoring tier (`build_tier`, `ScoringConfig`,
  `default_scorers`).
- `UserError`: what the spawns raise for bad input (`ConfigError`, `CheckpointError` derive
  from it).

The GRPO app spawns the same actors through the handles in forge_async/handles/ (supervised calls,
respawns) and drives them with the asynchronous loop in forge_async/controller/.
"""

from forge_async.compose.composition import Composition
from forge_async.data.buffer import BufferStats, DropCounts
from forge_async.data.episode import Completion, Episode
from forge_async.envs.registry import build_task
from forge_async.errors import ConfigError, UserError
from forge_async.generation.config import GeneratorConfig, SamplingConfig
from forge_async.learning.config import TrainerConfig
from forge_async.learning.spec import LearnerSpec
from forge_async.losses.config import LossConfig
from forge_async.models.config import LoraConfig, TinyModelConfig
from forge_async.models.hf_checkpoint import Checkpoint, CheckpointError
from forge_async.models.tiny import create_tiny_checkpoint
from forge_async.models.tokenizer import build_digit_tokenizer
from forge_async.scoring.config import ScoringConfig, default_scorers
from forge_async.scoring.tier import build_tier
from forge_async.tasks.config import TaskConfig
from forge_async.weights.config import WeightsConfig

__all__ = [
    "BufferStats",
    "Checkpoint",
    "CheckpointError",
    "Completion",
    "Composition",
    "ConfigError",
    "DropCounts",
    "Episode",
    "GeneratorConfig",
    "LearnerSpec",
    "LoraConfig",
    "LossConfig",
    "SamplingConfig",
    "ScoringConfig",
    "TaskConfig",
    "TinyModelConfig",
    "TrainerConfig",
    "UserError",
    "WeightsConfig",
    "build_digit_tokenizer",
    "build_task",
    "build_tier",
    "create_tiny_checkpoint",
    "default_scorers",
]
