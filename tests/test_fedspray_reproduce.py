"""FedSpray's presets: the paper's numbers, every cell's config, the table contract, the
``--backbones`` filter, and a tiny real reproduction."""

from __future__ import annotations

import csv

import pytest
from typer.testing import CliRunner

from graphfed.cli import app
from graphfed.reproduce import get_preset, reproduce
from graphfed.reproduce.papers import fedspray
from graphfed.reproduce.plan import cell_config, select
from graphfed.reproduce.preset import paper_numbers
from graphfed.reproduce.settings import missing, parse_label
from graphfed.reproduce.write import COLUMNS
from tests.conftest import require

PRESETS = ("fedspray-table2", "fedspray-table3", "fedspray-table5", "fedspray-lambda",
           "fedspray-proxy-dim", "fedspray-dev")


def _table(out) -> list[dict]:
    with (out / "table.csv").open() as f:
        return list(csv.DictReader(f))


def test_table2_holds_every_printed_number_as_a_fraction():
    numbers = paper_numbers("fedspray", "table2")
    assert len(numbers) == 7 * 4 * 3 * 2  # methods x datasets x backbones x (overall, minority)
    assert numbers[("fedspray", "Coauthor-Physics/backbone=gcn", "overall_acc")] == \
        "0.9559±0.0024"
    assert numbers[("fedstar", "PubMed/backbone=sage", "minority_acc")] == "0.0778±0.0701"
    assert numbers[("fedlit", "Flickr/backbone=sgc", "overall_acc")] == "0.4962±0.0036"
    for number in numbers.values():
        mean, std = (float(x) for x in number.split("±"))
        assert 0 < mean < 1 and 0 <= std < 0.1


def test_table2_contract():
    preset = get_preset("fedspray-table2")
    methods = [v.method for v in preset.variants]
    assert methods == ["fedspray", "fedspray[code]", "local", "fedavg", "apfl", "gcfl",
                       "gcfl+", "fedstar", "fedlit"]
    assert "FedLit: K = 4" in preset.notes  # FedLit's settings are ours (FedSpray gives none)
    assert preset.metrics == ("overall_acc", "minority_acc") and preset.seeds == 5
    assert preset.select == "min_val_loss" and preset.report_missing
    assert preset.datasets == [f"{d}/backbone={b}"
                               for d in ("PubMed", "WikiCS", "Coauthor-Physics", "Flickr")
                               for b in ("gcn", "sgc", "sage")]
    for method in ("fedspray", "fedspray[code]"):  # the paper's FedSpray beside both profiles
        assert preset.paper[(method, "Coauthor-Physics/backbone=gcn", "overall_acc")] \
            .startswith("0.9559")
        assert preset.paper[(method, "Coauthor-Physics/backbone=gcn", "minority_acc")] \
            .startswith("0.8098")
    assert preset.paper[("gcfl+", "WikiCS/backbone=sgc", "overall_acc")] == \
        preset.paper[("gcfl", "WikiCS/backbone=sgc", "overall_acc")] == "0.7485±0.0165"


def test_profiles_set_rounds_and_the_backbone_comes_from_the_label():
    preset = get_preset("fedspray-table2")
    variants = {v.method: v for v in preset.variants}
    paper = cell_config(preset, variants["fedspray"], "Coauthor-Physics/backbone=sage", [0],
                        quick=False)
    code = cell_config(preset, variants["fedspray[code]"], "Coauthor-Physics/backbone=sgc",
                       [0], quick=False)
    baseline = cell_config(preset, variants["apfl"], "Coauthor-Physics/backbone=gcn", [0],
                           quick=False)
    assert (paper.rounds, paper.model.name, paper.algorithm_options().lambda1) == (300, "sage", 5)
    assert (code.rounds, code.model.name, code.algorithm_options().lambda1) == (500, "sgc", 1)
    assert (baseline.rounds, baseline.model.name, baseline.model.dropout) == (300, "gcn", 0.0)
    assert baseline.num_clients == 12 and baseline.local_epochs == 5
    assert baseline.partition.name == "fedspray_published"


@pytest.mark.parametrize("name", PRESETS)
def test_every_cell_resolves_to_a_valid_config(name):
    """A typo in a grid value or a setting key would otherwise surface hours into a run."""
    preset = get_preset(name)
    variants, labels = select(preset, None, None)
    for label in labels:
        setting = parse_label(label, preset.setting_keys)
        if missing(setting.dataset):
            continue  # reported missing, never configured
        for variant in variants:
            config = cell_config(preset, variant, label, [0], quick=True)
            assert config.rounds == 20 and config.dataset == setting.dataset, (name, label)


def test_sweeps_vary_only_their_option():
    lambdas = [cell_config(fedspray.LAMBDA, v, "Coauthor-Physics", [0], quick=False)
               for v in fedspray.LAMBDA.variants]
    assert [c.algorithm_options().lambda1 for c in lambdas] == [0.1, 1, 5, 10, 20]
    assert {c.model.name for c in lambdas} == {"sage"}
    widths = [cell_config(fedspray.PROXY_DIM, v, "Coauthor-Physics", [0], quick=False)
              for v in fedspray.PROXY_DIM.variants]
    assert [c.algorithm_options().proxy_dim for c in widths] == [4, 8, 16, 32, 64, 128, 256]
    epochs = [cell_config(fedspray.TABLE5, fedspray.FEDSPRAY, f"WikiCS/E={e}", [0], quick=False)
              for e in (3, 5, 10)]
    assert [c.local_epochs for c in epochs] == [3, 5, 10]


