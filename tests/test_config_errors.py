"""Out-of-range config values fail at start with one ConfigError naming the key, the value and the range."""

import dataclasses
import re
import subprocess
import sys
import typing

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import apps.grpo.main  # noqa: F401  (registers the config schema)
from forge_async.cli.app import CONFIG_DIR
from forge_async.cli.subprocess_run import REPO, run_app
from forge_async.mesh import roles
from forge_async.controller.resume import resumed_config
from forge_async.generation.config import GeneratorConfig
from forge_async.controller.config import GRPOConfig
from forge_async.config.callables import CallableError
from forge_async.errors import ConfigError
from tests.support.app_config import app_config

pytestmark = pytest.mark.unit


def compose_default():
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose(config_name="grpo")


BAD_VALUES = {
    "generator.calls_at_once=-1": "generator.calls_at_once=-1: must be >= 0",
    "sampling.temperature=-1": "sampling.temperature=-1.0: must be >= 0 (0 = greedy)",
    "sampling.temperature=inf": "sampling.temperature=inf: must be a finite number >= 0",
    "sampling.top_p=1.5": "sampling.top_p=1.5: must be in (0, 1]",
    "sampling.top_p=0": "sampling.top_p=0.0: must be in (0, 1]",
    "sampling.max_tokens=0": "sampling.max_tokens=0: must be >= 1",
    "sampling.top_k=-1": "sampling.top_k=-1: must be >= 0 (0 = every token)",
    "sampling.min_p=1": "sampling.min_p=1.0: must be in [0, 1) (0 = none)",
    "sampling.kept_set_cap=0": "sampling.kept_set_cap=0: must be >= 1",
    "sampling.top_k=2000": "sampling.top_k=2000 keeps more tokens than sampling.kept_set_cap=1024 records",
    "task.name=seeds env.name=nim env.seats=[policy,policy] prompts_per_step=1 prompts_per_rollout=1 max_policy_age=0": (
        "max_policy_age=0: one prompt's group gives 16 samples (group_size=8 x 2 policy seats of env.seats), "
        "more than a batch (8 = prompts_per_step * group_size)"
    ),
    "sampling.keep_mask=true": "sampling.keep_mask=true: sampling keeps every token",
    "trainer.lr=-0.1": "trainer.lr=-0.1: must be > 0",
    "trainer.lr=nan": "trainer.lr=nan: must be a finite number > 0",
    "trainer.lr=inf": "trainer.lr=inf: must be a finite number > 0",
    "trainer.beta1=1": "trainer.beta1=1.0: must be in [0, 1)",
    "trainer.beta2=-0.5": "trainer.beta2=-0.5: must be in [0, 1)",
    "trainer.eps=0": "trainer.eps=0.0: must be > 0",
    "trainer.weight_decay=-1": "trainer.weight_decay=-1.0: must be >= 0",
    "trainer.grad_clip=0": "trainer.grad_clip=0.0: must be > 0",
    "importance.cap=-1": "importance.cap=-1.0: must be > 0 or null (null = no correction)",
    "importance.cap=nan": "importance.cap=nan: must be a finite number > 0 or null (null = no correction)",
    "importance.level=batch": "importance.level='batch': one of token, sequence",
    "importance.mode=drop": "importance.mode='drop': one of truncate, mask",
    "importance.mask_low=1.5": "importance.mask_low=1.5: must be in [0, 1]",
    "importance.mask_high=0.5": "importance.mask_high=0.5: must be >= 1",
    "loss.clip_low=0.2 loss.clip_high=0.2 importance.mode=mask importance.cap=null": "loss.clip_low/clip_high are set and importance corrects too",
    "loss.entropy_coef=-0.01": "loss.entropy_coef=-0.01: must be >= 0 (0 = off)",
    "trainer.threads=0": "trainer.threads=0: must be >= 1",
    "placement.import_nice=20": "placement.import_nice=20: must be in [0, 19]",
    "trainer.procs=0": "trainer.procs=0: must be >= 1",
    "trainer.dtype=fp8": "trainer.dtype='fp8': one of float32, bfloat16",
    "trainer.micro_batch_tokens=0": "trainer.micro_batch_tokens=0: must be >= 1 or null",
    "trainer.activation_checkpointing=some": "trainer.activation_checkpointing='some': one of none, full, selective",
    "trainer.lr_schedule=step": "trainer.lr_schedule='step': one of constant, linear, cosine, sqrt",
    "trainer.warmup_steps=-1": "trainer.warmup_steps=-1: must be >= 0",
    "trainer.min_lr_factor=2": "trainer.min_lr_factor=2.0: must be in [0, 1]",
    "trainer.lr_schedule=cosine trainer.lr_total_steps=10": "trainer.lr_total_steps=10 is less than steps=400",
    "generator.dtype=int8": "generator.dtype='int8': one of float32, bfloat16, float16",
    "sampling.min_tokens=4": "sampling.min_tokens=4: must be in [0, 3]",
    "task.min_digits=4": "task.min_digits=4: must be in [1, 3] or null (at most task.num_digits)",
    "generator.count=0": "generator.count=0: must be >= 1",
    "env.max_turns=0": "env.max_turns=0: must be >= 1",
    "env.max_episode_tokens=0": "env.max_episode_tokens=0: must be >= 1 or null (null = the context)",
    "env.timeout_s=0": "env.timeout_s=0.0: must be > 0",
    "env.procs=-1": "env.procs=-1: must be >= 0 (0 = in the controller)",
    "env.procs=1": "env.procs=1: task.name=max_digit has no environment to host",
    "generator.max_restarts=-1": "generator.max_restarts=-1: must be >= 0",
    "filter.max_oversampling=0": "filter.max_oversampling=0.0: must be > 0 or null (null = no cap)",
    "eval.every_steps=-1": "eval.every_steps=-1: must be >= 0 (0 = off)",
    "eval.prompts=0": "eval.prompts=0: must be >= 1",
    "eval.samples_per_prompt=0": "eval.samples_per_prompt=0: must be >= 1",
    "eval.temperature=-1": "eval.temperature=-1.0: must be >= 0 or null (null = greedy for k=1)",
    "eval.pass_reward=nan": "eval.pass_reward=nan: must be a finite number",
    "eval.dataset=held_out.jsonl": "eval.dataset=held_out.jsonl: held-out files are for task.name=dataset",
    "generator.max_model_len=0": "generator.max_model_len=0: must be >= 1 or null",
    "generator.seed=-1": "generator.seed=-1: must be in [0, 4294967295]",
    "generator.gpu_memory_utilization=1.5": "generator.gpu_memory_utilization=1.5: must be in (0, 1]",
    "generator.kv_cache_gib=0": "generator.kv_cache_gib=0.0: must be > 0 or null (null = vLLM's default)",
    "generator.swap_mode=never": "generator.swap_mode='never': one of inflight, drain, abort_resume",
    "generator.cpu_weights=onednn": "generator.cpu_weights='onednn': one of plain, packed",
    "model.tiny.family=gpt2": "model.tiny.family='gpt2': one of qwen3, llama",
    "model.tiny.dim=0": "model.tiny.dim=0: must be >= 1",
    "model.tiny.n_heads=0": "model.tiny.n_heads=0: must be >= 1",
    "model.tiny.head_dim=7": "model.tiny.head_dim=7: must be even",
    "model.tiny.max_seq_len=-64": "model.tiny.max_seq_len=-64: must be >= 1",
    "model.lora.rank=0": "model.lora.rank=0: must be in [1, 512] or null (null = LoRA off",
    "model.lora.rank=-4": "model.lora.rank=-4: must be in [1, 512] or null (null = LoRA off",
    "model.lora.rank=1024": "model.lora.rank=1024: must be in [1, 512] or null",
    "model.lora.rank=8 model.lora.alpha=0": "model.lora.alpha=0.0: must be > 0",
    "model.lora.rank=8 model.lora.alpha=-16": "model.lora.alpha=-16.0: must be > 0",
    "model.lora.rank=8 model.lora.targets=[q_proj,lm_head]": "model.lora.targets='lm_head': one of q_proj, k_proj",
    "model.lora.rank=8 model.lora.targets=[]": "model.lora.targets is empty",
    "model.lora.rank=8 model.lora.targets=[q_proj,k_proj]": "model.lora.targets=['q_proj', 'k_proj']: k_proj and v_proj are adapted together",
    "checkpoint.every_steps=-1": "checkpoint.every_steps=-1: must be >= 0 (0 = off)",
    "checkpoint.keep=0": "checkpoint.keep=0: must be >= 1",
    "group_size=1": "group_size=1: must be >= 2 (group-relative advantages need at least two completions",
    "steps=0": "steps=0: must be >= 1",
    "max_policy_age=-1": "max_policy_age=-1: must be >= 0",
    "target_reward=nan": "target_reward=nan: must be a finite number",
    "prompts_per_rollout=32": "prompts_per_rollout=32 must be <= prompts_per_step=16",
    "generator.enforce_eager=true generator.compile=true": "generator.compile=true with generator.enforce_eager=true: eager mode turns vLLM's torch.compile off",
    "placement.trainer_gpus=[0] placement.generator_gpus=[0]": "placement.trainer_gpus=[0] and placement.generator_gpus=[0] share GPU(s) [0] on node(s) [0]",
    "placement.trainer_gpus=[0]": "placement.generator_gpus is null while the other is set",
    "placement.trainer_gpus=[0] placement.generator_gpus=[1] trainer.procs=2": "placement.trainer_gpus=[0] names 1 GPU(s) for trainer.procs=2: one GPU per trainer proc",
    "placement.trainer_gpus=[0] placement.generator_gpus=[1] generator.count=2": "placement.generator_gpus=[1] names 1 GPU(s) for 2 generators on a node",
    "placement.generator_gpus=[1,1]": "placement.generator_gpus=[1, 1]: a GPU appears twice",
    "placement.trainer_gpus=[-1]": "placement.trainer_gpus=[-1]: GPU indices are >= 0",
    "placement.trainer_gpus=[]": "placement.trainer_gpus=[] is empty",
    "scorers=[{kind:critic}]": "scorers[0].kind='critic': one of reward, reference_kl, teacher",
    "scorers=[{kind:reward},{kind:teacher}]": "scorers[1].path: a teacher scorer needs the teacher's checkpoint",
    "scorers=[{kind:reward,path:/ckpt}]": "scorers[0].path: a reward scorer takes no checkpoint",
    "scorers=[{kind:reward},{kind:reward}]": "scorers: two scorers are named 'task'; give one a name",
    "scorers=[{kind:reference_kl}]": "scorers: no reward scorer",
    "scorers=[]": "scorers: the list is empty",
    "scorers=[{kind:reward},{kind:reference_kl,coef:0}]": "scorers[1].coef=0.0: must be > 0",
    "scorers=[{kind:reward},{kind:reference_kl},{kind:reference_kl,name:ref2}]": "scorers: more than one reference_kl",
    "scorers=[{kind:reward},{kind:reference_kl,fn:x}]": "scorers[1].fn: a reference_kl scorer takes no fn",
    "scorers=[{kind:reward},{kind:reference_kl,runs_on:gpu}]": "scorers[1].runs_on='gpu': one of proc, trainer",
    "scorers=[{kind:reward},{kind:teacher,path:/t,runs_on:trainer}]": "scorers[1].runs_on=trainer: only a reference_kl",
    "scoring.on_error=ignore": "scoring.on_error='ignore': one of fail, drop",
}


