"""An app that never ends, for tests/test_subprocess_run.py: `python -m tests.sleeping_app
hydra.run.dir=DIR` starts a child that sleeps (as the app's procs would run on), writes the
child's pid to DIR/child.pid, says so, and sleeps."""

import subprocess
import sys
import time
from pathlib import Path

run_dir = Path(next(a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("hydra.run.dir=")))
run_dir.mkdir(parents=True, exist_ok=True)
child = subprocess.Popen(["sleep", "600"])
(run_dir / "child.pid").write_text(str(child.pid))
print("started", flush=True)
time.sleep(600)
