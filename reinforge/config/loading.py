"""YAML recipes, `algo.method` presets and dotted overrides, read into the schema (schema.py);
errors name the key, the file and line, and the fix."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ValidationError

from reinforge.config.schema import Config, ConfigError
from reinforge.import_paths import absolute_file_paths, add_import_root


class _YamlLoader(yaml.SafeLoader):
    """SafeLoader that reads `1e-5` and `1.0e5` as floats. PyYAML follows YAML 1.1, whose floats
    need a dot and a signed exponent, so it would keep them as strings: pydantic coerces those for
    typed fields, but free-form dicts (`task.params`, reward `params`) would receive '1e-5'."""


_YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


# A recipe's tree once every alias is expanded may hold at most this many nodes. Aliases share a
# node, so a 10-line "billion laughs" file (each line a list of aliases to the line above) composes
# in microseconds but expands to 10**9 values, which merging, validation and dumping would walk.
MAX_EXPANDED_NODES = 100_000


def _expanded_size(node: yaml.Node, memo: dict[int, int], open_nodes: set[int]) -> int:
    """Nodes in `node`'s tree with aliases expanded, counted once per distinct node (memo), so the
    count costs the size of the YAML, not of its expansion."""
    key = id(node)
    if key in memo:
        return memo[key]
    if key in open_nodes:
        raise ConfigError("invalid YAML: an alias refers to a node that contains it (a recursive recipe); write the values out")
    open_nodes.add(key)
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(child, memo, open_nodes) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        size += sum(_expanded_size(k, memo, open_nodes) + _expanded_size(v, memo, open_nodes) for k, v in node.value)
    open_nodes.discard(key)
    memo[key] = min(size, MAX_EXPANDED_NODES + 1)  # capped: a bomb's count would grow without bound
    return memo[key]


def _load_yaml(text: str) -> Any:
    loader = _YamlLoader(text)  # a SafeLoader subclass
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_size(node, {}, set()) > MAX_EXPANDED_NODES:
            raise ConfigError(
                f"invalid YAML: its anchors and aliases (&name / *name) expand to more than {MAX_EXPANDED_NODES:,} values "
                "(a \"billion laughs\" file?); write a recipe without nested aliases"
            )
        return loader.construct_document(node)
    finally:
        loader.dispose()


def load_yaml_file(path: Path) -> Any:
    """A YAML file's content; a syntax error names the file, line and column (PyYAML's own
    message names "<unicode string>", since it is handed the text, not the file)."""
    try:
        return _load_yaml(path.read_text())
    except yaml.MarkedYAMLError as err:
        mark, start = err.problem_mark, err.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        context = ""
        if err.context:
            opened = f" that starts at line {start.line + 1}, column {start.column + 1}" if start is not None else ""
            context = f" ({err.context}{opened})"
        snippet = mark.get_snippet() if mark is not None else None
        shown = f"\n{snippet}" if snippet and snippet.splitlines()[0].strip() else ""  # no caret under nothing
        raise ConfigError(
            f"{where}: invalid YAML: {err.problem}{context}{shown}\n"
            "fix the file at that line (a wrong indentation, a missing ':' or an unclosed quote or bracket are the usual causes)"
        ) from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: invalid YAML: {err}") from None
    except ConfigError as err:  # _load_yaml's own refusals (alias bombs, recursion) name no file
        raise ConfigError(f"{path}: {err}") from None


def recipe_path(name_or_path: str) -> Path:
    """A recipe is a YAML path or the name of a recipe shipped in recipes/."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise ConfigError(f"recipe file {path} does not exist")
        return path
    shipped = resources.files("reinforge.recipes")
    candidate = shipped / f"{name_or_path}.yaml"
    if not candidate.is_file():
        names = sorted(p.name.removesuffix(".yaml") for p in shipped.iterdir() if p.name.endswith(".yaml"))
        raise ConfigError(f"unknown recipe {name_or_path!r}; shipped recipes: {', '.join(names)} (or pass a YAML path)")
    return Path(str(candidate))


