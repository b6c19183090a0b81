"""The trainer mesh: trainer.procs ranks per trainer host, one FSDP2 model among them.

Every call runs on every rank (a collective) and answers with rank 0's result. A
rank whose proc dies ends the run: TrainerFailed names the rank, its host and pid
(the run can be resumed from its last checkpoint).
"""

import asyncio
import re
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from monarch.actor import ProcMesh

from forge_async.data.episode import Episode
from forge_async.errors import TrainerFailed
from forge_async.learning.results import PolicySaved, Published, SaveFailed, StateSaved, StepResult
from forge_async.handles.handle import RoleHandle
from forge_async.handles.procs_file import ProcsFile, Where, located
from forge_async.mesh.supervision import failure_cause
from forge_async.handles.spawner import RoleSpawner
from forge_async.mesh.reply_port import ReplyPort
from forge_async.observability.outputs import report_side_output_failure
from forge_async.observability.spans import Span

_POINT = re.compile(r"\{('\w+': \d+/\d+(?:, '\w+': \d+/\d+)*)\}")  # {'hosts': 1/2, 'procs': 0/1}
_COORD = re.compile(r"'(\w+)': (\d+)/(\d+)")
# A proc Monarch stopped hearing from is named by its row-major rank: trainer-1<uid>.
_TRAINER_PROC = re.compile(r"\btrainer-(\d+)<")


class TrainerHandle(RoleHandle):
    def __init__(self, spawner: RoleSpawner, procs_file: ProcsFile):
        super().__init__(spawner, procs_file, spawner.trainer_role)  # TRAINER, or a rival's
        self._replies = ReplyPort()  # the step, every step: answered on one port

    async def _spawn(self) -> tuple[ProcMesh, Any]:
        return await self.spawner.trainer()

    async def _where(self) -> list[Where]:
        return list((await self.actor.where.call()).values())

    @property
    def where(self) -> list[Where]:
        """Where each rank runs, by rank."""
        return self.procs_file.each(self.role)

    async def train_and_push(self, batch: list[Episode], targets: tuple[str, ...]) -> StepResult:
        """One optimizer step on `batch`, then the new weights published to `targets`."""
        return await self._rank0(
            lambda: self._replies.call(
                self.actor.train_and_push, batch, targets, alive=self.actor.where, ranks=len(self.where)
            )
        )

    async def push_weights(self, targets: tuple[str, ...]) -> Published:
        return await self._rank0(lambda: self.actor.push_weights.call(targets))

    async def state_bytes(self) -> int:
        """Bytes of the model and optimizer state over all ranks: about what a checkpoint's shards weigh."""
        per_rank = await self._call(lambda: self.actor.state_bytes.call())
        return sum(per_rank.values())

    async def save_state(self, directory: str) -> StateSaved | SaveFailed:
        """Each rank's model and optimizer shard into `directory` (DCP): rank 0's result, which
        is SaveFailed if the write failed on any rank."""
        return await self._rank0(lambda: self.actor.save_state.call(directory))

    async def load_state(self, directory: str) -> int:
        """What save_state wrote; returns the version restored."""
        return await self._rank0(lambda: self.actor.load_state.call(directory))

    async def save_hf(self, model_dir: str, adapter_dir: str) -> PolicySaved | SaveFailed:
        """The policy as a Hugging Face checkpoint (with LoRA: merged, and the adapter beside),
        or SaveFailed if rank 0's write failed."""
        return await self._rank0(lambda: self.actor.save_hf.call(model_dir, adapter_dir))

    async def trace_spans(self) -> dict[str, list[Span]]:
        """Each rank's spans since the last call, by track."""
        spans = await self.actor.trace_spans.call()
        return {f"{self.role} rank {rank}": s for rank, s in enumerate(spans.values())}

    async def _rank0(self, call: Callable[[], Awaitable[Any]]) -> Any:
        """`call()` on every rank (answered by rank: Monarch's ValueMesh, or ReplyPort.call's
        dict; untyped, as Monarch's endpoints are): rank 0's result."""
        return (await self._call(call)).get(0)

    async def _failed(self, err: Exception, called: Any) -> None:
        raise TrainerFailed(self._name_failure(err)) from None

    def _name_failure(self, err: Exception) -> str:
        rank = failed_rank(str(err))
        if rank is None or rank >= len(self.where):
            return f"a {self.role} proc failed: {err}"
        return f"{self.role} rank {rank} ({located(self.where[rank])}) failed: {failure_cause(err)}"


def failed_rank(message: str) -> int | None:
    """The row-major rank of the failed trainer proc, from Monarch's error text.

    A proc that exited is reported by its mesh point ({'hosts': 1/2, 'procs': 0/1});
    one whose agent stopped answering (seen on loaded machines) by its proc name.
    """
    point = _POINT.search(message)
    if point is not None:
        rank = 0
        for _, index, size in _COORD.findall(point.group(1)):
            rank = rank * int(size) + int(index)
        return rank
    proc = _TRAINER_PROC.search(message)
    return None if proc is None else int(proc.group(1))


async def save_policy(trainer: TrainerHandle, final: Path, adapter: Path, what: str) -> str | None:
    """`trainer`'s policy as a Hugging Face checkpoint at `final` (and its adapter at `adapter` with
    LoRA), said on the console as `what`; None if it could not be written (nothing half-written left)."""
    print(f"saving the {what} ...", flush=True)
    started = asyncio.get_running_loop().time()
    saved = await trainer.save_hf(str(final), str(adapter))
    if isinstance(saved, SaveFailed):
        shutil.rmtree(final, ignore_errors=True)
        report_side_output_failure(final, saved.why)
        return None
    print(f"{what} saved in {asyncio.get_running_loop().time() - started:.1f}s: {saved.path}", flush=True)
    return saved.path
