"""The bad-input promise as a property: any override list either validates, or is refused with
one line naming the problem (exit code 2 at the command line), never a traceback. Keys come from
the real config schema (every section, every algorithm's options) and from nowhere; values are
ints far out of range, NaN and infinities, odd unicode, lists, nested mappings and raw text."""

from __future__ import annotations

import math
from typing import Any, get_args

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from typer.testing import CliRunner

from graphfed.algorithms.registry import load_all
from graphfed.cli import app
from graphfed.config import ConfigError, ExperimentConfig, build_config, load_config
from graphfed.data.datasets import available
from graphfed.data.partition import PARTITIONS
from graphfed.models.gnn import MODEL_LEVELS


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The option sections an annotation holds (through Optional, unions and Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]


def _keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    keys = []
    for name, field in model.model_fields.items():
        keys.append(prefix + name)
        for section in _models_in(field.annotation):
            keys += _keys(section, f"{prefix}{name}.")
    return keys


SCHEMA_KEYS = sorted({*_keys(ExperimentConfig), *(
    f"{name}.{key}" for name, algorithm in load_all().items()
    for key in _keys(algorithm.options))} - {"methods"})
NAMES = sorted({*available(), *load_all(), *PARTITIONS, *MODEL_LEVELS, "adam", "sgd", "auto",
                "cpu", "batched", "flower-sim"})


def _yaml(value: Any) -> str:
    """``value`` as the text of an override (YAML flow style, as a user would type it)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=math.inf, allow_unicode=True)
    return text.strip().removesuffix("...").strip()


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 40), st.integers(-2**70, 2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(NAMES),
    st.text(max_size=12))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.one_of(st.sampled_from(SCHEMA_KEYS), st.text(max_size=6)), inner,
                    max_size=3)), max_leaves=8)
# plausible values for a schema key (so that many lists validate and the valid path is
# exercised too) or anything at all for any key
plausible = st.tuples(st.sampled_from(SCHEMA_KEYS), st.one_of(
    st.integers(0, 20), st.floats(0, 1), st.booleans(), st.sampled_from(NAMES)).map(_yaml))
keys = st.one_of(st.sampled_from(SCHEMA_KEYS), st.sampled_from(SCHEMA_KEYS).map(
    lambda k: k.rsplit(".", 1)[0] + ".nope"), st.text(max_size=12))
anything = st.tuples(keys, st.one_of(values.map(_yaml), st.text(max_size=16)))
overrides = st.lists(st.one_of(plausible, anything).map(lambda kv: f"{kv[0]}={kv[1]}"),
                     max_size=4)

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(overrides)
def test_any_override_validates_or_fails_with_one_line(items):
    try:
        config = load_config(None, items)
    except ConfigError as e:
        message = str(e)
        assert message.strip() and "\n" not in message, message
        return
    # what validated must validate again from its saved config.yaml, or --resume would fail
    saved = yaml.safe_load(yaml.safe_dump(config.to_dict(), sort_keys=False))
    assert build_config(saved) == config


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(overrides)
def test_the_cli_validates_or_exits_2_with_one_line(items):
    result = CliRunner().invoke(app, ["config", "show", "--", *items])
    assert result.exit_code in (0, 2), result.output
    assert "Traceback" not in result.output
    if result.exit_code == 2:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