@pytest.mark.parametrize("override", BAD_VALUES)
def test_an_out_of_range_value_is_named_with_what_the_key_accepts(override):
    with pytest.raises(ConfigError, match=f"^{re.escape(BAD_VALUES[override])}"):
        app_config(*override.split())


@pytest.mark.parametrize(
    "overrides",
    [
        (),
        ("sampling.temperature=0", "sampling.top_p=1", "importance.cap=null", "generator.kv_cache_gib=null"),
        ("group_size=2", "checkpoint.every_steps=0", "trainer.beta1=0", "generator.max_model_len=64"),
        (
            "generator.compile=true",
            "placement.trainer_gpus=[0]",
            "placement.generator_gpus=[0]",
            "placement.share_gpus=true",
        ),
        ("generator.enforce_eager=false", "generator.compile=false", "generator.gpu_memory_utilization=1"),
        ("generator.swap_mode=abort_resume", "placement.import_nice=0"),
        ("model.lora.rank=1", "model.lora.alpha=1e-3", "model.lora.targets=[o_proj]"),
        ("model.lora.rank=512",),
    ],
)
def test_values_at_the_edges_of_their_ranges_are_accepted(overrides):
    app_config(*overrides)


@pytest.mark.e2e
def test_the_app_exits_2_naming_the_key_before_any_proc_starts(tmp_path):
    run = run_app(tmp_path / "run", "sampling.top_p=1.5", timeout=60)
    assert run.returncode == 2, run.output
    assert "error: sampling.top_p=1.5: must be in (0, 1]" in run.output
    assert "Traceback" not in run.output
    assert "spawning" not in run.output and not (run.run_dir / "initial_model").exists()
    assert "Monarch" not in run.output  # Monarch never started: nothing of it on the console


