"""Same-host weight transfer through shared memory, at memory speed.

A channel is a directory (in /dev/shm) holding two slot files that versions take
in turn (version v goes to slot v % 2), a `LATEST` file naming the newest
complete version and its slot, and, once a process listens for versions, a
`DOORBELL` pipe (a FIFO) that every publish rings (`doorbell`). A slot file is

    [u64 header length][u64 version][JSON header: name -> dtype, shape, offset][tensor bytes, 64-aligned]

Slots are reused, not recreated: their pages stay allocated, and every process
keeps its mapping of them, so after the first version a transfer costs two
memory copies (trainer -> slot, slot -> the generator's parameters) and no page
faults. Each FSDP rank writes the rows of its own shard at their global offset;
no rank gathers the whole model.

Safety: a writer holds an exclusive `flock` on the slot while it writes; a reader
holds a shared one while it copies out, and takes the version from the slot's
own header under that lock. A writer can therefore never overwrite a slot a
reader is copying from (it waits for the copy), and a reader never sees a half
written version. At most two versions exist at any time.
"""

import fcntl
import functools
import json
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from forge_async.weights import scratch

_ALIGN = 64
_SLOTS = 2
_LATEST = "LATEST"
_DOORBELL = "DOORBELL"
_PREFIX = struct.Struct("<QQ")  # header length, version


@dataclass(frozen=True)
class TensorSlot:
    dtype: str
    shape: tuple[int, ...]
    offset: int  # bytes from the start of the file

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    @property
    def nbytes(self) -> int:
        return torch.Size(self.shape).numel() * self.torch_dtype.itemsize


