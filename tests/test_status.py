"""The generated reproduction status (README, docs/results/status.md, each paper's list) agrees
with the committed result tables, and every number on it names its selection rule; the algorithm
tables (README, docs/algorithms.md) agree with the registry."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from graphfed.reproduce import status
from graphfed.reproduce.paper_items import NOT_RUN, PAPERS, Paper
from graphfed.reproduce.selection import TEST_SELECTED

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / status.RESULTS
MEASURED = re.compile(r"(?<![\w.])\d*\.\d{3,}")  # a number with 3+ decimals: a measurement


def _copy(tmp_path: Path) -> Path:
    """A repository root holding copies of the pages and the committed results."""
    shutil.copy(ROOT / status.README, tmp_path / status.README)
    (tmp_path / status.ALGORITHMS_PAGE).parent.mkdir(parents=True)
    shutil.copy(ROOT / status.ALGORITHMS_PAGE, tmp_path / status.ALGORITHMS_PAGE)
    shutil.copytree(RESULTS, tmp_path / status.RESULTS)
    return tmp_path


def test_committed_pages_are_what_the_tables_give():
    problems = status.differences(ROOT)
    assert not problems, "\n".join(problems) + "\nrun `make status`"


def test_a_number_edited_by_hand_fails_the_check_naming_its_line(tmp_path, capsys):
    root = _copy(tmp_path)
    page = root / status.STATUS_PAGE
    lines = page.read_text().splitlines()
    number = next(i for i, line in enumerate(lines) if "0.691 vs 0.751" in line)
    lines[number] = lines[number].replace("0.691 vs 0.751", "0.751 vs 0.751", 1)
    page.write_text("\n".join(lines) + "\n")

    assert status.main(check=True, root=root) == 1
    message = capsys.readouterr().err
    assert f"{page}:{number + 1}: differs from what the generator gives" in message
    assert "found:    " in message and "0.751 vs 0.751" in message
    assert "expected: " in message and "0.691 vs 0.751" in message

    assert status.main(check=False, root=root) == 0  # `make status` puts it back
    assert status.main(check=True, root=root) == 0


def test_an_algorithm_table_edited_by_hand_fails_the_check_and_is_regenerated(tmp_path,
                                                                              capsys):
    root = _copy(tmp_path)
    readme, docs = root / status.README, root / status.ALGORITHMS_PAGE
    readme.write_text(readme.read_text().replace("| averaging | `fairgfl`, ", "| averaging | ", 1))
    docs.write_text(docs.read_text().replace("| `fedavg` | averaging | node, graph, edge |",
                                             "| `fedavg` | averaging | node |", 1))
    assert status.main(check=True, root=root) == 1
    message = capsys.readouterr().err
    assert f"{readme}:" in message and f"{docs}:" in message
    assert "found:    | `fedavg` | averaging | node |" in message
    assert status.main(check=False, root=root) == 0
    assert status.main(check=True, root=root) == 0


def test_a_newly_registered_algorithm_is_missing_from_the_tables_until_regenerated(tmp_path):
    from graphfed.algorithms.averaging.fedavg import FedAvgClient, FedAvgOptions, FedAvgServer
    from graphfed.algorithms.registry import REGISTRY, Algorithm, load_all, register

    root = _copy(tmp_path)
    load_all()
    register(Algorithm("zz-status-test", FedAvgServer, FedAvgClient, FedAvgOptions,
                       family="averaging", paper="a test"))
    try:
        problems = status.differences(root)
        assert {Path(p.split(":")[0]).name for p in problems} == {"README.md", "algorithms.md"}
        status.write(root)
        assert "`scaffold`, `zz-status-test` |" in (root / status.README).read_text()
        assert "| `zz-status-test` | averaging | node, graph | classification | a test |" in (
            root / status.ALGORITHMS_PAGE).read_text()
    finally:
        REGISTRY.pop("zz-status-test")


def test_a_changed_table_changes_the_pages(tmp_path):
    root = _copy(tmp_path)
    table = root / status.RESULTS / "fgfl-table2" / "table.csv"
    table.write_text(table.read_text().replace("fgfl,PROTEINS,personalized_acc,0.6913",
                                               "fgfl,PROTEINS,personalized_acc,0.7613"))
    problems = status.differences(root)
    assert {Path(p.split(":")[0]).name for p in problems} >= {"README.md", "status.md",
                                                              "fgfl.md"}


def test_hand_written_prose_outside_the_markers_stays(tmp_path):
    root = _copy(tmp_path)
    page = root / status.STATUS_PAGE
    page.write_text("A sentence of ours.\n\n" + page.read_text())
    assert status.main(check=True, root=root) == 0
    assert page.read_text().startswith("A sentence of ours.")


def test_a_page_without_its_markers_is_refused(tmp_path, capsys):
    root = _copy(tmp_path)
    page = root / status.RESULTS / "fedego.md"
    page.write_text(page.read_text().replace("<!-- items:end -->", ""))
    assert status.main(check=True, root=root) == 2
    assert "items:end" in capsys.readouterr().err


@pytest.mark.parametrize(("ours", "paper", "mark"), [
    (0.70, 0.75, "short"), (0.80, 0.75, "above"), (0.77, 0.75, ""), (0.73, 0.75, ""),
    (0.675, 0.3344, "above"), (1_475_612, 1_475_612, ""), (1_600_000, 1_475_612, "above")])
def test_the_closeness_mark_is_symmetric(ours, paper, mark):
    assert status.closeness(ours, paper) == mark
    if mark:  # the mirror image carries the other mark
        assert status.closeness(2 * paper - ours, paper) == {"short": "above",
                                                             "above": "short"}[mark]


def test_every_number_names_its_rule_and_test_selection_is_labelled():
    tables = status.load_tables(RESULTS, PAPERS)
    rules = {"final", "min_val_loss", "whole run"} | {status.rule_label(r) for r in TEST_SELECTED}
    for paper in PAPERS:
        for ref in [r for item in paper.items for r in item.refs] + list(paper.summary):
            number = status.lookup(tables, ref)
            text = status.render(ref, number)
            assert any(f"({rule}" in text for rule in rules), text
            if number.rule in TEST_SELECTED:
                assert "test-selected" in text, text
    for rule in TEST_SELECTED:
        assert status.rule_label(rule) == f"{rule}, test-selected"


def test_legacy_tables_are_read_under_the_rule_they_were_written_with():
    assert status.row_rule({"metric": "local_f1"}) == "max"  # FedEgo's max over rounds
    assert status.row_rule({"metric": "local_f1_final"}) == "final"
    assert status.row_rule({"metric": "personalized_acc"}) == "final"
    assert status.row_rule({"metric": "payoff_low"}) == "run"
    assert status.row_rule({"metric": "acc", "select": "best_last_10"}) == "best_last_10"
    with pytest.raises(status.StatusError):
        status.row_rule({"metric": "something_new"})


@pytest.mark.parametrize("paper", PAPERS, ids=lambda p: p.key)
def test_every_table_and_figure_of_each_paper_is_listed(paper: Paper):
    assert status.missing_items(paper) == []


def test_item_names_cover_ranges_lists_and_roman_numbers():
    assert status.named("Tables 2–3 (Cora)") == {("table", 2), ("table", 3)}
    assert status.named("Table 7, Fig. 4") == {("table", 7), ("figure", 4)}
    assert status.named("Figs. 4, 7") == {("figure", 4), ("figure", 7)}
    assert status.named("Table IV") == {("table", 4)}
    assert status.named("Fig. 3a") == {("figure", 3)}


def test_measured_numbers_come_only_from_the_tables():
    """A note says in words what no table holds; a measured number there could drift."""
    for paper in PAPERS:
        texts = [paper.summary_note] + [t for item in paper.items
                                        for t in (item.name, item.what, item.note)]
        texts += [ref.label for item in paper.items for ref in item.refs]
        for text in texts:
            assert not MEASURED.search(text), f"{paper.key}: {text}"


def test_not_run_items_say_why():
    for paper in PAPERS:
        for item in paper.items:
            if item.status == NOT_RUN:
                assert item.note and not item.refs, f"{paper.key} {item.name}"


def test_every_committed_result_folder_records_its_provenance():
    folders = {p.parent for pattern in ("table.md", "*.csv") for p in RESULTS.rglob(pattern)}
    assert folders
    for folder in sorted(folders):
        record = json.loads((folder / "provenance.json").read_text())
        if "written" in record:  # written by graphfed reproduce beside its table
            assert {"commit", "dirty", "command", "engine"} <= set(record), folder
            continue
        # backfilled from git history for the tables that predate that record
        assert {"committed_in", "produced_at", "command", "engine"} <= set(record), folder
        assert re.fullmatch(r"[0-9a-f]{40}", record["committed_in"]), folder
        assert record["engine"] == "sequential", folder


def test_readme_stays_under_ten_kilobytes():
    assert len((ROOT / status.README).read_bytes()) <= 10_000
