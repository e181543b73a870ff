"""GPFL's reproduction: repeats that share a split and an initial model (``init_seed``), setting
labels, the fold axis, per-metric selectors, and the ``gpfl-table2`` preset."""

import json

import pytest
import torch
from typer.testing import CliRunner

from graphfed.cli import app
from graphfed.config import load_config
from graphfed.errors import GraphfedError
from graphfed.experiment import build_federation
from tests.conftest import error_line, require

SMALL = ["dataset=PROTEINS", "model=gin", "algorithm=fedavg", "partition=gpfl_dirichlet",
         "partition.seed=0", "num_clients=3", "batch_size=64", "device=cpu"]


def _federation(seed: int, *overrides: str):
    return build_federation(load_config(None, [*SMALL, *overrides]), seed)


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@require("PROTEINS")
def test_seeds_with_one_init_seed_start_alike_and_train_apart():
    first, second = _federation(0, "init_seed=0"), _federation(1, "init_seed=0")
    assert _same(first.runtime.server.global_params(), second.runtime.server.global_params())
    first.fit_round(1)
    second.fit_round(1)
    assert not _same(first.runtime.server.global_params(),
                     second.runtime.server.global_params())


@require("PROTEINS")
def test_an_unset_init_seed_keeps_each_seeds_own_run():
    default, explicit = _federation(1), _federation(1, "init_seed=1")
    assert _same(default.runtime.server.global_params(),
                 explicit.runtime.server.global_params())
    shared = _federation(1, "init_seed=0")
    assert _same(_federation(0).runtime.server.global_params(),
                 shared.runtime.server.global_params())
    assert not _same(default.runtime.server.global_params(),
                     shared.runtime.server.global_params())
    default.fit_round(1)
    explicit.fit_round(1)  # init_seed equal to the seed: the very same run
    assert _same(default.runtime.server.global_params(),
                 explicit.runtime.server.global_params())


# ------------------------------------------------------------------ setting labels


def test_a_label_names_its_dataset_and_the_settings_it_runs_under():
    from graphfed.reproduce import get_preset
    from graphfed.reproduce.plan import cell_config
    from graphfed.reproduce.preset import Variant
    from graphfed.reproduce.settings import parse_label

    preset = get_preset("gpfl-table2")
    setting = parse_label("NCI1/k=25/alpha=0.5", preset.setting_keys)
    assert setting.dataset == "NCI1" and setting.folder == "NCI1_k=25_alpha=0.5"
    assert setting.overrides(preset.setting_keys) == ["num_clients=25", "partition.alpha=0.5"]
    assert parse_label("PROTEINS", {}).overrides({}) == []
    with pytest.raises(GraphfedError, match="unknown component"):
        parse_label("NCI1/c=3", preset.setting_keys)
    config = cell_config(preset, Variant("fedavg", "fedavg"), "PROTEINS/k=15/alpha=5", [0, 1, 2],
                         quick=False, fold=3)
    assert (config.dataset, config.num_clients, config.partition.alpha) == ("PROTEINS", 15, 5)
    assert (config.partition.fold, config.partition.seed, config.init_seed) == (3, 0, 0)
    assert config.name == "fedavg-PROTEINS_k=15_alpha=5-fold3"
    gcfl = cell_config(preset, Variant("gcfl", "gcfl+"), "NCI1/k=20/alpha=1", [0], quick=False)
    assert gcfl.algorithm_options().eps1 == 0.1  # the GPFL code's NCI1 epsilon


def test_datasets_and_settings_filter_the_labels():
    from graphfed.reproduce import get_preset
    from graphfed.reproduce.plan import select

    preset = get_preset("gpfl-table2")

    def labels(datasets=None, settings=None):
        return select(preset, ["fedavg"], datasets, settings)[1]

    assert len(labels()) == 27 and len(labels(["nci1"])) == 9 and len(labels(["Yeast"])) == 9
    assert labels(["PROTEINS", "NCI1"], ["k=25", "alpha=5"]) == [  # in the order asked
        "PROTEINS/k=25/alpha=5", "NCI1/k=25/alpha=5"]
    assert labels(["NCI1"], ["k=25"]) == [f"NCI1/k=25/alpha={a}" for a in ("0.5", "1", "5")]
    assert labels(["PROTEINS"], ["k=25", "alpha=1.0"]) == ["PROTEINS/k=25/alpha=1"]
    assert len(labels(None, ["k=25", "k=15", "alpha=5"])) == 6  # a repeated key: either value
    with pytest.raises(GraphfedError, match="unknown setting key"):
        labels(None, ["clients=25"])
    with pytest.raises(GraphfedError, match="no setting matches"):
        labels(None, ["k=30"])
    with pytest.raises(GraphfedError, match="covers NCI1, PROTEINS, Yeast"):
        labels(["DD"])