def _align(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def plan_layout(
    shapes: dict[str, tuple[tuple[int, ...], torch.dtype]],
) -> tuple[bytes, dict[str, TensorSlot], int]:
    """Header bytes, slot per tensor, and total file size for tensors of these global shapes.
    (Every version of a run has the same layout: it is planned once.)"""
    return _plan_layout(tuple((n, tuple(shape), dtype) for n, (shape, dtype) in shapes.items()))


@functools.lru_cache(maxsize=4)
def _plan_layout(shapes: tuple[tuple[str, tuple[int, ...], torch.dtype], ...]):
    entries = {n: (str(dtype).removeprefix("torch."), list(shape)) for n, shape, dtype in shapes}
    # The header's own length fixes the data offsets, so size it with generous offsets first.
    probe = json.dumps({n: [d, s, 10**15] for n, (d, s) in entries.items()}).encode()
    offset = _align(_PREFIX.size + len(probe))
    slots, header = {}, {}
    for name, (dtype, shape) in entries.items():
        slot = TensorSlot(dtype, tuple(shape), offset)
        slots[name], header[name] = slot, [dtype, shape, offset]
        offset = _align(offset + slot.nbytes)
    return json.dumps(header).encode(), slots, offset


class SharedMemoryChannel:
    """The slot files and LATEST pointer of one run; one instance per process, kept alive."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self._latest_path = str(self.directory / _LATEST)
        self._doorbell_path = str(self.directory / _DOORBELL)  # rung at every publish
        self._maps: dict[int, tuple[int, torch.Tensor]] = {}  # slot -> (inode, mapping)
        self._views: dict[
            int, tuple[torch.Tensor, bytes, dict[str, torch.Tensor]]
        ] = {}  # slot -> (mapping, header, views)
        self._write_lock: int | None = None

    def slot_path(self, slot: int) -> Path:
        return self.directory / f"slot{slot}.bin"

    def _mapping(self, slot: int) -> torch.Tensor:
        """This process's mapping of a slot file, remade only if the file was replaced."""
        stat = self.slot_path(slot).stat()
        cached = self._maps.get(slot)
        if cached is None or cached[0] != stat.st_ino or cached[1].numel() != stat.st_size:
            mapping = torch.from_file(str(self.slot_path(slot)), shared=True, size=stat.st_size, dtype=torch.uint8)
            self._maps[slot] = cached = (stat.st_ino, mapping)
        return cached[1]

    def slot_mapping(self, version: int) -> tuple[int, torch.Tensor]:
        """The slot that holds `version`, and this process's mapping of its file."""
        slot = version % _SLOTS
        return slot, self._mapping(slot)

    @staticmethod
    def view(buffer: torch.Tensor, slot: TensorSlot) -> torch.Tensor:
        return buffer[slot.offset : slot.offset + slot.nbytes].view(slot.torch_dtype).view(slot.shape)

    def tensor_views(self, version: int, header: bytes) -> dict[str, torch.Tensor]:
        """A view of each tensor `header` lays out in `version`'s slot. Kept while the slot's mapping
        and header stay the same (every version after the first): building views costs more
        than copying small tensors (LoRA adapters)."""
        slot, buffer = self.slot_mapping(version)
        cached = self._views.get(slot)
        if cached is None or cached[0] is not buffer or cached[1] != header:
            layout = json.loads(header)
            views = {
                name: self.view(buffer, TensorSlot(dtype, tuple(shape), offset))
                for name, (dtype, shape, offset) in layout.items()
            }
            self._views[slot] = cached = (buffer, header, views)
        return cached[2]

    # -- writing (rank 0 begins and publishes; every rank may write into the buffer) --
    def begin_write(self, version: int, header: bytes, size: int) -> None:
        """Lock the version's slot exclusively (waiting for readers), size it, write the header."""
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.slot_path(version % _SLOTS)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        if os.fstat(fd).st_size != size:
            os.ftruncate(fd, size)
        os.pwrite(fd, _PREFIX.pack(len(header), version) + header, 0)
        self._write_lock = fd

    def publish(self, version: int) -> None:
        """Point LATEST at `version` (atomic rename) and release the slot to readers."""
        tmp = self.directory / f".{_LATEST}.{os.getpid()}"
        tmp.write_text(str(version))
        os.replace(tmp, self.directory / _LATEST)
        if self._write_lock is not None:
            os.close(self._write_lock)  # closing drops the flock
            self._write_lock = None
        self._ring()

    def _ring(self) -> None:
        """Wake whoever listens on the doorbell; nothing (a failed open) if no one does."""
        try:
            fd = os.open(self._doorbell_path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # no doorbell, or no one has it open (ENXIO)
            return
        try:
            os.write(fd, b"\0")
        except BlockingIOError:  # the pipe is full: its listener has plenty to wake it
            pass
        finally:
            os.close(fd)

    def doorbell(self) -> int:
        """A file descriptor to block on (`os.read`) until a version is published: each publish
        from now on writes a byte to it. Cheaper than polling LATEST for a process that does
        nothing else: a thread woken every millisecond keeps taking CPU for nothing."""
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            os.mkfifo(self._doorbell_path, 0o600)
        except FileExistsError:
            pass
        # Read and write: a FIFO with a writer open never reads as ended (Linux), so reads block.
        return os.open(self._doorbell_path, os.O_RDWR)

    def write_slot(self, version: int, header: bytes, data: torch.Tensor) -> None:
        """Write and publish a whole slot file's bytes (`data`, as `reading_slot` gave them) as `version`."""
        self.begin_write(version, header, data.numel())
        self.slot_mapping(version)[1].copy_(data)
        self.publish(version)

    def write(self, version: int, state_dict: dict[str, torch.Tensor]) -> None:
        """Write and publish whole tensors as `version` (one writer holding every tensor)."""
        header, _, size = plan_layout({n: (tuple(t.shape), t.dtype) for n, t in state_dict.items()})
        self.begin_write(version, header, size)
        views = self.tensor_views(version, header)
        for name, tensor in state_dict.items():
            views[name].copy_(tensor)
        self.publish(version)

    # -- reading -------------------------------------------------------------
    def latest(self) -> int | None:
        """The newest complete version (read between every engine step: kept to a few syscalls)."""
        try:
            fd = os.open(self._latest_path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            return int(os.read(fd, 32))
        except ValueError:
            return None
        finally:
            os.close(fd)

    @contextmanager
    def reading(self, version: int) -> Iterator[tuple[int, dict[str, torch.Tensor]]]:
        """Shared-locked, zero-copy views of the slot holding `version`: (version found, tensors).

        The version found is the one in the slot's header, read under the lock: `version`
        itself, or a newer one written to the same slot meanwhile. Copy out inside the block.
        """
        with self.reading_slot(version) as (found, header, _):
            yield found, self.tensor_views(version, header)

    @contextmanager
    def reading_slot(self, version: int) -> Iterator[tuple[int, bytes, torch.Tensor]]:
        """Shared-locked: (version found, its header, the whole slot file as bytes), as `reading`."""
        fd = os.open(self.slot_path(version % _SLOTS), os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            length, found = _PREFIX.unpack(os.pread(fd, _PREFIX.size, 0))
            yield found, os.pread(fd, length, _PREFIX.size), self.slot_mapping(version)[1]
        finally:
            os.close(fd)

    def version_bytes(self, version: int) -> int:
        """The size of the slot file that holds (or held) `version`: one version's bytes."""
        return self.slot_path(version % _SLOTS).stat().st_size

    def versions(self) -> list[int]:
        """Versions currently held in the slots (at most two)."""
        found = []
        for slot in range(_SLOTS):
            try:
                with open(self.slot_path(slot), "rb") as f:
                    found.append(_PREFIX.unpack(f.read(_PREFIX.size))[1])
            except (FileNotFoundError, struct.error):
                pass
        return sorted(found)

    def remove(self) -> None:
        """Remove the channel's directory and all in it (the run's scratch: weights/scratch.py)."""
        self._maps.clear()
        self._views.clear()
        scratch.remove(self.directory)
