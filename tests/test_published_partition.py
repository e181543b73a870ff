"""fedspray_published: FedSpray's published client node lists replayed on the staged
Coauthor-Physics (the clients, the authors' seeded shuffles and 40/30/30 cut, bad files refused in
one line), and the per-client majority/minority report of ``graphfed partition``."""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from graphfed.cli import app
from graphfed.data import load_dataset
from graphfed.data.federated import build_partition, materialize, partition_id, partition_params
from graphfed.data.partition import parse_partition
from graphfed.data.partition.plan import TEST, TRAIN, VAL
from graphfed.data.stats import client_stats
from tests.conftest import error_line, require

pytestmark = require("Coauthor-Physics")

FOLDER = Path(os.environ["GRAPHFED_DATA"]) / "partitions" / "FedSpray"
PHYSICS_NODES = 34_493
ARGS = ["dataset=Coauthor-Physics", "partition=fedspray_published", "num_clients=12"]


def published_lists() -> dict[str, list[int]]:
    """The Physics files read here on their own: name -> node ids in file order."""
    return {p.name: [int(float(line)) for line in p.read_text().split()]
            for p in sorted(FOLDER.glob("Physics_*.txt"))}


@pytest.fixture(scope="module")
def physics():
    return load_dataset("Coauthor-Physics")


def published(physics, seed: int, **options):
    return build_partition(physics, parse_partition({"name": "fedspray_published", **options}),
                           12, seed)


@pytest.fixture(scope="module")
def seed0(physics):
    return published(physics, 0)


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def test_the_clients_are_the_twelve_published_files(seed0):
    files = {frozenset(ids) for ids in published_lists().values()}
    clients = {frozenset(ids.tolist()) for ids in seed0.client_ids}
    assert len(seed0.client_ids) == 12 and clients == files
    assert len(seed0.global_test_ids) == 0  # FedSpray evaluates on each client's test nodes


def test_every_listed_node_is_in_exactly_one_client_and_no_other_node_is(seed0):
    held = np.concatenate([ids.numpy() for ids in seed0.client_ids])
    listed = {v for ids in published_lists().values() for v in ids}
    assert len(held) == len(set(held.tolist())) == len(listed) < PHYSICS_NODES
    assert set(held.tolist()) == listed


def test_each_client_is_split_40_30_30_within_rounding(seed0):
    """Within one node: the authors truncate both cuts, in floats (0.7 · 2680 < 1876)."""
    for splits in seed0.client_splits:
        n = len(splits)
        for code, share in ((TRAIN, 0.4), (VAL, 0.3), (TEST, 0.3)):
            assert abs(int((splits == code).sum()) - share * n) <= 1


def test_the_same_seed_gives_the_same_split_and_another_seed_another(physics, seed0):
    again, other = published(physics, 0), published(physics, 1)
    for a, b in zip(seed0.client_splits + seed0.client_ids,
                    again.client_splits + again.client_ids, strict=True):
        assert a.tolist() == b.tolist()
    assert [len(ids) for ids in other.client_ids] != [len(ids) for ids in seed0.client_ids]
    same_order = {len(ids): s for ids, s in zip(seed0.client_ids, seed0.client_splits,
                                                strict=True)}
    assert any(s.tolist() != same_order[len(ids)].tolist()
               for ids, s in zip(other.client_ids, other.client_splits, strict=True))


@pytest.mark.parametrize("seed", [0, 3])
def test_the_draws_are_the_authors(physics, seed):
    """The authors' order of draws, as their data.py makes them: NumPy's legacy generator
    seeded once, the sorted file list shuffled as a list, then each file's nodes in that order,
    train the first ⌊0.4n⌋ and validation up to ⌊0.7n⌋."""
    lists = published_lists()
    names = sorted(lists)
    rng = np.random.RandomState(seed)
    rng.shuffle(names)
    ours = published(physics, seed)
    for name, ids, splits in zip(names, ours.client_ids, ours.client_splits, strict=True):
        nodes = np.array(lists[name])
        rng.shuffle(nodes)
        n = len(nodes)
        expected = (nodes[:int(0.4 * n)], nodes[int(0.4 * n):int(0.7 * n)],
                    nodes[int(0.7 * n):])
        for code, part in zip((TRAIN, VAL, TEST), expected, strict=True):
            assert ids[splits == code].tolist() == sorted(part.tolist())


def test_an_edited_file_gets_a_partition_of_its_own(tmp_path):
    copy = shutil.copytree(FOLDER, tmp_path / "lists")
    options = parse_partition({"name": "fedspray_published", "files": str(copy)})

    def key() -> str:
        return partition_id(partition_params("Coauthor-Physics", None, options, 12, 0))

    before = key()
    first = copy / "Physics_00.txt"
    first.write_text("\n".join(first.read_text().split()[1:]))
    assert key() != before


