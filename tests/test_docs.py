"""The docs as tests: every fenced block of README.md and docs/*.md is run or checked here, or carries a
marker (tests/support/doc_blocks.py): `<!-- not run: what CI lacks -->`, or `<!-- console: LABEL -->`
for a run's console, which the test that runs that app compares with its output.

What each block gets (`check`):
- shell: each command.
  - `make TARGET`: a target of the Makefile; `make grpo ARGS="..."`: ARGS as apps.grpo's overrides.
  - an app (`apps.grpo`, `apps.sft`, `apps.distill`; alone, or after `forge_async.cluster ... --`):
    not run (a run takes minutes; the e2e lane runs the apps): its config is composed and checked
    in this process as the app composes it, its launcher's flags parsed; `resume=RUN_DIR` against
    the config such a run saved.
  - any other module or script (a benchmark, a tool): it exists, and defines every flag given.
  - `python -c` and a here-document: run in this process.
  - `export VAR=...`: the environment of the commands after it.
  - anything else (git, pip, srun, torchrun): the block needs a `not run` marker.
  Every command names the venv's interpreter, `.venv/bin/python`, never a bare `python`.
- yaml: merged into apps.grpo's composed config, then checked as a run's config is.
- json: parsed (a fragment: as an object's members).
- python: an excerpt (with `...` for what is left out): compiled, its imports run, each `def` and
  `class` line found in docs/examples/; otherwise run in this process.
- text: a marker.
Blocks rendered from a result file (benchmarks/harness/docs.py) are checked as any other;
tests/test_benchmark_docs.py checks that they state their files.
"""

import ast
import functools
import json
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from apps.distill.config import DistillConfig
from apps.sft.config import SFTConfig
from forge_async.cli.app import CONFIG_DIR
from forge_async.cli.subprocess_run import REPO
from forge_async.config.schema import check_override_shapes, open_mappings
from forge_async.controller.config import GRPOConfig
from forge_async.controller.resume import resumed_config
from tests.support.doc_blocks import PAGES, Block, assert_console_as_documented, console_blocks, every_block

pytestmark = pytest.mark.unit


@dataclass(frozen=True)
class App:
    config_name: str  # its configs/ file
    schema_name: str  # the name its main module stores its schema under
    schema: type


APPS = {
    "apps.grpo": App("grpo", "grpo_schema", GRPOConfig),
    "apps.sft": App("sft", "sft_schema", SFTConfig),
    "apps.distill": App("distill", "grpo_schema", DistillConfig),
}
PYTHON = ".venv/bin/python"  # the docs' commands name the venv's interpreter (README.md)
# What a documented command names in words, and the value a check puts in its place.
PLACEHOLDERS = {"R": "1", "NODE0": "10.0.0.1"}


def compose_app(app: str, args: list[str], tmp_path: Path):
    """`app`'s config from its command line (`--config-name`, overrides), composed and checked as
    `python -m APP` does before it starts its procs; `resume=RUN_DIR`: against a config saved by a
    run of the same command."""
    spec = APPS[app]
    config_name, overrides = spec.config_name, []
    words = iter(args)
    for word in words:
        if word == "--config-name":
            config_name = next(words)
        elif word.startswith("--config-name="):
            config_name = word.split("=", 1)[1]
        else:
            assert not word.startswith("-"), f"{app}: {word} is no flag the check knows"
            overrides.append(word)
    check_override_shapes(spec.schema, overrides)
    resume = [o for o in overrides if o.startswith("resume=")]
    composed = composed_under(spec, config_name, [o for o in overrides if o not in resume])
    if resume:
        run_dir = tmp_path / "resumed_run"
        run_dir.mkdir(exist_ok=True)
        (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(composed))
        composed = OmegaConf.merge(OmegaConf.structured(spec.schema), resumed_config(run_dir, overrides, composed))
    return OmegaConf.to_object(composed)


def composed_under(spec: App, config_name: str, overrides: list[str]):
    """configs/CONFIG_NAME.yaml composed against the app's schema, stored as its main module stores
    it; apps.distill stores its schema under apps.grpo's name, so apps.grpo's is stored back after
    it, as the rest of the suite expects."""
    _store_schema(spec.schema_name, spec.schema)
    try:
        return compose(config_name=config_name, overrides=overrides)  # under hydra_configs (below)
    finally:
        if spec.schema is DistillConfig:
            _store_schema("grpo_schema", GRPOConfig)


def _store_schema(name: str, schema: type) -> None:
    ConfigStore.instance().store(name=name, node=_schema_node(schema))


@functools.cache
def _schema_node(schema: type):
    return open_mappings(schema)


