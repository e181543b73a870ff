"""``graphfed sweep --preset fgl-standard`` and ``graphfed leaderboard`` on a real tiny sweep
(Cora, FED-PUB's Metis protocol, 2 rounds): the preset's line-up comes from the registry and
its config checks, each (dataset, protocol) gets its own sweep folder, and the page ranks the
methods, bolds only a clear winner, captions the budget, rule and seeds, prints the partition's
heterogeneity card and links configs that exist; a folder that is not a finished sweep is one
line and exit code 2."""

from __future__ import annotations

import csv
import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from graphfed.cli import app

pytest.importorskip("optuna", reason="Optuna is not installed (pip install '.[sweep]')")

runner = CliRunner()
TINY = ("rounds=2",)  # after the preset's settings: two rounds a run
FOLDER = "Cora-fedpub_disjoint-K10"


def preset_sweep(out: Path, *options: str, methods: str = "fedavg,local"):
    return runner.invoke(app, ["sweep", "--preset", "fgl-standard", *TINY, "--methods", methods,
                               "--budget", "2", "--seeds", "2", "--out", str(out), "--quiet",
                               *options])


def board(*args: str):
    return runner.invoke(app, ["leaderboard", *args])


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> Path:
    """A finished preset sweep: fedavg and local on Cora, budget 2, seeds 0-1."""
    from graphfed.data.datasets import is_present

    if not is_present("Cora"):
        pytest.skip("Cora not present under GRAPHFED_DATA")
    out = tmp_path_factory.mktemp("preset") / "out"
    result = preset_sweep(out, "--datasets", "Cora")
    assert result.exit_code == 0, result.output
    return out


def links(page: Path) -> list[Path]:
    return [page.parent / target for target in re.findall(r"\]\(([^)#]+)\)", page.read_text())]


def test_the_preset_sweeps_each_dataset_into_its_folder(swept):
    from graphfed.data.heterogeneity import is_card

    assert [p.name for p in swept.iterdir()] == [FOLDER]
    about = json.loads((swept / FOLDER / "sweep.json").read_text())
    assert (about["preset"], about["protocol"], about["dataset"]) == (
        "fgl-standard", "fedpub_disjoint-K10", "Cora")
    assert (about["budget"], about["seeds"], about["rule"]) == (2, [0, 1], "max_val_acc")
    assert is_card(about["heterogeneity"]) and about["heterogeneity"]["clients"] == 10
    # FED-PUB's protocol and its per-method settings reach the winning configs
    best = yaml.safe_load((swept / FOLDER / "best" / "fedavg.yaml").read_text())
    assert (best["partition"]["name"], best["partition"]["seed"], best["num_clients"],
            best["client_eval"], best["rounds"]) == ("fedpub_disjoint", 1234, 10, "trained", 2)


def test_the_lineup_comes_from_the_registry(monkeypatch):
    from graphfed.algorithms import registry
    from graphfed.sweep.preset import FGL_STANDARD

    def refuse(view) -> None:
        raise ValueError("needs a protocol this test does not give")

    fedavg = registry.get_algorithm("fedavg")
    monkeypatch.setitem(registry.REGISTRY, "zz-joined", replace(fedavg, name="zz-joined"))
    monkeypatch.setitem(registry.REGISTRY, "zz-refused", replace(fedavg, name="zz-refused",
                                                                 check=refuse))
    monkeypatch.setitem(registry.REGISTRY, "zz-graphs", replace(fedavg, name="zz-graphs",
                                                                levels=("graph",)))
    lineup = FGL_STANDARD.lineup("Cora")
    assert {"fedavg", "fed-pub", "local", "zz-joined"} <= set(lineup.methods)
    assert "zz-graphs" not in lineup.methods and "zz-graphs" not in lineup.skipped
    assert "gpfl" not in lineup.methods  # graph level only
    assert "zz-refused" not in lineup.methods
    assert "needs a protocol this test does not give" in lineup.skipped["zz-refused"]
    assert set(lineup.methods) == {n for n, a in registry.load_all().items()
                                   if "node" in a.levels} - set(lineup.skipped) - {"zz-graphs"}


def test_the_page_ranks_captions_and_links(swept, tmp_path):
    page = tmp_path / "docs" / "leaderboard.md"
    result = board(str(swept), "--out", str(page))
    assert result.exit_code == 0, result.output
    text = page.read_text()
    rows = [line for line in text.splitlines() if re.match(r"\| \d+ \|", line)]
    means = [float(re.search(r"\| (\d\.\d+) ±", line).group(1)) for line in rows]
    assert len(rows) == 2 and means == sorted(means, reverse=True)
    table = {r["method"]: float(r["ours_mean"])
             for r in csv.DictReader((swept / FOLDER / "table.csv").open())}
    assert rows[0].split(" | ")[1] == max(table, key=table.get)
    assert "Budget: 2 trials per method" in text and "seeds 0, 1 (2 seeds)" in text
    assert "`max_val_acc`" in text and "validation split only" in text
    card = json.loads((swept / FOLDER / "sweep.json").read_text())["heterogeneity"]
    assert f"| `label_jsd_mean` | {card['label_jsd_mean']:.4f} |" in text
    assert "| `overlap` | – |" in text  # disjoint clients share nothing
    assert "drawn once with seed 1234: the same for every method and seed" in text
    assert all(link.is_file() for link in links(page)) and len(links(page)) >= 4
    assert "fedavg.yaml](../../" in text  # relative to the page
    # what the preset has that was not run, and why a method is left out
    assert "## Not yet covered" in text and "- CiteSeer: not swept" in text
    assert re.search(r"- Cora: 2 of \d+ methods swept at budget 2 and 2 seeds \(the preset's: "
                     r"12 and 3\); not run: .*fed-pub", text)
    assert "adafgl: invalid config: adafgl.extractor_rounds=50" in text  # 2 rounds refuse it