def test_an_environment_that_cannot_be_imported_fails_before_any_proc_starts():
    with pytest.raises(CallableError, match=r"^env.name 'no_such_module:Env' cannot be imported"):
        app_config("env.name=no_such_module:Env").check_paths()
    config = app_config(config_name="tool_lookup")
    assert config.multi_turn and config.loss.max_tokens == config.sampling.max_tokens * config.env.max_turns


def test_a_dataset_reward_module_that_is_not_installed_fails_before_any_proc_starts(tmp_path):
    data = tmp_path / "p.jsonl"
    data.write_text('{"prompt": "12", "answer": "2"}')
    with pytest.raises(CallableError, match=r"^task.reward_fn 'not_installed_pkg:reward' cannot be imported"):
        app_config("task.name=dataset", f"task.dataset={data}", "task.reward_fn=not_installed_pkg:reward").check_paths()


@pytest.mark.e2e
def test_bad_scorer_inputs_fail_before_any_proc_starts(tmp_path):
    with pytest.raises(CallableError, match=r"^scorers\[1\].fn 'no_such_module:score' cannot be imported"):
        app_config('scorers=[{kind:reward},{kind:reward,fn:"no_such_module:score"}]').check_paths()
    with pytest.raises(ConfigError, match=r"^scorers\[1\].path: checkpoint directory not found"):
        app_config(f"scorers=[{{kind:reward}},{{kind:teacher,path:{tmp_path / 'none'}}}]").check_paths()
    run = run_app(tmp_path / "run", "teacher.coef=0", app="apps.distill", timeout=60)
    assert run.returncode == 2 and "error: teacher.coef=0.0: must be > 0" in run.output, run.output


