"""Same-host weight transfer through shared-memory files, at memory speed.

One file per policy version under a channel directory in /dev/shm:

    [8-byte header length][JSON header: name -> dtype, shape, offset][tensor bytes, 64-aligned]

Writers put bytes straight into the mapped file: each FSDP rank writes the rows
of its own shard at their global offset, so no rank gathers the full model.
Readers map the file and hand vLLM zero-copy views. A `LATEST` file, replaced
atomically, names the newest complete version; generators poll it between
engine steps. Older version files are unlinked as soon as a newer one is
published: a reader that already mapped a file keeps its pages (POSIX unlink
semantics), so nothing in use is ever pulled away.
"""

import json
import os
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

_ALIGN = 64
_LATEST = "LATEST"


def default_root() -> Path:
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


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


def plan_layout(shapes: dict[str, tuple[tuple[int, ...], torch.dtype]]) -> tuple[bytes, dict[str, TensorSlot], int]:
    """Header bytes, slot per tensor, and total file size for tensors of these global shapes."""
    entries = {name: (str(dtype).removeprefix("torch."), list(shape)) for name, (shape, dtype) in shapes.items()}
    # The header's own length fixes the data offsets, so size it with generous offsets first.
    probe = json.dumps({n: [d, s, 10**15] for n, (d, s) in entries.items()}).encode()
    offset = _align(8 + len(probe))
    slots, header = {}, {}
    for name, (dtype, shape) in entries.items():
        slot = TensorSlot(dtype, tuple(shape), offset)
        slots[name], header[name] = slot, [dtype, shape, offset]
        offset = _align(offset + slot.nbytes)
    return json.dumps(header).encode(), slots, offset


class SharedMemoryChannel:
    """A directory of versioned weight files plus the LATEST pointer."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)

    def path(self, version: int) -> Path:
        return self.directory / f"v{version}.bin"

    # -- writing -------------------------------------------------------------
    def create(self, version: int, header: bytes, size: int) -> torch.Tensor:
        """Create (size) the file for `version` and map it; the header is written here."""
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.path(version)
        with open(path, "wb") as f:
            f.truncate(size)
            f.write(struct.pack("<Q", len(header)) + header)
        return self.map(version, size)

    def map(self, version: int, size: int | None = None) -> torch.Tensor:
        path = self.path(version)
        size = size if size is not None else path.stat().st_size
        return torch.from_file(str(path), shared=True, size=size, dtype=torch.uint8)

    @staticmethod
    def view(buffer: torch.Tensor, slot: TensorSlot) -> torch.Tensor:
        raw = buffer[slot.offset : slot.offset + slot.nbytes]
        return raw.view(slot.torch_dtype).view(slot.shape)

    def publish(self, version: int) -> None:
        """Point LATEST at `version` (atomic rename), then unlink older version files."""
        tmp = self.directory / f".{_LATEST}.{os.getpid()}"
        tmp.write_text(str(version))
        os.replace(tmp, self.directory / _LATEST)
        for old in self.versions():
            if old < version:
                self.path(old).unlink(missing_ok=True)

    # -- reading -------------------------------------------------------------
    def latest(self) -> int | None:
        try:
            return int((self.directory / _LATEST).read_text())
        except (FileNotFoundError, ValueError):
            return None

    def versions(self) -> list[int]:
        if not self.directory.is_dir():
            return []
        return sorted(int(p.stem[1:]) for p in self.directory.glob("v*.bin"))

    def read(self, version: int) -> dict[str, torch.Tensor]:
        """Zero-copy views of every tensor of `version` (FileNotFoundError if already replaced)."""
        with open(self.path(version), "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length))
        buffer = self.map(version)
        return {
            name: self.view(buffer, TensorSlot(dtype, tuple(shape), offset))
            for name, (dtype, shape, offset) in header.items()
        }

    def remove(self) -> None:
        for p in self.directory.glob("*"):
            p.unlink(missing_ok=True)
        if self.directory.is_dir():
            self.directory.rmdir()
