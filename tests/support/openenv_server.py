"""An OpenEnv server app served for a test, as a run serves env.openenv.app."""

from pathlib import Path

from forge_async.envs.openenv.server_process import ServerProcess


def serve(app: str, log_dir: Path) -> ServerProcess:
    """`app` (module:app) up on 127.0.0.1 with one uvicorn worker; its log in `log_dir`."""
    process = ServerProcess(app, workers=1, sessions=8, log_path=log_dir / "server.log")
    process.start()
    process.wait_until_up(120)
    return process