def test_the_gpu_preset_composes_and_validates_through_the_app(tiny_checkpoint, tmp_path):
    """`--config-name grpo_gpu` with a checkpoint and a dataset: it loads and passes every start-up check
    (it is not run: no GPU here)."""
    dataset = tmp_path / "prompts.jsonl"
    dataset.write_text('{"prompt": "1 2 3", "answer": "3"}\n')
    config = app_config(
        f"model.path={tiny_checkpoint.path}", "task.name=dataset", f"task.dataset={dataset}", config_name="grpo_gpu"
    )
    config.check_paths()
    config.placement.check(nnodes=1)
    assert config.model.path == str(tiny_checkpoint.path) and config.task.dataset == str(dataset)
    assert config.sampling.max_tokens == 512 and config.generator.kv_cache_gib is None
    assert (config.placement.visible_gpus(roles.TRAINER), config.placement.visible_gpus(roles.generator(0))) == (
        "0",
        "1",
    )
    assert config.generator.enforce_eager is None and config.generator.compile is None  # GPU defaults
    assert config.trainer.lr == 1e-6 and config.mode == "async"  # the rest inherited from grpo.yaml


def test_the_generator_dtype_follows_the_trainer_unless_set():
    assert app_config().generator.dtype == "float32"
    assert app_config("trainer.dtype=bfloat16").generator.dtype == "bfloat16"
    assert app_config("trainer.dtype=bfloat16", "generator.dtype=float32").generator.dtype == "float32"
    assert app_config("steps=40").trainer.lr_total_steps == 40


def test_generate_calls_at_once_follow_whether_episodes_have_turns_unless_set():
    assert app_config().generator.calls_at_once == 1  # single-turn: a rollout's call after another
    assert app_config(config_name="tool_lookup").generator.calls_at_once == 0  # multi-turn: no limit
    assert (
        app_config(
            "env.name=agent:docs.examples.tool_lookup_agent:play", "task.name=tool_lookup"
        ).generator.calls_at_once
        == 0
    )
    assert app_config("generator.calls_at_once=4", config_name="tool_lookup").generator.calls_at_once == 4