def module_file(module: str) -> Path:
    """The source `python -m MODULE` runs."""
    base = REPO / module.replace(".", "/")
    for path in (base.with_suffix(".py"), base / "__main__.py"):
        if path.is_file():
            return path
    raise AssertionError(f"python -m {module}: no such module in the repository")


def flags_of(source: Path) -> set[str]:
    """Every `--flag` a script's source names (argparse's add_argument), or its package's helpers'."""
    files = [source, *source.parent.glob("*.py")]
    if "benchmarks" in source.parts:
        files += (REPO / "benchmarks" / "harness").glob("*.py")
    return set().union(*(_flags_in(path) for path in files))


@functools.cache
def _flags_in(path: Path) -> frozenset[str]:
    return frozenset(
        node.value
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("--")
    )


def check_script(source: Path, args: list[str]) -> None:
    """A script or module that is not an app: each flag given is one it defines."""
    args = args[: args.index("--")] if "--" in args else args
    given = {arg.split("=", 1)[0] for arg in args if arg.startswith("--")}
    assert given <= flags_of(source), f"{source.relative_to(REPO)} defines no {sorted(given - flags_of(source))}"


def check_command(words: list[str], heredoc: str | None, tmp_path: Path) -> str:
    """One command of a shell block checked; what was done, or raise."""
    words = [PLACEHOLDERS.get(word, word) for word in words]
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):  # VAR=value before the command
        words = words[1:]
    program, args = words[0], words[1:]
    if program == "export":  # the environment of the commands after it
        assert all(re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", arg) for arg in args), words
        return "environment"
    if program == "make":
        targets = re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(), re.MULTILINE)
        named = [arg for arg in args if "=" not in arg]
        assert set(named) <= set(targets), f"make: no target {set(named) - set(targets)}"
        make_args = dict(arg.split("=", 1) for arg in args if "=" in arg)
        if "grpo" in named:
            compose_app("apps.grpo", shlex.split(make_args.get("ARGS", "")), tmp_path)
            return "make target; ARGS composed as apps.grpo's"
        return "make target"
    if program in ("python", "python3"):
        raise AssertionError(f"{program}: the docs name the venv's interpreter, .venv/bin/python (README.md)")
    if program != PYTHON:
        raise AssertionError(f"{program}: no runner for it; mark the block <!-- not run: ... -->")
    if args[:1] == ["-c"]:
        exec(compile(args[1], "<python -c>", "exec"), {})
        return "run"
    if args[:1] == ["-"]:
        assert heredoc is not None, "python - reads a here-document"
        exec(compile(heredoc, "<here-document>", "exec"), {"__name__": "__main__"})
        return "run"
    if args[:1] != ["-m"]:
        check_script(REPO / args[0], args[1:])
        return "script: flags"
    module, args = args[1], args[2:]
    if module in APPS:
        compose_app(module, args, tmp_path)
        return "config composed"
    check_script(module_file(module), args)
    if module == "forge_async.cluster":
        from forge_async.cluster.__main__ import parse_args

        _, app = parse_args(args)
        compose_app(app[0], app[1:], tmp_path)
        return "launcher flags parsed; app config composed"
    return "module: flags"


def shell_commands(text: str) -> list[tuple[list[str], str | None]]:
    """A shell block's commands as words (comments dropped, continued lines joined, `&&` and `;`
    splitting), each with the here-document it reads, if any."""
    lines, commands = text.splitlines(), []
    i, pending = 0, ""
    while i < len(lines):
        line = _without_comment(lines[i])
        i += 1
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        heredoc = None
        opened = re.search(r"<<-?\s*'?(\w+)'?\s*$", line)
        if opened:
            end = lines.index(opened[1], i)
            heredoc, i, line = "\n".join(lines[i:end]), end + 1, line[: opened.start()]
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split, lexer.commenters = True, ""
        command: list[str] = []
        for word in [*lexer, ";"]:
            if word in (";", "&&", "||", "|", "&"):
                if command:
                    commands.append((command, heredoc))
                command = []
            else:
                command.append(word)
    return commands


def _without_comment(line: str) -> str:
    """`line` up to a `#` that starts a shell comment (outside quotes, after a space or at the start)."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def check_shell(block: Block, tmp_path: Path) -> str:
    done = [check_command(words, heredoc, tmp_path) for words, heredoc in shell_commands(block.text)]
    assert done, "a shell block without a command"
    return ", ".join(sorted(set(done)))


def check_yaml(block: Block, tmp_path: Path) -> str:
    """A config excerpt: merged into apps.grpo's composed config and checked."""
    spec = APPS["apps.grpo"]
    composed = composed_under(spec, spec.config_name, [])
    OmegaConf.to_object(OmegaConf.merge(composed, OmegaConf.create(yaml.safe_load(block.text))))
    return "merged into apps.grpo's config"