def test_backbones_option_keeps_only_those_backbones(tmp_path):
    # PubMed is not staged: nothing trains, and the table keeps the paper's rows
    result = CliRunner().invoke(app, ["reproduce", "fedspray-table2", "--datasets", "PubMed",
                                      "--backbones", "sgc,sage", "--methods", "fedspray",
                                      "--out", str(tmp_path / "t2"), "--quiet"])
    assert result.exit_code == 0, result.output
    rows = _table(tmp_path / "t2")
    assert {r["dataset"] for r in rows} == {"PubMed/sgc", "PubMed/sage"}
    assert all(r["paper"] and not r["ours_mean"] for r in rows)


def test_backbones_option_refuses_an_unknown_backbone_and_a_preset_without_them(tmp_path):
    for args in (["fedspray-table2", "--backbones", "gat"],
                 ["fedspray-table3", "--backbones", "gcn"]):
        result = CliRunner().invoke(app, ["reproduce", *args, "--out", str(tmp_path / "x")])
        assert result.exit_code == 2 and "backbone" in result.output, result.output
        assert "Traceback" not in result.output
    assert not (tmp_path / "x").exists()


@require("Cora_ML")
def test_a_tiny_dev_reproduction_reads_pooled_numbers_at_the_best_validation_round(
        tmp_path, monkeypatch):
    monkeypatch.setattr(fedspray.DEV, "quick", ["rounds=3"])
    out, _, skipped = reproduce("fedspray-dev", methods=["fedspray", "fedavg"],
                                   datasets=["Cora_ML"], settings=["backbone=gcn"], seeds=1,
                                   quick=True, out=tmp_path / "dev", progress=False)
    assert not skipped
    table = _table(out)
    assert tuple(table[0]) == COLUMNS
    assert {(r["method"], r["metric"]) for r in table} == {
        (m, k) for m in ("fedspray", "fedavg") for k in ("overall_acc", "minority_acc")}
    for row in table:
        assert row["dataset"] == "Cora_ML/gcn" and row["select"] == "min_val_loss"
        assert 0 < float(row["ours_mean"]) <= 1 and not row["paper"]
    assert "NOT PAPER RESULTS" in (out / "table.md").read_text()


@require("Coauthor-Physics")
def test_a_tiny_table3_run_on_the_published_physics_clients(tmp_path, monkeypatch):
    """The paper's own data path: the published clients, ours beside Table 3's numbers, the
    missing PubMed row kept with the paper's numbers only."""
    monkeypatch.setattr(fedspray.TABLE3, "quick", ["rounds=1"])
    out, _, skipped = reproduce("fedspray-table3", methods=["fedspray[s0]"], seeds=1,
                                quick=True, out=tmp_path / "t3", progress=False)
    assert skipped == ["PubMed: dataset files not present under GRAPHFED_DATA"]
    table = {(r["dataset"], r["metric"]): r for r in _table(out)}
    assert set(table) == {(d, m) for d in ("PubMed/gcn", "Physics/gcn")
                          for m in ("overall_acc", "minority_acc")}
    physics = table[("Physics/gcn", "overall_acc")]
    assert physics["paper"] == "0.9323±0.0027" and 0 < float(physics["ours_mean"]) <= 1
    assert table[("PubMed/gcn", "minority_acc")]["ours_mean"] == ""


@require("Coauthor-Physics")
def test_the_proxy_width_sweep_draws_its_bars(tmp_path, monkeypatch):
    """Fig. 5 as bars of the table's own rows: one real one-round Physics cell is enough."""
    monkeypatch.setattr(fedspray.PROXY_DIM, "quick", ["rounds=1"])
    out, _, _ = reproduce("fedspray-proxy-dim", methods=["fedspray[d_s=4]"],
                          datasets=["Coauthor-Physics"], seeds=1, quick=True,
                          out=tmp_path / "dim", progress=False)
    assert {r["metric"] for r in _table(out) if r["ours_mean"]} == {"overall_acc",
                                                                     "minority_acc"}
    assert (out / "bars.png").stat().st_size > 10_000


@pytest.mark.parametrize("preset, label, shown", [
    ("fedspray-table2", "Coauthor-Physics/backbone=sgc", "Physics/sgc"),
    ("fedspray-table2", "PubMed/backbone=gcn", "PubMed/gcn"),
    ("fedspray-table3", "Coauthor-Physics", "Physics/gcn"),
    ("fedspray-table5", "WikiCS/E=10", "WikiCS/gcn/E=10"),
    ("fedspray-lambda", "Coauthor-Physics", "Physics/sage"),
])
def test_tables_name_each_column_dataset_slash_backbone(preset, label, shown):
    """The contract scripts read: ``dataset`` is ``<NAME>/<backbone>`` with the paper's names."""
    assert get_preset(preset).table_label(label) == shown