def test_a_kv_cache_smaller_than_one_full_context_sequence_is_named_before_vllm_starts(tiny_checkpoint):
    shape = tiny_checkpoint.shape  # the tiny model: 1 KiB of keys and values a token in float32
    per_token = shape.kv_cache_bytes_per_token(4)
    assert per_token == 2 * shape.n_layers * shape.n_kv_heads * shape.head_dim * 4
    fits = GeneratorConfig(kv_cache_gib=per_token * shape.max_seq_len / 2**30)
    assert fits.kv_cache_bytes(shape, shape.max_seq_len, "float32") == per_token * shape.max_seq_len
    assert fits.kv_cache_bytes(shape, 2 * shape.max_seq_len, "bfloat16") is not None  # half the bytes
    with pytest.raises(ConfigError, match=r"generator.kv_cache_gib=.* holds 64 tokens .*generator.max_model_len=65"):
        fits.kv_cache_bytes(shape, shape.max_seq_len + 1, "float32")
    assert GeneratorConfig(kv_cache_gib=None).kv_cache_bytes(shape, 10**6, "float32") is None  # vLLM sizes it


def test_a_run_saved_with_trainer_is_cap_resumes_with_it_as_importance_cap(tmp_path):
    """Configs saved before importance.* existed keep their off-policy setting on resume."""
    saved = OmegaConf.to_container(compose_default())
    saved["trainer"]["is_cap"] = None
    del saved["importance"]
    OmegaConf.save(OmegaConf.create(saved), tmp_path / "config.yaml")
    resumed = resumed_config(tmp_path, [f"resume={tmp_path}"], compose_default())
    config = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(GRPOConfig), resumed))  # as load_config
    assert config.importance.cap is None and config.importance.mode == "truncate"


@pytest.mark.parametrize(
    "overrides, named",
    [
        (("env.name=textarena:GuessTheNumber-v0",), "env.name=textarena:GuessTheNumber-v0: the game speaks text"),
        (("task.name=reasoning_gym",), "task.name=reasoning_gym: its questions are text"),
        (("task.name=dataset", "task.dataset=DATA"), "task.dataset=DATA: its first prompt 'What is 4 + 3?' is text"),
    ],
)
def test_text_on_the_digit_tokenizer_fails_before_any_proc_starts_naming_the_fix(tmp_path, overrides, named):
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"prompt": "What is 4 + 3?", "answer": "7"}\n')
    overrides = [o.replace("DATA", str(data)) for o in overrides]
    with pytest.raises(ConfigError) as refused:
        app_config(*overrides).check_paths()
    assert str(refused.value) == (
        f"{named.replace('DATA', str(data))}, which the tiny model's digit tokenizer (model.tiny.tokenizer=digits) "
        "cannot read: set model.tiny.tokenizer=bytes"
    )
    app_config(*overrides, "model.tiny.tokenizer=bytes").check_paths()  # the fix it names passes


def test_digits_on_the_digit_tokenizer_pass_the_text_check(tmp_path):
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"prompt": "372", "answer": "7"}\n')
    app_config("task.name=dataset", f"task.dataset={data}").check_paths()
    app_config(config_name="tool_lookup").check_paths()
    app_config("env.name=agent:docs.examples.tool_lookup_agent:play", "task.name=tool_lookup").check_paths()


@pytest.mark.e2e
def test_sft_on_reasoning_gym_with_the_digit_tokenizer_exits_2_before_any_proc_starts(tmp_path):
    run = run_app(tmp_path / "run", "task.name=reasoning_gym", app="apps.sft", timeout=60)
    assert run.returncode == 2, run.output
    assert (
        "error: task.name=reasoning_gym: its questions are text" in run.output
        and "model.tiny.tokenizer=bytes" in run.output
    )
    assert "Traceback" not in run.output and "spawning" not in run.output, run.output