def _edit(name: str, change):
    """A copy of the published files with ``name`` rewritten by ``change(lines, lists)``."""
    def make(tmp_path: Path) -> Path:
        copy = shutil.copytree(FOLDER, tmp_path / "lists")
        path = copy / name
        path.write_text("\n".join(change(path.read_text().split(), published_lists())) + "\n")
        return copy
    return make


def _missing(tmp_path: Path) -> Path:
    return tmp_path / "nowhere"


def _empty(tmp_path: Path) -> Path:
    (tmp_path / "lists").mkdir()
    (tmp_path / "lists" / "PubMed_01.txt").write_text("1\n")
    return tmp_path / "lists"


@pytest.mark.parametrize("make_folder, extra, message", [
    (_edit("Physics_00.txt", lambda lines, _: ["12.5", *lines]), [],
     "Physics_00.txt line 1: '12.5' is not an integral node id"),
    (_edit("Physics_00.txt", lambda lines, _: [*lines, "abc"]), [],
     "'abc' is not an integral node id"),
    (_edit("Physics_01.txt", lambda lines, _: ["3.449300000000000000e+04", *lines]), [],
     "Physics_01.txt line 1: node 34493 is out of range; the graph has 34493 nodes"),
    (_edit("Physics_01.txt", lambda lines, lists: [*lines, str(lists["Physics_00.txt"][0])]), [],
     "node 0 is in both Physics_00.txt and Physics_01.txt"),
    (_edit("Physics_02.txt", lambda lines, _: [*lines, lines[0]]), [],
     "is listed twice in Physics_02.txt"),
    (_edit("Physics_02.txt", lambda lines, _: []), [], "Physics_02.txt lists no node"),
    (_missing, [], "the folder of client files"),
    (_empty, [], "no client files for dataset Physics under"),
    (lambda tmp_path: FOLDER, ["num_clients=10"],
     "the files give 12 clients (Physics_00.txt ...) but num_clients is 10; set num_clients=12"),
    (lambda tmp_path: FOLDER, ["partition.global_test=0.2"],
     "fedspray_published has no global test set"),
])
def test_bad_client_files_are_one_line_with_exit_code_2(tmp_path, make_folder, extra, message):
    folder = make_folder(tmp_path)
    result = invoke("partition", *ARGS, f"partition.files={folder}", *extra)
    line = error_line(result)
    assert message in line
    if "folder" in message:
        assert str(folder) in line


def test_the_homophily_report_equals_a_brute_force_count(physics, seed0):
    data = materialize(physics, seed0)
    client = 4  # 856 minority nodes among 3,118 for seed 0
    row = client_stats(data)[client]
    graph = data.clients[client].graph
    y = graph.y.tolist()
    neighbours: list[set[int]] = [set() for _ in y]
    for u, v in graph.edge_index.t().tolist():
        if u != v:
            neighbours[u].add(v)
            neighbours[v].add(u)
    counts = Counter(y)
    majority = min(counts, key=lambda c: (-counts[c], c))
    groups: dict[bool, list[float]] = {True: [], False: []}
    for i, near in enumerate(neighbours):
        if near:
            groups[y[i] == majority].append(sum(y[j] == y[i] for j in near) / len(near))
    assert row["majority_class"] == majority
    assert row["majority_nodes"] == counts[majority]
    assert row["minority_nodes"] == len(y) - counts[majority] > 0
    assert row["majority_homophily"] == pytest.approx(np.mean(groups[True]))
    assert row["minority_homophily"] == pytest.approx(np.mean(groups[False]))
    assert row["minority_homophily"] < row["majority_homophily"]  # FedSpray's premise


def test_the_report_is_shown_for_any_node_level_partition():
    cora = ["dataset=Cora", "partition=louvain", "partition.mode=largest", "num_clients=3"]
    table = invoke("partition", *cora, "--minority")
    assert table.exit_code == 0, table.output
    assert "majority and minority nodes per client" in table.output
    rows = json.loads(invoke("partition", *cora, "--json").stdout)["rows"]
    for r in rows:
        assert r["majority_nodes"] + r["minority_nodes"] == r["samples"]
        assert 0 <= r["minority_homophily"] <= 1 and 0 <= r["majority_homophily"] <= 1
    graph_level = invoke("partition", "dataset=MUTAG", "model=gin", "partition=dirichlet",
                         "num_clients=3", "--minority")
    assert "--minority describes node-level clients" in error_line(graph_level)


def test_minority_nodes_are_less_homophilous_in_most_physics_clients(physics, seed0):
    """FedSpray's premise (its Table 1) on the paper's own clients: the report finds minority
    nodes less homophilous than majority nodes in most clients (here all twelve)."""
    rows = client_stats(materialize(physics, seed0))
    lower = [r["minority_homophily"] < r["majority_homophily"] for r in rows]
    assert len(rows) == 12 and sum(lower) > len(rows) / 2