def check_json(block: Block, tmp_path: Path) -> str:
    try:
        json.loads(block.text)
    except json.JSONDecodeError:
        json.loads("{" + block.text + "}")  # an object's members
    return "parsed"


def check_python(block: Block, tmp_path: Path) -> str:
    """A whole snippet runs; an excerpt (`...` for what is left out, or `await` at its top: a piece
    of an async program) has its imports run and its signatures found in docs/examples/."""
    tree = ast.parse(block.text)
    code = compile(block.text, block.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    excerpt = any(
        (isinstance(node, ast.Constant) and node.value is Ellipsis) or isinstance(node, ast.Await)
        for node in ast.walk(tree)
    )
    if not excerpt:
        exec(code, {"__name__": "docs"})
        return "run"
    imports: list[ast.stmt] = [node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)]
    exec(compile(ast.Module(imports, []), block.where, "exec"), {})
    examples = "\n".join(path.read_text() for path in (REPO / "docs" / "examples").glob("*.py"))
    for line in block.text.splitlines():
        signature = _without_comment(line).strip()
        if re.match(r"(async def|def|class) ", signature) and line == line.lstrip():
            assert signature in examples, f"{signature!r} is in no file of docs/examples/"
    return "excerpt: imports run, signatures found"


@pytest.fixture(scope="module", autouse=True)
def hydra_configs():
    """Hydra pointed at configs/ once for the module's compositions, as each app's main points it."""
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        yield


CHECKS: dict[str, Callable[[Block, Path], str]] = {
    "bash": check_shell,
    "sh": check_shell,
    "yaml": check_yaml,
    "json": check_json,
    "python": check_python,
}
BLOCKS = every_block()


@pytest.mark.parametrize("block", BLOCKS, ids=[block.where for block in BLOCKS])
def test_every_block_of_the_docs_is_run_checked_or_marked(block: Block, tmp_path):
    if block.marker is not None:
        kind, what = block.marker
        if kind == "console":
            call = re.compile(rf'assert_console_as_documented\([\w.]+, "{re.escape(what)}"\)')
            tests = [path.read_text() for path in (REPO / "tests").glob("test_*.py")]
            assert any(call.search(text) for text in tests), f"{block.where}: no test calls {call.pattern}"
        return
    check = CHECKS.get(block.lang)
    assert check is not None, f"{block.where}: a {block.lang or 'text'} block needs a runner or a marker"
    check(block, tmp_path)


BARE_PYTHON = re.compile(r"(?<![\w./-])python3? -m (?!venv)")  # `python3 -m venv` makes the venv


def test_every_command_in_the_docs_names_the_venvs_interpreter():
    """A plain `python` has none of the venv's packages unless it is activated: the docs say
    `.venv/bin/python`, prose and blocks alike (README.md says so once)."""
    bare = []
    for page in PAGES:
        for number, line in enumerate(page.read_text().splitlines(), 1):
            if "by python -m benchmarks.harness.docs -->" in line:  # a generated block's marker
                continue
            if page.name == "configuration.md" and line.startswith("|"):  # key tables, from the fields' help
                continue
            if BARE_PYTHON.search(line):
                bare.append(f"{page.relative_to(REPO)}:{number}: {line.strip()[:100]}")
    assert bare == [], "\n".join(bare)


def test_a_documented_console_fails_on_a_line_the_run_does_not_print_and_on_another_order():
    """docs/quickstart.md's console against outputs that differ from it: a start-up line that names a
    mesh the run no longer spawns, and the evaluation of version 0 printed after step 1."""
    (block,) = [block for block in console_blocks("grpo") if block.page.name == "quickstart.md"]
    assert_console_as_documented(block.text, "grpo")  # the documented lines, as printed
    without_buffer = block.text.replace(", replay buffer ...", " ...")
    with pytest.raises(AssertionError, match="spawning trainer x1, generators x1, replay buffer"):
        assert_console_as_documented(without_buffer, "grpo")
    lines = block.text.splitlines()
    first_eval = next(i for i, line in enumerate(lines) if line.startswith("eval v0"))
    lines.insert(first_eval + 1, lines.pop(first_eval))  # after step 1
    with pytest.raises(AssertionError, match="step    2/400"):
        assert_console_as_documented("\n".join(lines), "grpo")


def test_the_walk_sees_every_page_and_every_kind_of_block():
    pages = {block.page.name for block in BLOCKS}
    assert {"README.md", "quickstart.md", "benchmarks.md", "sft.md"} <= pages
    assert any(block.generated for block in BLOCKS) and any(block.marker for block in BLOCKS)
    assert {"bash", "python", "yaml", "json", ""} <= {block.lang for block in BLOCKS}