def fake_table(folder: Path, rows: list[tuple[str, float, float, float]]) -> None:
    """Replace a finished sweep's rows with (method, mean, ci_low, ci_high), best configs and
    all."""
    from graphfed.sweep.report import TABLE_COLUMNS

    with (folder / "table.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=TABLE_COLUMNS)
        writer.writeheader()
        for method, mean, low, high in rows:
            writer.writerow({"method": method, "dataset": "Cora", "metric": "test_acc",
                             "ours_mean": mean, "ours_std": 0.01, "ci_low": low,
                             "ci_high": high, "n_seeds": 3, "paper": "",
                             "select": "max_val_acc", "nan_seeds": 0, "trials": 2})
            (folder / "best" / f"{method}.yaml").write_text("algorithm: fedavg\n")


@pytest.mark.parametrize(("runner_up_high", "bold"), [(0.78, None), (0.74, "b")])
def test_bold_only_when_the_interval_clears(swept, tmp_path, runner_up_high, bold):
    folder = tmp_path / "sweep"
    shutil.copytree(swept / FOLDER, folder, ignore=shutil.ignore_patterns("trials", "final"))
    fake_table(folder, [("a", 0.5, 0.45, 0.55), ("b", 0.8, 0.75, 0.85),
                        ("c", 0.7, 0.6, runner_up_high)])
    page = tmp_path / "page.md"
    assert board(str(folder), "--out", str(page)).exit_code == 0
    rows = [line for line in page.read_text().splitlines() if re.match(r"\| \d+ \|", line)]
    assert [line.split(" | ")[1] for line in rows] == ["b", "c", "a"]
    assert [line.split(" | ")[1] for line in rows if "**" in line] == ([bold] if bold else [])
    assert ("No row is bold" in page.read_text()) is (bold is None)


def not_a_sweep(tmp_path: Path, swept: Path) -> dict[str, tuple[Path, str]]:
    """Folders that are not finished sweeps, and what the one line says of each."""
    empty = tmp_path / "empty"
    empty.mkdir()
    no_about = tmp_path / "no-about"
    shutil.copytree(swept / FOLDER, no_about, ignore=shutil.ignore_patterns("trials", "final"))
    (no_about / "sweep.json").unlink()
    no_best = tmp_path / "no-best"
    shutil.copytree(swept / FOLDER, no_best, ignore=shutil.ignore_patterns("trials", "final"))
    (no_best / "best" / "local.yaml").unlink()
    return {"empty": (empty, "no readable sweep.json"),
            "no sweep.json": (no_about, "no readable sweep.json"),
            "no best config": (no_best, "no best/local.yaml"),
            "missing": (tmp_path / "nowhere", "is not a directory")}


def test_a_folder_that_is_not_a_finished_sweep_is_one_line(swept, tmp_path):
    for name, (folder, message) in not_a_sweep(tmp_path, swept).items():
        page = tmp_path / f"{name}.md"
        result = board(str(swept / FOLDER), str(folder), "--out", str(page))
        assert result.exit_code == 2, (name, result.output)
        assert len(result.output.strip().splitlines()) == 1, (name, result.output)
        assert message in result.output, (name, result.output)
        assert not page.exists()
    result = board(str(swept / FOLDER), str(swept / FOLDER), "--out", str(tmp_path / "x.md"))
    assert result.exit_code == 2 and "two sweeps of Cora under fedpub_disjoint-K10" \
        in result.output
    assert board(str(swept)).exit_code == 2  # no --out


@pytest.mark.parametrize(("options", "message"), [
    (("--preset", "nope"), "unknown sweep preset 'nope'; available: fgl-standard"),
    (("--preset", "fgl-standard", "--datasets", "PubMed"),
     "preset fgl-standard has no dataset(s) PubMed"),
    (("--preset", "fgl-standard", "--datasets", "Cora", "--methods", "gpfl"),
     "gpfl is not a node-level method"),
    (("--preset", "fgl-standard", "--datasets", "Cora", "--methods", "adafgl", "rounds=2"),
     "preset fgl-standard leaves adafgl out on Cora: invalid config: adafgl.extractor_rounds"),
    (("--preset", "fgl-standard", "configs/quickstart.yaml"),
     "--preset fgl-standard states its own config"),
    (("--preset", "fgl-standard", "--storage", "sqlite:///x.db"),
     "--storage names one study store, but --preset sweeps several datasets"),
    (("--datasets", "Cora", "--budget", "2", "--methods", "fedavg"),
     "--datasets chooses among a preset's datasets"),
])
def test_bad_preset_input_is_one_line_and_exit_2(tmp_path, options, message):
    result = runner.invoke(app, ["sweep", *options, "--out", str(tmp_path / "out"), "--quiet"])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and message in result.output, \
        result.output
    assert not (tmp_path / "out").exists()