def test_the_fold_axis_is_bounded_by_the_presets_folds():
    from graphfed.reproduce import get_preset
    from graphfed.reproduce.plan import fold_axis

    assert fold_axis(get_preset("gpfl-table2"), None) == [0, 1, 2, 3, 4]
    assert fold_axis(get_preset("gpfl-table2"), 2) == [0, 1]
    assert fold_axis(get_preset("fgfl-table2"), None) == [None]
    with pytest.raises(GraphfedError, match=r"folds 1 \.\. 5"):
        fold_axis(get_preset("gpfl-table2"), 6)
    with pytest.raises(GraphfedError, match="no fold axis"):
        fold_axis(get_preset("fgfl-table2"), 1)


@pytest.mark.parametrize(("args", "message"), [
    (["--settings", "k=30"], "no setting matches"),
    (["--settings", "n=25"], "unknown setting key"),
    (["--folds", "6"], "folds 1 .. 5"),
])
def test_cli_refuses_a_bad_setting_or_fold_in_one_line(tmp_path, args, message):
    result = CliRunner().invoke(app, ["reproduce", "gpfl-table2", "--methods", "fedavg", *args,
                                      "--out", str(tmp_path / "x")])
    assert message in error_line(result)
    assert not (tmp_path / "x").exists()


# ------------------------------------------------------------------ rows


def _line(rnd: int, acc: float) -> dict:
    return {"round": rnd, "test_acc": acc, "clients": [{"client": 0, "test_acc": acc}]}


def test_acc_is_the_final_round_and_acc_best_last_10_its_best_of_the_last_ten(tmp_path):
    from graphfed.reproduce import get_preset
    from graphfed.reproduce.plan import Cell
    from graphfed.reproduce.preset import Variant
    from graphfed.reproduce.score import Scoring, cell_rows

    accs = [0.9] + [0.5 + r / 100 for r in range(1, 11)] + [0.52]  # 12 rounds, 0.9 too early
    seed_dir = tmp_path / "seed-0"
    seed_dir.mkdir()
    lines = [{"round": 0}] + [_line(r, a) for r, a in enumerate(accs, 1)]
    (seed_dir / "metrics.jsonl").write_text("\n".join(map(json.dumps, lines)) + "\n")
    (seed_dir / "summary.json").write_text(json.dumps({"seconds": 6.0, "rounds": 12}))
    variant = Variant("fedavg", "fedavg")
    cell = Cell(variant, "PROTEINS/k=25/alpha=1", None, 0, tmp_path, {"seeds": [0]})
    scoring = Scoring(get_preset("gpfl-table2"), [0])
    rows = {r["metric"]: r for r in cell_rows(scoring, variant, cell.dataset, [cell])}
    assert rows["acc"]["ours_mean"] == 0.52 and rows["acc"]["select"] == "final"
    assert rows["acc_best_last_10"]["ours_mean"] == pytest.approx(0.60)
    assert rows["acc_best_last_10"]["select"] == "best_last_10"
    assert rows["seconds_per_round"]["ours_mean"] == 0.5
    assert rows["acc"]["paper"] == rows["acc_best_last_10"]["paper"] == "0.7062±0.047"


