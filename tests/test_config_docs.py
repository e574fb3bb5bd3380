"""docs/config.md is generated from the schema, and every key in the schema is documented."""

from __future__ import annotations

import typing

import pytest
from pydantic import BaseModel

from reinforge.config import Config, LoraConfig, RewardComponent
from reinforge.config_docs import DOCS_PATH, render_config_docs


def _sections() -> list[type[BaseModel]]:
    # A mapping of named sections (policies: name -> options) is documented by its value's section.
    annotations = [f.annotation for f in Config.model_fields.values()]
    return [Config, *(typing.get_args(a)[1] if typing.get_origin(a) is dict else a for a in annotations), RewardComponent, LoraConfig]


def test_docs_file_is_up_to_date() -> None:
    expected = render_config_docs()
    actual = DOCS_PATH.read_text() if DOCS_PATH.exists() else ""
    assert actual == expected, f"{DOCS_PATH} is stale: run `python -m reinforge.config_docs` and commit the result"


@pytest.mark.parametrize("model", _sections(), ids=lambda m: m.__name__)
def test_every_field_has_a_description(model: type[BaseModel]) -> None:
    missing = [name for name, field in model.model_fields.items() if not (field.description or "").strip()]
    assert not missing, f"{model.__name__}: fields without a description: {missing}"


def test_docs_list_every_key_with_its_default() -> None:
    docs = render_config_docs()
    for section, field in Config.model_fields.items():
        assert f"## {section}" in docs
        model, prefix = field.annotation, section
        if typing.get_origin(model) is dict:  # policies: name -> options
            model, prefix = typing.get_args(model)[1], f"{section}.<name>"
        for key in model.model_fields:
            assert f"| `{prefix}.{key}` |" in docs
    assert "| `rollout.group_size` | `int` | `8` |" in docs
    assert "| `model.path` | `str \\| None` | `null` |" in docs
    assert "| `reward.components[].fn` | `str` | `required` |" in docs
    assert "runs/&lt;timestamp&gt;" in docs  # not swallowed as an HTML tag
