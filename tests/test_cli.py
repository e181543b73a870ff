"""Bad input: one readable message naming the problem and the choices, exit code 2, nothing
left behind."""

import json
import re

import pytest
from typer.testing import CliRunner

from graphfed.algorithms.averaging.fedavg import FedAvgClient, FedAvgOptions, FedAvgServer
from graphfed.algorithms.registry import REGISTRY, Algorithm, load_all, register
from graphfed.cli import app
from tests.conftest import require

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, list(args))


def console_width(monkeypatch, columns: int) -> None:
    """Set the CLI's consoles' width. Rich fixes a console's width when it is made if COLUMNS
    is in the environment then, and that wins over a COLUMNS given to the runner later, so a
    check of where the output wraps sets the width itself."""
    from graphfed.cli import common
    for console in (common.console, common.errors):
        monkeypatch.setattr(console, "width", columns)


@pytest.fixture(autouse=True)
def wide_console(monkeypatch):
    """200 columns: a check for a long path or key in the output does not depend on where
    the terminal running the tests would wrap it."""
    console_width(monkeypatch, 200)


@pytest.fixture
def graph_only_algorithm():
    register(Algorithm("graph-only-test", FedAvgServer, FedAvgClient, FedAvgOptions,
                       family="averaging", paper="a test", levels=("graph",)))
    yield "graph-only-test"
    REGISTRY.pop("graph-only-test")


BAD = [
    # the list is the registry's, sorted
    (["algorithm=nope"], f"unknown algorithm 'nope'; available: {', '.join(sorted(load_all()))}"),
    (["dataset=nope"], "unknown dataset 'nope'; available: Cora"),
    (["partition=nope"], "unknown partition 'nope'; available: louvain, metis"),
    (["colour=red"], "unknown key 'colour'; valid keys:"),
    (["model.depth=3"], "model.depth: unknown key; valid keys: decoder, dropout, embedding, heads"),
    (["fedprox.nu=3"], "fedprox.nu: unknown key; valid keys: adaptive, adaptive_mu_start"),
    (["rounds=many"], "rounds: Input should be a valid integer"),
    (["optimizer.name=rmsprop"], "optimizer.name: Input should be 'adam' or 'sgd'"),
    (["model=gin"], "model 'gin' does not fit the node-level dataset 'Cora'"),
    (["dataset=PROTEINS", "partition=louvain"], "partition 'louvain' is for node-level"),
    (["partition.split=[0.5,0.3,0.3]"], "ratios must be non-negative and sum to 1"),
    (["dataset=PROTEINS", "model=gin", "partition=gcfl_code", "partition.split=[0.8,0.1,0.1]"],
     "partition.split: unknown key; valid keys: edge_flip, global_test, name, seed"),
    (["num_clients=1000"], "1000 clients but only"),
    (["rounds"], "not of the form key=value"),
    (["name=../escaped"], "name: '../escaped' is not a folder name"),
    (["name=a/b"], "is not a folder name: no path separators"),
]


@require("Cora")
@require("PROTEINS")
@pytest.mark.parametrize(("overrides", "message"), BAD)
def test_bad_input_exits_2_with_a_readable_message(tmp_path, overrides, message):
    result = invoke("run", "configs/quickstart.yaml", *overrides, "--out", str(tmp_path / "r"),
                    "--quiet")
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert "Traceback" not in result.output
    assert not (tmp_path / "r").exists()


def test_switching_the_partition_kind_drops_only_the_old_kinds_keys():
    from graphfed.config import load_config

    config = load_config("configs/proteins-gin.yaml", ["partition=gcfl_chunk"])
    assert config.partition.name == "gcfl_chunk" and not hasattr(config.partition, "alpha")
    assert config.partition.global_test == 0.1 and config.partition.split == (0.8, 0.1, 0.1)
    same = load_config("configs/proteins-gin.yaml", ["partition.alpha=0.3", "partition=dirichlet"])
    assert same.partition.alpha == 0.3