def free_form_mappings(section: type, prefix: str = "") -> list[str]:
    """Every key of `section` typed as a mapping the user fills (dict[...]), list items by index 0."""
    keys = []
    for name, hint in typing.get_type_hints(section).items():
        kinds = [hint, *typing.get_args(hint)]
        if typing.get_origin(hint) is dict:
            keys.append(prefix + name)
        elif typing.get_origin(hint) is list and dataclasses.is_dataclass(item := typing.get_args(hint)[0]):
            keys += free_form_mappings(item, f"{prefix}{name}.0.")
        elif section_type := next((k for k in kinds if dataclasses.is_dataclass(k)), None):
            keys += free_form_mappings(section_type, f"{prefix}{name}.")
    return keys


FREE_FORM_MAPPINGS = free_form_mappings(GRPOConfig)


def test_every_free_form_mapping_takes_a_mapping_override_as_it_is():
    assert {"env.textarena.game_kwargs", "task.reasoning_gym.datasets.0.config"} <= set(FREE_FORM_MAPPINGS)
    for key in FREE_FORM_MAPPINGS:  # without Hydra's `+`: struct mode refused them
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
            cfg = compose(config_name="grpo", overrides=[f"{key}={{size: 3, name: x}}"])
        assert OmegaConf.to_container(OmegaConf.select(cfg, key)) == {"size": 3, "name": "x"}, key
        assert OmegaConf.is_struct(cfg)  # unknown keys elsewhere are still refused


def cli_config(*overrides: str, app: str = "apps.grpo") -> subprocess.CompletedProcess:
    """`python -m APP OVERRIDES --cfg job`: the config as Hydra composes it on the command line, not run."""
    command = [sys.executable, "-m", app, *overrides, "--cfg", "job"]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)


@pytest.mark.procs
def test_mappings_are_set_with_key_equals_mapping_on_the_command_line():
    shown = cli_config("env.textarena.game_kwargs={size: 3}", "task.reasoning_gym.datasets.0.config={min_terms: 2}")
    assert shown.returncode == 0, shown.stderr
    config = OmegaConf.create(shown.stdout)
    assert config.env.textarena.game_kwargs == {"size": 3}
    assert config.task.reasoning_gym.datasets[0].config == {"min_terms": 2}
    # As every mapping in Hydra: merged into the one the config has.
    preset = OmegaConf.create(cli_config("--config-name=textarena", "env.textarena.game_kwargs={max_turns: 6}").stdout)
    assert preset.env.textarena.game_kwargs == {"min_number": 1, "max_number": 9, "max_turns": 6}
    refused = cli_config("env.textarena.nope=1")  # a section's keys are still checked
    assert refused.returncode != 0 and "Key 'nope' not in 'TextArenaConfig'" in refused.stderr


WRONG_SHAPES = {
    "task.reasoning_gym.datasets={chain_sum: 1}": "a mapping where a list is expected: "
    "task.reasoning_gym.datasets='[{name: ..., weight: ..., config: ...}, ...]'",
    "env.textarena.game_kwargs=[size, 3]": "a list where a mapping is expected: env.textarena.game_kwargs='{key: value, ...}'",
    "env.textarena.game_kwargs=3": "a plain value where a mapping is expected",
    "placement.trainer_gpus={0: 1}": "a mapping where a list is expected: placement.trainer_gpus='[..., ...]'",
    "env.textarena=on": "a plain value where a mapping is expected: env.textarena='{game_kwargs: ..., bracket_actions: ...",
}


@pytest.mark.procs
@pytest.mark.parametrize("override", WRONG_SHAPES)
def test_an_override_of_the_wrong_shape_is_one_line_naming_the_shape_expected(override):
    shown = cli_config(override)
    assert shown.returncode == 2, shown.stderr
    assert shown.stderr.startswith(f"error: {override}: {WRONG_SHAPES[override]}"), shown.stderr
    assert shown.stderr.count("\n") == 1 and shown.stdout == ""  # one line, and Hydra never composed


@pytest.mark.procs
def test_the_shape_check_follows_each_app_s_schema():
    shown = cli_config("task.reasoning_gym.datasets={chain_sum: 1}", app="apps.sft")
    assert shown.returncode == 2 and "a mapping where a list is expected" in shown.stderr, shown.stderr
    assert cli_config("task.reasoning_gym.datasets.0.config={min_terms: 2}", app="apps.sft").returncode == 0
