"""The commands the program prints for the user to type next (`resume with: ...`, `continue with
GRPO: ...`): they name the interpreter that runs this program, not `python`.

A run started by `make grpo` runs the project's virtual environment (`.venv/bin/python`); a plain
`python` in a shell that never activated it has none of the packages (`No module named 'hydra'`).
"""

import shlex
import sys
from pathlib import Path


def python(executable: str | None = None, cwd: Path | None = None) -> str:
    """The interpreter (`sys.executable`) as typed at `cwd` (the working directory): relative to it
    when inside it (`.venv/bin/python`), else its absolute path; quoted for a shell. The path is
    kept as it was started, never resolved: a venv's `python` is a link to the system's, which
    lacks the venv's packages."""
    path = Path(executable if executable is not None else sys.executable)
    if not str(path):  # an embedded interpreter may not know its executable
        return "python"
    try:
        shown = str(path.relative_to(Path.cwd() if cwd is None else cwd))
        if "/" not in shown:  # a bare name would be looked up on PATH
            shown = f"./{shown}"
    except ValueError:
        shown = str(path)
    return shlex.quote(shown)


def module_command(module: str, *args: str) -> str:
    """`python -m module args...` with this program's interpreter; `args` are quoted for a shell."""
    return " ".join([python(), "-m", module, *(shlex.quote(arg) for arg in args)])