@require("Cora")
def test_graph_level_algorithm_on_a_node_dataset(tmp_path, graph_only_algorithm):
    result = invoke("run", f"algorithm={graph_only_algorithm}", "--out", str(tmp_path), "--quiet")
    assert result.exit_code == 2
    assert "is for graph-level tasks but dataset 'Cora' is node-level" in " ".join(
        result.output.split())


def test_missing_config_file_and_bad_resume(tmp_path):
    assert invoke("run", "missing.yaml").exit_code == 2
    result = invoke("run", "--resume", str(tmp_path))
    assert result.exit_code == 2 and "not a graphfed run directory" in result.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just\n- a list\n")
    result = invoke("run", str(bad))
    assert result.exit_code == 2 and "mapping" in result.output


@require("Cora")
def test_report_plots_the_global_test_where_clients_hold_no_test_split(tmp_path):
    result = invoke("run", "dataset=Cora", "algorithm=fedavg", "partition=fairgfl_overlap",
                    "num_clients=4", "rounds=2", "name=train-only", "--out", str(tmp_path),
                    "--quiet")
    assert result.exit_code == 0, result.output
    run = str(tmp_path / "train-only")
    result = invoke("report", run)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "train-only" / "report.png").stat().st_size > 0
    result = invoke("report", run, "--metric", "test_acc")  # asked for by name: refused
    assert result.exit_code == 2
    assert "--metric test_acc: no round of these runs records it" in result.output
    assert "global_test_acc" in result.output


