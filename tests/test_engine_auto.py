"""engine=auto (the default) picks the batched engine wherever the algorithm, model, runtime and
run allow it, one reason each where not; the run records the engine it used and the threads it
computed with; config checks that need no heavy module fail before torch loads; a run's
config.yaml holds every option, the algorithm's defaults too; reproduce pins the engine its
committed tables were made on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from graphfed.algorithms.registry import ALIASES, get_algorithm, load_all
from graphfed.config import ConfigError, ExperimentConfig, choose_engine, load_config
from graphfed.config_file import RunSettings, precheck
from graphfed.experiment import build_federation, cpu_threads, run_experiment
from tests.conftest import require

REPO = Path(__file__).resolve().parents[1]
TINY = ["dataset=Cora", "partition=metis", "num_clients=3", "rounds=2", "device=cpu",
        "checkpoint_every=0"]
GRAPHS = ["dataset=MUTAG", "partition=dirichlet", "model=gin"]


def _small(name: str) -> list[str]:
    """A short run of algorithm ``name`` at a level it serves."""
    algorithm = get_algorithm(name)
    level = [] if "node" in algorithm.levels else GRAPHS
    return [f"algorithm={name}", *level, *algorithm.small_run]


def _auto(*overrides: str) -> tuple[str, str | None]:
    """The engine ``engine=auto`` picks for ``overrides``, and why it is sequential."""
    config = load_config(None, [*TINY, *overrides])
    return choose_engine(config.model_copy(update={"engine": "auto"}),
                         get_algorithm(config.algorithm))


@pytest.mark.parametrize(("overrides", "reason"), [
    (["runtime=flower-sim"], "runtime=flower-sim trains each client on its own"),
    (_small("gcfl"), "algorithm 'gcfl' is not registered batched"),
    (["model=gat"], "does not serve gat"),
    (["model=sage", "sampling.fanouts=[5,5]"], "sampled neighbourhoods or node subsets"),
    (["sampling.train_fraction=0.5"], "sampled neighbourhoods or node subsets"),
    (["optimizer.persistent=true"], "optimizer.persistent"),
])
def test_auto_is_sequential_for_one_reason_each(overrides, reason):
    engine, why = _auto(*overrides)
    assert engine == "sequential" and why is not None and reason in why
    assert load_config(None, [*TINY, *overrides]).engine == "sequential"  # the resolved config


@pytest.mark.parametrize("name", sorted(n for n, a in load_all().items() if a.batched))
def test_auto_is_batched_for_every_batched_algorithm_where_the_run_allows(name):
    assert _auto(*_small(name)) == ("batched", None)


def test_an_explicit_engine_is_kept_where_it_can_run():
    assert load_config(None, [*TINY, "engine=sequential"]).engine == "sequential"
    # batched takes the engine wherever the runtime and algorithm serve it (a gat client that
    # cannot join a batch trains alone), and is what the run used: sequential elsewhere
    assert load_config(None, [*TINY, "engine=batched", "model=gat"]).engine == "batched"
    assert load_config(None, [*TINY, "engine=batched", "runtime=flower-sim"]).engine == \
        "sequential"
    with pytest.raises(ConfigError, match=r"cuda_graphs .* needs engine=batched"):
        load_config(None, [*TINY, "model=gat", "cuda_graphs=true"])


@require("Cora")
def test_the_resolved_engine_trains_and_is_recorded(tmp_path, capsys):
    fed = build_federation(load_config(None, TINY), 0)
    assert fed.runtime.batched
    assert not build_federation(load_config(None, [*TINY, "model=gat"]), 0).runtime.batched
    config = load_config(None, [*TINY, "name=run"])
    run_dir, summary = run_experiment(config, tmp_path, progress=False)
    assert summary["engine"] == "batched"
    assert json.loads((run_dir / "summary.json").read_text())["engine"] == "batched"
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["engine"] == "batched"
    assert capsys.readouterr().out.splitlines()[0] == \
        f"run directory: {run_dir}; engine batched, 1 CPU thread"
    again, _ = run_experiment(config, tmp_path, progress=False)  # the name is taken now
    assert again == tmp_path / "run-2"
    assert capsys.readouterr().out.splitlines()[0] == (
        f"run directory: {again} (not {run_dir}: that name is taken); engine batched, "
        "1 CPU thread")


def test_a_run_computes_on_its_threads_and_sets_the_callers_back():
    assert load_config(None, TINY).threads == 1
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(3)
        with cpu_threads(2) as count:
            assert count == 2 == torch.get_num_threads()
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)


def test_config_yaml_holds_the_algorithm_section_with_its_defaults():
    for name in ("fedavg", "fedprox", "gcfl"):
        data = load_config(None, [*TINY, *_small(name)]).to_dict()
        assert data[name] == get_algorithm(name).options().model_dump(mode="json")
        assert ExperimentConfig.model_validate(data).to_dict() == data  # and reads back the same


@pytest.mark.parametrize(("overrides", "message"), [
    (["rounds=-1"], "rounds: Input should be greater than or equal to 1"),
    (["round=50"], "unknown key 'round' (did you mean 'rounds'?)"),
    (["engine=fast"], "engine: Input should be 'auto', 'batched' or 'sequential'"),
    (["threads=0"], "threads: Input should be greater than or equal to 1"),
])
def test_bad_run_settings_fail_before_torch_is_imported(overrides, message):
    code = ("import sys\nfrom graphfed.cli import app\n"
            f"try:\n    app(['run', 'configs/quickstart.yaml', *{overrides!r}])\n"
            "except SystemExit as e:\n    print('exit', e.code, 'torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.strip().splitlines()[-1] == "exit 2 False"
    assert message in " ".join(done.stderr.split())
    with pytest.raises(ConfigError):  # and the full check agrees
        load_config(REPO / "configs" / "quickstart.yaml", overrides)


def test_the_early_check_passes_every_section_and_algorithm_name():
    """A key the early check calls a near miss of a setting must not be a section or an
    algorithm's (aliases and other spellings included): those only the full check knows."""
    settings = set(RunSettings.model_fields)
    names = {*ExperimentConfig.model_fields, *load_all(), *ALIASES,
             *(n.replace("-", "_").upper() for n in load_all())} - settings
    for name in sorted(names):
        precheck(None, [f"{name}={{}}"])


def test_reproduce_pins_the_sequential_engine_unless_overridden(tmp_path):
    from graphfed.reproduce.catalog import load_presets
    from graphfed.reproduce.plan import cell_config, keeps_its_seeds

    preset, variant = next((p, v) for p in load_presets().values() for v in p.variants
                           if v.algorithm and get_algorithm(v.algorithm).batched
                           and p.computed is None)
    label = preset.datasets[0]
    pinned = cell_config(preset, variant, label, [0], quick=True)
    assert pinned.engine == "sequential"
    auto = cell_config(preset, variant, label, [0], quick=True, overrides=("engine=auto",))
    assert auto.engine == choose_engine(pinned.model_copy(update={"engine": "auto"}),
                                        get_algorithm(pinned.algorithm))[0]
    # a cell run on other threads (or seeds) is the same cell: it is kept
    path = tmp_path / "cell"
    path.mkdir()
    (path / "config.yaml").write_text(yaml.safe_dump(pinned.to_dict(), sort_keys=False))
    assert keeps_its_seeds(path, pinned.model_copy(update={"threads": 2}))
    assert keeps_its_seeds(path, pinned.model_copy(update={"engine": "batched"})) is False
