"""Config loading: the default recipe, dotted overrides, YAML recipes and the error messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from reinforge.config import Config, ConfigError, apply_override, dump_config, load_config


def test_default_recipe_loads() -> None:
    cfg = load_config()
    assert isinstance(cfg, Config)
    # Values from recipes/default.yaml, not the schema defaults.
    assert cfg.task.source == "arithmetic"
    assert cfg.task.params == {}  # the arithmetic defaults, left implicit in the recipe
    assert cfg.sft.lr == 0.001 and cfg.algo.lr == 0.0002
    assert cfg.rollout.max_new_tokens == 8
    assert [c.name for c in cfg.reward.components] == ["correct", "format"]
    assert cfg.reward.components[1].params == {"pattern": r"\d+"}


def test_no_recipe_gives_schema_defaults() -> None:
    cfg = load_config(None)
    assert cfg == Config()
    assert cfg.algo.lr == 1e-4 and cfg.rollout.group_size == 8


def test_dotted_overrides_are_parsed_by_type() -> None:
    cfg = load_config("default", ["algo.lr=1e-5", "rollout.group_size=4", "task.params.digits=2", "telemetry.progress=false"])
    assert cfg.algo.lr == 1e-5 and isinstance(cfg.algo.lr, float)
    assert cfg.rollout.group_size == 4 and isinstance(cfg.rollout.group_size, int)
    assert cfg.task.params == {"digits": 2}
    assert cfg.telemetry.progress is False


def test_exponent_floats_reach_free_form_params_as_floats(tmp_path: Path) -> None:
    # Regression: YAML 1.1 (PyYAML) reads 1e-5 as the string '1e-5'; typed fields hid it through
    # pydantic coercion, but free-form params dicts received a string.
    cfg = load_config("default", ["task.params.teacher_accuracy=5e-1"])
    assert cfg.task.params["teacher_accuracy"] == 0.5 and isinstance(cfg.task.params["teacher_accuracy"], float)
    recipe = tmp_path / "exp.yaml"
    recipe.write_text("task:\n  params: {scale: 1e3, tiny: 2.5E-4}\nalgo:\n  lr: 1e-5\n")
    cfg = load_config(str(recipe))
    assert cfg.task.params == {"scale": 1000.0, "tiny": 2.5e-4}
    assert cfg.algo.lr == 1e-5


def test_apply_override_builds_nested_sections() -> None:
    tree: dict = {}
    apply_override(tree, "task.params.ops=[add, sub]")
    apply_override(tree, "trainer.output_dir=")
    assert tree == {"task": {"params": {"ops": ["add", "sub"]}}, "trainer": {"output_dir": None}}


def test_unknown_key_is_named() -> None:
    with pytest.raises(ConfigError) as err:
        load_config("default", ["algo.lrr=1"])
    assert "algo.lrr" in str(err.value)
    assert "no such config key" in str(err.value)


def test_unknown_section_is_named() -> None:
    with pytest.raises(ConfigError, match="algos"):
        load_config("default", ["algos.lr=1"])


def test_wrong_type_names_the_key() -> None:
    with pytest.raises(ConfigError) as err:
        load_config("default", ["rollout.group_size=abc"])
    message = str(err.value)
    assert "rollout.group_size" in message and "'abc'" in message


def test_constraint_violation_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"rollout\.top_p"):
        load_config("default", ["rollout.top_p=1.5"])


def test_override_into_a_value_errors() -> None:
    with pytest.raises(ConfigError, match="algo.lr"):
        load_config("default", ["algo.lr.x=1"])


def test_override_without_equals_errors() -> None:
    with pytest.raises(ConfigError, match="key.sub=value") as err:
        load_config("default", ["algo.lr"])
    assert "'algo.lr'" in str(err.value)


def test_unknown_recipe_lists_shipped_recipes() -> None:
    with pytest.raises(ConfigError) as err:
        load_config("no_such_recipe")
    message = str(err.value)
    assert "'no_such_recipe'" in message and "default" in message


def test_missing_yaml_path_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(str(tmp_path / "missing.yaml"))


def test_yaml_recipe_from_a_path(tmp_path: Path) -> None:
    recipe = tmp_path / "mine.yaml"
    recipe.write_text("rollout:\n  group_size: 3\n  prompts_per_step: 5\nalgo:\n  clip_eps: 0.3\n")
    cfg = load_config(str(recipe), ["algo.clip_eps=0.1"])
    assert cfg.rollout.group_size == 3 and cfg.rollout.prompts_per_step == 5
    assert cfg.algo.clip_eps == 0.1  # overrides win over the recipe
    assert cfg.sft.steps == Config().sft.steps  # sections not in the recipe keep schema defaults


def test_yaml_recipe_errors_name_the_key(tmp_path: Path) -> None:
    recipe = tmp_path / "typo.yml"
    recipe.write_text("sft:\n  stpes: 10\n")
    with pytest.raises(ConfigError, match=r"sft\.stpes"):
        load_config(str(recipe))
    not_a_mapping = tmp_path / "list.yaml"
    not_a_mapping.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(str(not_a_mapping))


def test_duplicate_reward_names_rejected() -> None:
    with pytest.raises(ConfigError, match="unique"):
        load_config("default", ["reward.components=[{name: a, fn: verifier}, {name: a, fn: format}]"])


def test_dump_round_trips(tmp_path: Path) -> None:
    cfg = load_config("default", ["algo.lr=3e-5", "task.params.digits=2"])
    path = tmp_path / "dumped.yaml"
    path.write_text(dump_config(cfg))
    assert load_config(str(path)) == cfg


def test_nested_recipe_dicts_are_merged_with_overrides(tmp_path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text("task:\n  params: {digits: 3, teacher_accuracy: 0.4}\n")
    cfg = load_config(str(recipe), ["task.params.digits=2"])
    assert cfg.task.params == {"digits": 2, "teacher_accuracy": 0.4}


def test_method_preset_precedence(tmp_path) -> None:
    # Command line > method preset > recipe.
    cfg = load_config("default", ["algo.method=dapo", "algo.clip_eps_high=0.3"])
    assert (cfg.algo.clip_eps_high, cfg.algo.dynamic_sampling) == (0.3, True)
    cfg = load_config("default", ["algo.method=gspo"])
    assert (cfg.algo.policy_loss, cfg.algo.loss_agg, cfg.algo.clip_eps) == ("gspo", "seq_mean_token_mean", 3e-4)
    # A method named inside a recipe is its starting point: the recipe's own keys win.
    recipe = tmp_path / "r.yaml"
    recipe.write_text("algo: {method: gspo, clip_eps: 0.001}\n")
    assert load_config(str(recipe)).algo.clip_eps == 0.001
    with pytest.raises(ConfigError, match="unknown method 'nope'.*dapo"):
        load_config("default", ["algo.method=nope"])


@pytest.mark.parametrize("written, switch", [("off", "off"), ("on", "on"), ("false", "off"), ("true", "on"), ("auto", "auto"), ("'off'", "off")])
def test_wandb_switch_accepts_what_yaml_turns_into_booleans(written: str, switch: str, tmp_path: Path) -> None:
    # YAML 1.1 reads unquoted on/off as booleans: the override and the recipe both mean the switch.
    assert load_config("default", [f"telemetry.wandb={written}"]).telemetry.wandb == switch
    recipe = tmp_path / "w.yaml"
    recipe.write_text(f"telemetry:\n  wandb: {written}\n")
    assert load_config(str(recipe)).telemetry.wandb == switch
    with pytest.raises(ConfigError, match=r"telemetry\.wandb"):
        load_config("default", ["telemetry.wandb=maybe"])


@pytest.mark.parametrize("threads", ["-1", "0"])
def test_thread_count_below_one_is_refused(threads: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config("default", [f"trainer.threads={threads}"])
    assert "trainer.threads" in str(err.value) and "at least 1" in str(err.value) and f"got {threads}" in str(err.value)
    assert load_config("default", ["trainer.threads=2"]).trainer.threads == 2
    load_config("default", ["trainer.threads="])  # unset: the default choice stays valid


@pytest.mark.parametrize(
    "text, line, column, fragment",
    [
        ("model:\n  preset: micro\n   foo: 1\n", 3, 7, "mapping values are not allowed"),
        ("algo:\n  lr: [1, 2\n", 3, 1, "flow sequence that starts at line 2, column 7"),
        ('sft:\n  steps: 3\nalgo:\n  method: "dapo\n', 5, 1, "quoted scalar that starts at line 4, column 11"),
        ("algo:\n\tlr: 1\n", 2, 1, "that cannot start any token"),
    ],
)
def test_malformed_yaml_recipe_names_file_line_and_column(tmp_path: Path, text: str, line: int, column: int, fragment: str) -> None:
    recipe = tmp_path / "broken.yaml"
    recipe.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(str(recipe))
    message = str(err.value)
    assert message.startswith(f"{recipe}:{line}:{column}: invalid YAML")
    assert fragment in message and "<unicode string>" not in message