@require("PROTEINS")
def test_a_fold_protocol_runs_each_fold_with_its_repeats_and_pools_them(tmp_path):
    import csv

    from graphfed.metrics import mean_std
    from graphfed.reproduce import reproduce

    out, rows, skipped = reproduce(
        "gpfl-table2", methods=["self-train", "fedavg"], datasets=["PROTEINS", "Yeast"],
        settings=["k=15", "alpha=1"], folds=2, seeds=2, out=tmp_path / "t", progress=False,
        overrides=("rounds=2",))
    assert skipped == ["Yeast: not a dataset graphfed can load"]
    runs = sorted(p.name for p in (out / "runs").iterdir())
    assert runs == [f"{m}-PROTEINS_k=15_alpha=1-fold{f}" for m in ("fedavg", "self-train")
                    for f in (0, 1)]
    finals = []
    for fold in (0, 1):
        run = out / "runs" / f"fedavg-PROTEINS_k=15_alpha=1-fold{fold}"
        assert sorted(p.name for p in run.glob("seed-*")) == ["seed-0", "seed-1"]
        for seed in (0, 1):
            lines = (run / f"seed-{seed}" / "metrics.jsonl").read_text().splitlines()
            finals.append(json.loads(lines[-1])["test_acc"])
    table = {(r["method"], r["dataset"], r["metric"]): r for r in rows}
    ours = table[("fedavg", "PROTEINS/k=15/alpha=1", "acc")]
    assert (ours["ours_mean"], ours["ours_std"]) == pytest.approx(mean_std(finals))
    yeast = table[("fedavg", "Yeast/k=15/alpha=1", "acc_best_last_10")]
    assert yeast["ours_mean"] is None and yeast["paper"] == "0.6570±0.004"
    assert ("fedavg", "Yeast/k=15/alpha=1", "seconds_per_round") not in table
    with (out / "table.csv").open() as f:
        assert {r["dataset"] for r in csv.DictReader(f)} == {"PROTEINS/k=15/alpha=1",
                                                             "Yeast/k=15/alpha=1"}
    markdown = (out / "table.md").read_text()
    assert "folds 0-1 x 2 seeds each" in markdown.splitlines()[0]
    assert "acc_best_last_10, best_last_10 (test-selected)" in markdown


# ------------------------------------------------------------------ the presets


def test_table2_carries_all_243_printed_numbers():
    from graphfed.reproduce import get_preset
    from graphfed.reproduce.preset import paper_numbers

    numbers = paper_numbers("gpfl", "table2")
    assert len(numbers) == 243
    assert numbers[("gpfl", "NCI1/k=25/alpha=0.5", "acc_best_last_10")] == "0.7888±0.012"
    assert numbers[("fedavg", "Yeast/k=20/alpha=5", "acc_best_last_10")] == "0.6608±0.007"
    assert numbers[("pfedgraph", "PROTEINS/k=15/alpha=1", "acc_best_last_10")] == "0.6946±0.030"
    # the paper's claims on its own table (spec §7.1.2): GPFL's mean gains over the 27 cells
    cells = {d for _, d, _ in numbers}

    def mean(method):
        return sum(float(numbers[(method, d, "acc_best_last_10")].split("±")[0])
                   for d in cells) / len(cells)

    assert len(cells) == 27
    assert mean("gpfl") - mean("self-train") == pytest.approx(0.0157, abs=5e-5)
    assert mean("gpfl") - mean("fedavg") == pytest.approx(0.0803, abs=5e-5)
    preset = get_preset("gpfl-table2")
    assert preset.paper[("scaffold", "PROTEINS/k=20/alpha=5", "acc")] == "0.7269±0.020"
    assert len(preset.paper) == 2 * 243  # beside acc and acc_best_last_10 alike
    assert [v.method for v in preset.variants if v.method != "scaffold[canonical]"] == [
        "self-train", "fedavg", "fedprox", "scaffold", "gcfl", "fedstar", "fedamp",
        "pfedgraph", "gpfl"]


def test_the_seeds_preset_redraws_what_the_code_repeats_share():
    from graphfed.reproduce import get_preset

    table2, seeds = get_preset("gpfl-table2"), get_preset("gpfl-table2-seeds")
    assert set(table2.base) - set(seeds.base) == {"partition.seed=0", "init_seed=0"}
    assert seeds.variants == table2.variants and seeds.paper == table2.paper
    assert "redraw" in seeds.description


def test_the_ablation_runs_gpfl_variants_only():
    from graphfed.reproduce import get_preset

    ablation = get_preset("gpfl-ablation")
    assert {v.algorithm for v in ablation.variants} == {"gpfl"}
    assert [v.method for v in ablation.variants] == [
        "gpfl[random]", "gpfl[property]", "gpfl[random+learn]", "gpfl", "gpfl[raw-params]"]
    assert len(ablation.datasets) == 18 and not ablation.paper