@require("Cora")
def test_run_report_and_partition_commands(tmp_path, monkeypatch):
    result = invoke("run", "configs/quickstart.yaml", "rounds=2", "num_clients=3", "name=demo",
                    "--out", str(tmp_path), "--quiet")
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "demo" / "summary.json").read_text())
    assert 0 <= summary["final"]["test_acc"] <= 1
    result = invoke("run", "configs/quickstart.yaml", "rounds=2", "num_clients=3",
                    "name=demo-local-run", "algorithm=local", "--out", str(tmp_path), "--quiet")
    assert result.exit_code == 0, result.output
    plot = tmp_path / "plots" / "curves.png"  # a folder that does not exist yet
    console_width(monkeypatch, 80)
    result = runner.invoke(app, ["report", str(tmp_path / "demo"),
                                 str(tmp_path / "demo-local-run"), "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    assert "fedavg" in result.output and "local" in result.output and plot.stat().st_size > 0
    # at 80 columns both run names stay whole: wrapped in their column, not cut to 'demo…'
    assert "…" not in result.output
    first_column = "".join(line.split("│")[1].strip() for line in result.output.splitlines()
                           if line.count("│") > 2)
    assert "demo-local-run" in first_column
    result = invoke("partition", "configs/quickstart.yaml", "num_clients=3", "--json")
    rows = json.loads(result.output)["rows"]
    assert len(rows) == 3 and sum(r["samples"] for r in rows) == 2708
    args = ["partition", "dataset=Cora", "partition=fedego_louvain", "num_clients=5"]
    shown = json.loads(invoke(*args, "--json").output)
    held_out = re.search(r"global test set: (\d+) nodes", invoke(*args).output)
    assert held_out is not None
    assert int(held_out[1]) + sum(
        r["samples"] for r in shown["rows"]) == 2708  # part 0 plus the five clients
    result = invoke("datasets")
    assert result.exit_code == 0 and "Cora" in result.output and "present" in result.output


@require("Cora")
def test_partition_of_edge_clients_counts_nodes_and_supervision_edges(monkeypatch):
    console_width(monkeypatch, 160)
    result = invoke("partition", "dataset=Cora", "level=edge", "num_clients=3")
    assert result.exit_code == 0, result.output
    header = next(line for line in result.output.splitlines() if "┃ client" in line)
    assert "nodes" in header and "train/val/test edges" in header and "graphs" not in header


def test_algorithms_lists_the_registry_as_json_and_as_a_markdown_table():
    """(The pages that show the table are checked by the status generator, tests/test_status.py.)"""
    import json


    result = invoke("algorithms", "--json")
    assert result.exit_code == 0
    rows = json.loads(result.output)
    assert {r["name"] for r in rows} == set(load_all())
    assert all(set(r) == {"name", "aliases", "family", "levels", "tasks", "paper", "batched",
                          "modes"} for r in rows)
    assert {r["name"]: r["tasks"] for r in rows} == {
        name: list(a.tasks) for name, a in load_all().items()}
    assert {r["name"] for r in rows if r["batched"]} == {
        name for name, a in load_all().items() if a.batched}
    assert {r["name"]: r["modes"] for r in rows} == {
        name: list(a.modes) for name, a in load_all().items()}
    table = invoke("algorithms", "--markdown").output.strip().splitlines()
    assert table[0] == "| name | family | levels | tasks | paper |"
    assert sorted(line.split("`")[1] for line in table[2:]) == sorted(load_all())


@require("Cora")
def test_resume_of_a_finished_run_says_it_is_finished(tmp_path):
    args = ["dataset=Cora", "num_clients=2", "partition=metis", "rounds=1", "name=done"]
    assert invoke("run", *args, "--out", str(tmp_path), "--quiet").exit_code == 0
    result = invoke("run", "--resume", str(tmp_path / "done"))
    assert result.exit_code == 0 and "is finished" in result.output


def test_config_show_lists_every_key_with_value_default_and_description():
    args = ["config", "show", "configs/quickstart.yaml", "fedavg.weighted=false"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    for key in ("num_clients", "partition.split", "optimizer.lr", "fedavg.weighted",
                "sampling.fanouts", "flower.round_timeout"):
        assert key in result.output, key
    assert "weight by client sample counts" in result.output
    bad = runner.invoke(app, ["config", "show", "configs/quickstart.yaml", "rounds=-1"])
    assert bad.exit_code == 2 and "rounds" in bad.output


def test_help_version_and_a_bare_run_print_instead_of_training(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    short, long = runner.invoke(app, ["run", "-h"]), runner.invoke(app, ["run", "--help"])
    assert short.exit_code == long.exit_code == 0 and short.output == long.output
    assert "KEY=VALUE" in short.output and "graphfed run --resume" in short.output
    version = runner.invoke(app, ["--version"])
    assert version.exit_code == 0 and version.output.startswith("graphfed ")
    bare = runner.invoke(app, ["run"])
    assert bare.exit_code == 2 and "Usage" in bare.output
    assert not (tmp_path / "runs").exists()  # nothing trained, nothing written


@pytest.mark.parametrize(("overrides", "suggested"), [
    (["round=50"], "unknown key 'round' (did you mean 'rounds'?)"),
    (["optimizer.lrr=0.1"], "optimizer.lrr: unknown key (did you mean 'lr'?)"),
    (["algorithm=fedavgg"], "unknown algorithm 'fedavgg' (did you mean 'fedavg'?)"),
])
def test_a_typo_gets_a_suggestion(overrides, suggested):
    from graphfed.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=re.escape(suggested)):
        load_config(None, overrides)


@pytest.mark.parametrize(("typed", "name"), [("FedAvg", "fedavg"), ("fed_prox", "fedprox"),
                                             ("fedpub", "fed-pub"), ("D-FedGNN", "d-fedgnn")])
def test_algorithm_names_are_read_in_any_case_and_with_any_separator(typed, name):
    from graphfed.config import load_config

    config = load_config(None, [f"algorithm={typed}", f"{typed}.mu=0.2"]
                         if name == "fedprox" else [f"algorithm={typed}"])
    assert config.algorithm == name
    if name == "fedprox":  # its options section, under the same spelling, is fedprox's
        assert list(config.methods) == ["fedprox"] and config.methods["fedprox"].mu == 0.2
