"""One source per config key: the dataclass field holds its default, help and resumability; the
YAML presets hold only what they change; docs/configuration.md's tables are written from the fields."""

import dataclasses
from contextlib import contextmanager
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

import apps.grpo.main  # noqa: F401  (registers grpo_schema)
import apps.sft.main  # noqa: F401  (registers sft_schema)
from apps.distill.config import DistillConfig
from apps.sft.config import SFTConfig
from forge_async.controller.resume import resumed_config
from forge_async.cli.app import CONFIG_DIR, load_config
from forge_async.cli import config_reference as reference
from forge_async.config.choices import choices
from forge_async.config.keys import keys, resumable_keys
from forge_async.config.schema import open_mappings
from forge_async.controller.config import GRPOConfig
from forge_async.errors import ConfigError

pytestmark = pytest.mark.unit

PRESETS = sorted(p.stem for p in Path(CONFIG_DIR).glob("*.yaml"))


def schema_of(preset: str) -> type:
    return SFTConfig if preset.startswith("sft") else DistillConfig if preset == "distill" else GRPOConfig


@contextmanager
def registered(schema: type):
    """`schema` as the schema the presets' defaults lists name (apps.distill registers its own)."""
    store = ConfigStore.instance()
    store.store(name="sft_schema" if schema is SFTConfig else "grpo_schema", node=open_mappings(schema))
    try:
        yield
    finally:
        store.store(name="grpo_schema", node=open_mappings(GRPOConfig))


def composed(preset: str, *overrides: str) -> DictConfig:
    with registered(schema_of(preset)), initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose(config_name=preset, overrides=list(overrides))


def as_yaml(config) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(config))


@pytest.mark.parametrize("preset, schema", [("grpo", GRPOConfig), ("sft", SFTConfig)])
def test_an_apps_own_config_composes_to_its_dataclass_defaults(preset, schema):
    assert as_yaml(OmegaConf.to_object(composed(preset))) == as_yaml(schema())


def test_grpo_yaml_holds_no_key_of_its_own():
    raw = OmegaConf.load(Path(CONFIG_DIR) / "grpo.yaml")
    assert set(raw) == {"defaults", "hydra"}


def preset_keys(raw: DictConfig, parent: DictConfig, prefix: str = "") -> list[str]:
    """The keys a preset sets: a section's keys one by one, a list or free-form mapping whole."""
    found = []
    for name, value in raw.items():
        key = f"{prefix}{name}"
        if not prefix and name in ("defaults", "hydra"):
            continue
        inherited = OmegaConf.select(parent, key)
        if isinstance(value, DictConfig) and dataclasses.is_dataclass(OmegaConf.get_type(inherited)):
            found += preset_keys(value, parent, f"{key}.")
        else:
            found.append(key)
    return found


def parent_of(preset: str) -> DictConfig:
    """What the preset inherits: the preset its defaults list names, else the bare schema."""
    defaults = OmegaConf.load(Path(CONFIG_DIR) / f"{preset}.yaml").defaults
    parent = next((d for d in defaults if d != "_self_" and not d.endswith("_schema")), None)
    return composed(parent) if parent else open_mappings(schema_of(preset))


@pytest.mark.parametrize("preset", PRESETS)
def test_a_preset_holds_only_what_it_changes(preset):
    raw, parent, own = OmegaConf.load(Path(CONFIG_DIR) / f"{preset}.yaml"), parent_of(preset), composed(preset)
    unchanged = [
        key
        for key in preset_keys(raw, parent)
        if OmegaConf.to_container(OmegaConf.create({"v": OmegaConf.select(own, key)}))
        == OmegaConf.to_container(OmegaConf.create({"v": OmegaConf.select(parent, key)}))
    ]
    assert not unchanged, f"configs/{preset}.yaml restates what it inherits: {unchanged}"


def test_the_docs_tables_are_what_the_fields_write():
    doc = reference.DOC.read_text()
    assert reference.render(doc) == doc, "docs/configuration.md is stale: python -m forge_async.cli.config_reference"


def test_every_key_has_help():
    for schema in (GRPOConfig, SFTConfig, DistillConfig):
        assert not [k.name for k in keys(schema) if not k.help]


def resume(tmp_path: Path, *overrides: str) -> GRPOConfig:
    """A run saved with the defaults, resumed with `overrides` as apps.grpo resumes it."""
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(composed("grpo")))
    resumed = resumed_config(tmp_path, [f"resume={tmp_path}", *overrides], composed("grpo", *overrides))
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(GRPOConfig), resumed))  # as load_config


def test_every_key_marked_resumable_may_be_overridden_on_resume_and_no_other(tmp_path):
    resumable = set(resumable_keys(GRPOConfig))
    assert {"steps", "placement.import_nice", "checkpoint.keep", "verbose"} <= resumable
    current = composed("grpo")
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(current))
    for key in keys(GRPOConfig):
        if "[i]" in key.name or key.name == "resume":
            continue
        override = f"{key.name}={OmegaConf.select(current, key.name)}"
        if key.name in resumable:
            resumed_config(tmp_path, [override], current)
        else:
            with pytest.raises(ConfigError, match=f"^{key.name}: cannot be changed when resuming"):
                resumed_config(tmp_path, [override], current)


def test_placement_import_nice_is_taken_on_resume(tmp_path):
    assert resume(tmp_path, "placement.import_nice=0").placement.import_nice == 0
    assert resume(tmp_path, "steps=7").steps == 7


@pytest.mark.parametrize("key", [k for k in keys(GRPOConfig) if "[i]" not in k.name and choices(k.hint)])
def test_a_choice_outside_its_literal_is_one_line_naming_the_key_and_the_choices(key):
    allowed = ", ".join(choices(key.hint))
    with pytest.raises(ConfigError, match=rf"^{key.name}='nope': one of {allowed}"):
        load_config(composed("grpo", f"{key.name}=nope"))