def apply_override(tree: dict[str, Any], dotted: str) -> None:
    """Apply one `a.b.c=value` override; the value is parsed as YAML (so 1e-5, true, [1,2] work)."""
    if "=" not in dotted:
        raise ConfigError(f"override {dotted!r} is not of the form key.sub=value")
    key, raw = dotted.split("=", 1)
    parts = key.strip().split(".")
    node = tree
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"override {key!r}: {part!r} is a value, not a section")
        node = child
    try:
        node[parts[-1]] = _load_yaml(raw) if raw.strip() else None
    except yaml.YAMLError as err:
        raise ConfigError(f"override {key}: the value {raw!r} is not valid YAML ({err.problem}); quote it or use a recipe file") from None
    except ConfigError as err:
        raise ConfigError(f"override {key}: {err}") from None


def _section_keys(loc: tuple) -> list[str]:
    """Field names of the section at `loc` (e.g. ("algo",)), for "did you mean" messages."""
    model: Any = Config
    for part in loc:
        field = getattr(model, "model_fields", {}).get(part)
        # A section, or an optional one (`model.lora: LoraConfig | None`)
        sections = [a for a in (field.annotation, *get_args(field.annotation)) if isinstance(a, type) and issubclass(a, BaseModel)] if field else []
        if not sections:
            return []
        model = sections[0]
    return list(model.model_fields)


def _format_validation_error(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"])
        if e["type"] == "extra_forbidden":
            valid = ", ".join(_section_keys(e["loc"][:-1]))
            here = f"valid keys here: {valid}; " if valid else ""
            lines.append(f"  {key}: no such config key; {here}every key is documented in docs/config.md")
        else:
            lines.append(f"  {key}: {e['msg']} (got {e.get('input')!r})")
    if len(lines) == 1:  # one mistake, one line
        return "invalid config: " + lines[0].strip()
    return "invalid config:\n" + "\n".join(lines)


def build_config(tree: dict[str, Any]) -> Config:
    try:
        return Config.model_validate(tree)
    except ValidationError as err:
        raise ConfigError(_format_validation_error(err)) from None


def load_config(recipe: str | None = "default", overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Recipe, then the `algo.method` preset, then command-line overrides.

    Precedence, lowest first: schema defaults, recipe, method preset, command line. A method named
    inside a recipe is that recipe's starting point instead, so the recipe's own keys beat it.
    """
    tree: dict[str, Any] = {}
    if recipe is not None:
        path = recipe_path(recipe)
        loaded = load_yaml_file(path) or {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"recipe {path} must be a mapping of sections, got {type(loaded).__name__}")
        # User code named in a recipe lives beside it: './x.py:f' is relative to the recipe's
        # directory, and modules there import without an install (import_paths).
        tree = absolute_file_paths(loaded, path.parent)
        if path.parent != Path(str(resources.files("reinforge.recipes"))):
            add_import_root(path.parent)
    command_line: dict[str, Any] = {}
    for item in overrides:
        apply_override(command_line, item)
    command_line = absolute_file_paths(command_line, Path.cwd())
    method = (command_line.get("algo") or {}).get("method")
    if method is not None:
        apply_method_preset(tree, method, keep_existing=False)
    elif (tree.get("algo") or {}).get("method") is not None:
        apply_method_preset(tree, tree["algo"]["method"], keep_existing=True)
    deep_merge(tree, command_line)
    return build_config(tree)


def deep_merge(base: dict[str, Any], top: dict[str, Any]) -> None:
    """`top`'s keys into `base`, section by section (a later source beats an earlier one)."""
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            deep_merge(base[key], value)
        else:
            base[key] = value


def _is_set(tree: dict[str, Any], dotted: str) -> bool:
    node: Any = tree
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def apply_method_preset(tree: dict[str, Any], method: str, keep_existing: bool) -> None:
    from reinforge.algos.methods import method_overrides  # plain data, no torch import

    try:
        preset = method_overrides(method)
    except ValueError as err:
        raise ConfigError(f"algo.method: {err}") from None
    for key, value in preset.items():
        if not (keep_existing and _is_set(tree, key)):
            apply_override(tree, f"{key}={value}")


def dump_config(config: Config) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
