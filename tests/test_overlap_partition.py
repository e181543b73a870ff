"""FairGFL's overlapping-subgraph partition (``partition=fairgfl_overlap``, spec fairgfl.md §4,
§7.1-6, §7.5 F5/F14) on the real Cora and CiteSeer with 40 clients, the server's public node
pool, and the fairness metrics (variance and entropy of the clients' training losses)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import yaml
from torch.func import functional_call
from typer.testing import CliRunner

from graphfed.cli import app
from graphfed.config import load_config
from graphfed.data import build_partition, load_dataset, materialize, parse_partition
from graphfed.data.federated import PartitionArtifact
from graphfed.data.partition.overlap import group_coefficients, overlap_split
from graphfed.data.partition.plan import TRAIN
from graphfed.evaluation import summarise
from graphfed.experiment import build_federation, run_experiment
from graphfed.metrics import entropy, variance
from graphfed.serialization import safe_load
from tests.conftest import error_line, require

N = 40
THIRDS = [{"fraction": 0.34, "coefficient": 0}, {"fraction": 0.33, "coefficient": 1},
          {"fraction": 0.33, "coefficient": 4}]


def overlap(data, seed: int = 0, num_clients: int = N, **options) -> PartitionArtifact:
    return build_partition(data, parse_partition({"name": "fairgfl_overlap", **options}),
                           num_clients, seed)


@pytest.fixture(scope="module")
def citeseer():
    return load_dataset("CiteSeer")


def _dataset(name, cora, citeseer):
    return cora if name == "Cora" else citeseer


def _links(client) -> set[frozenset[int]]:
    """A materialised client's undirected edges, in global node ids (PyG's induced subgraph)."""
    ids = client.global_ids.tolist()
    return {frozenset((ids[u], ids[v])) for u, v in client.graph.edge_index.t().tolist()
            if u != v}


@require("Cora")
@require("CiteSeer")
@pytest.mark.parametrize("name", ["Cora", "CiteSeer"])
def test_stored_true_ratios_equal_a_direct_count(name, cora, citeseer):
    data = _dataset(name, cora, citeseer)
    # more overlap than the default, so that many pairs also share links to count
    artifact = overlap(data, overlap_ratio=0.6, coefficient=6.0)
    clients = materialize(data, artifact).clients
    node, link = artifact.overlap["node"], artifact.overlap["link"]
    assert node.shape == link.shape == (N, N) and node.dtype == link.dtype == torch.float64
    assert not node.diagonal().any() and not link.diagonal().any()
    sharing = torch.nonzero(link > 0).tolist()
    assert len(sharing) >= 5  # the link check below is not vacuous
    pairs = [*sharing[:5], [0, 1], [1, 0], [N - 1, 7], [12, 30]]
    for i, j in pairs:
        vi, vj = set(artifact.client_ids[i].tolist()), set(artifact.client_ids[j].tolist())
        ei, ej = _links(clients[i]), _links(clients[j])
        assert node[i, j] == pytest.approx(len(vi & vj) / len(vi), rel=1e-12, abs=0)
        assert link[i, j] == pytest.approx(len(ei & ej) / len(ei) if ei else 0.0, rel=1e-12,
                                           abs=0)


@require("Cora")
@pytest.mark.parametrize("draw", ["per_label", "per_client"])
def test_only_pool_nodes_are_shared_and_each_is_held_by_c_clients_on_average(cora, draw):
    labels = cora.graph.y
    c = 2.0
    split = overlap_split(labels, 0.2, 0.05, 0.3, 0.5, np.full(N, c), draw,
                          np.random.default_rng(0))
    n = len(labels)
    holders = np.bincount(np.concatenate(split.client_ids), minlength=n)
    held_out = np.concatenate([split.global_test, split.public])
    assert not np.intersect1d(split.global_test, split.public).size
    assert len(split.global_test) == round(0.2 * n) and len(split.public) == round(0.05 * n)
    assert (holders[held_out] == 0).all()
    assert len(split.pool) == round(0.3 * (n - len(held_out)))
    private = np.setdiff1d(np.arange(n), np.concatenate([held_out, split.pool]))
    assert (holders[private] == 1).all()  # non-overlapping nodes: exactly one client each
    assert (holders[split.pool] >= 0).all() and holders[split.pool].max() > 1
    # Σ_i c·|O_ℓ|·q_{ℓ,i} = c·|O_ℓ| exactly (the q's sum to 1; per_client: Σ_i c·|O|/N = c·|O|);
    # rounding moves each of the N·L counts by at most 1/2, and the cap at |O_ℓ| needs a share
    # above 1/c = 0.5 (per_client: above |O_ℓ|·N/(c·|O|) > 1 on Cora), which Dir(0.5) over 40
    # clients practically never draws: so the mean holder count lies within N·L/(2|O|) of c
    labels_in_pool = len(np.unique(labels.numpy()[split.pool]))
    tolerance = N * labels_in_pool / (2 * len(split.pool))
    assert holders[split.pool].mean() == pytest.approx(c, abs=tolerance)


@require("Cora")
def test_public_and_test_nodes_are_in_no_client_and_every_client_node_trains(cora):
    artifact = overlap(cora)
    clients = torch.cat(artifact.client_ids)
    assert not np.intersect1d(clients.numpy(), artifact.global_test_ids.numpy()).size
    assert not np.intersect1d(clients.numpy(), artifact.public_ids.numpy()).size
    assert not np.intersect1d(artifact.public_ids.numpy(), artifact.global_test_ids.numpy()).size
    assert all(len(ids) > 0 for ids in artifact.client_ids)
    assert all((s == TRAIN).all() for s in artifact.client_splits)
    data = materialize(cora, artifact)
    public = data.public
    assert torch.equal(public.global_ids, artifact.public_ids)
    assert public.num_samples("train") == public.num_nodes == len(artifact.public_ids)
    inside = set(artifact.public_ids.tolist())
    induced = {frozenset((u, v)) for u, v in cora.graph.edge_index.t().tolist()
               if u in inside and v in inside}
    assert _links(public) == induced
    assert all(c.num_samples("val") == c.num_samples("test") == 0 for c in data.clients)


@require("Cora")
@require("CiteSeer")
@pytest.mark.parametrize("name", ["Cora", "CiteSeer"])
def test_the_coefficient_zero_group_overlaps_with_no_one(name, cora, citeseer):
    artifact = overlap(_dataset(name, cora, citeseer), overlap_groups=THIRDS)
    coefficients = group_coefficients([(g["fraction"], g["coefficient"]) for g in THIRDS], N)
    assert coefficients.tolist() == [0.0] * 14 + [1.0] * 13 + [4.0] * 13
    none = torch.as_tensor(coefficients == 0)
    for kind in ("node", "link"):
        ratios = artifact.overlap[kind]
        assert not ratios[none].any() and not ratios[:, none].any()  # row C: exactly 0
    high = torch.as_tensor(coefficients == 4)
    assert (artifact.overlap["node"][high].sum(1) > 0).all()
    assert artifact.overlap["node"][high].mean() > artifact.overlap["node"][~none & ~high].mean()


@require("Cora")
def test_same_seed_same_artifact_other_seed_other_clients(cora):
    a, b, c = overlap(cora, seed=3), overlap(cora, seed=3), overlap(cora, seed=4)
    assert a.id == b.id != c.id
    for x, y in zip([*a.client_ids, *a.client_splits, a.global_test_ids, a.public_ids,
                     *a.overlap.values()],
                    [*b.client_ids, *b.client_splits, b.global_test_ids, b.public_ids,
                     *b.overlap.values()], strict=True):
        assert torch.equal(x, y)
    assert not torch.equal(a.public_ids, c.public_ids)
    assert any(len(x) != len(y) or not torch.equal(x, y)
               for x, y in zip(a.client_ids, c.client_ids, strict=True))


@require("Cora")
def test_artifacts_load_safely_and_older_ones_without_the_new_fields_still_do(cora, tmp_path):
    artifact = overlap(cora)
    torch.save(artifact, tmp_path / "new.pt")
    again = safe_load(tmp_path / "new.pt", "partition artifact", [PartitionArtifact])
    assert torch.equal(again.public_ids, artifact.public_ids)
    assert torch.equal(again.overlap["link"], artifact.overlap["link"])
    older = build_partition(cora, parse_partition("metis"), 5, seed=0)
    del older.public_ids, older.overlap  # as an artifact saved before these fields existed
    torch.save(older, tmp_path / "old.pt")
    loaded = safe_load(tmp_path / "old.pt", "partition artifact", [PartitionArtifact])
    assert loaded.public_ids is None and loaded.overlap is None
    data = materialize(cora, loaded)
    assert data.public is None and data.overlap is None and data.num_clients == 5


def test_a_resolved_config_reads_back_as_the_same_partition(tmp_path):
    """config.yaml holds every option (a resume reads it back): a grouped split's must not
    read as one that sets both a coefficient and groups."""
    for extra in ([], [f"partition.overlap_groups={json.dumps(THIRDS)}"]):
        config = load_config(None, ["dataset=Cora", "partition=fairgfl_overlap", *extra])
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
        assert load_config(tmp_path / "config.yaml").partition == config.partition
    assert config.partition.coefficient is None
    assert load_config(None, ["partition=fairgfl_overlap"]).partition.coefficient == 2.0


BAD = [
    (["partition.test_fraction=0.9", "partition.public_fraction=0.1"],
     "test_fraction 0.9 + public_fraction 0.1 leave no node for the clients"),
    (["partition.overlap_groups=[{fraction: 0.5, coefficient: 0}, {fraction: 0.3, "
      "coefficient: 2}]"], "overlap_groups fractions must sum to 1, got 0.8"),
    (["partition.coefficient=3", "partition.overlap_groups=[{fraction: 1, coefficient: 2}]"],
     "set coefficient or overlap_groups, not both"),
    (["partition.overlap_groups=[{fraction: 1, c: 2}]"], "unknown key"),
    (["partition.alpha=0"], "partition.alpha: Input should be greater than 0"),
    (["partition.global_test=0.1"], "holds out partition.test_fraction as the global test set; "
     "leave global_test unset"),
    (["num_clients=2", f"partition.overlap_groups={json.dumps(THIRDS)}"],
     "gets no client of 2; raise num_clients or merge the groups"),
    (["partition.overlap_ratio=1", "partition.coefficient=0"],
     "some of the 40 clients got no node in 100 draws"),
]


@require("Cora")
@pytest.mark.parametrize(("overrides", "message"), BAD)
def test_bad_options_exit_with_one_line(overrides, message):
    result = CliRunner().invoke(app, ["partition", "dataset=Cora", "partition=fairgfl_overlap",
                                      f"num_clients={N}", *overrides])
    assert message in error_line(result)


def test_variance_and_entropy_follow_the_spec_by_hand():
    losses = [1.0, 2.0, 3.0, 4.0]  # mean 2.5; p = 0.1, 0.2, 0.3, 0.4
    assert variance(losses) == pytest.approx((1.5**2 + 0.5**2 + 0.5**2 + 1.5**2) / 4)  # 1.25
    assert entropy(losses) == pytest.approx(
        -(0.1 * math.log(0.1) + 0.2 * math.log(0.2) + 0.3 * math.log(0.3) + 0.4 * math.log(0.4)))
    assert variance([0.7] * 5) == 0.0 and entropy([0.7] * 5) == pytest.approx(math.log(5))
    assert entropy([0.0, 0.0, 2.0]) == 0.0  # all the loss at one client: least fair
    out = summarise([{"client": i, "train_loss_deployed": v} for i, v in enumerate(losses)])
    assert out["train_loss_deployed"] == 2.5
    assert out["train_loss_deployed_var"] == pytest.approx(1.25)
    assert out["train_loss_deployed_std"] == pytest.approx(math.sqrt(1.25))
    assert out["train_loss_deployed_entropy"] == pytest.approx(entropy(losses))
    assert "train_loss_deployed" not in summarise([{"client": 0}])


CORA_RUN = ["dataset=Cora", "algorithm=fedavg", "partition=fairgfl_overlap", f"num_clients={N}",
            "rounds=2", "eval_train_split=true", "device=cpu", "checkpoint_every=0"]


@require("Cora")
def test_a_run_records_the_fairness_of_every_clients_training_loss(tmp_path):
    run_dir, summary = run_experiment(load_config(None, [*CORA_RUN, "name=fair"]), tmp_path,
                                      progress=False)
    last = json.loads((run_dir / "seed-0" / "metrics.jsonl").read_text().splitlines()[-1])
    losses = [c["train_loss_deployed"] for c in last["clients"]]
    assert len(losses) == N  # every client, not only the sampled ones
    mean = sum(losses) / N
    share = [f / sum(losses) for f in losses]
    expected = {"train_loss_deployed": mean,
                "train_loss_deployed_var": sum((f - mean) ** 2 for f in losses) / N,
                "train_loss_deployed_entropy": -sum(p * math.log(p) for p in share)}
    for key, value in expected.items():
        assert last[key] == pytest.approx(value, rel=1e-9), key
        assert summary["final"][key] == pytest.approx(value, rel=1e-9), key
    assert 0 < expected["train_loss_deployed_entropy"] <= math.log(N)
    for key in ("global_test_acc", "global_test_macro_f1", "global_test_loss"):
        assert key in summary["final"], key


@require("Cora")
def test_deployed_losses_are_the_global_models():
    fed = build_federation(load_config(None, CORA_RUN), 0)
    for rnd in (1, 2):
        fed.fit_round(rnd)
    out = fed.evaluate(2)
    params = fed.runtime.server.global_params()

    def call(model, args, kwargs=None):
        return functional_call(model, params, args, kwargs)

    for record, ctx in zip(out["clients"][:3], fed.runtime.contexts[:3], strict=True):
        logits, target = ctx.data.outputs(fed.trainer.model, call, ("train",))["train"]
        assert len(target) == fed.data.clients[record["client"]].num_nodes
        expected = torch.nn.functional.cross_entropy(logits, target)
        assert record["train_loss_deployed"] == pytest.approx(float(expected), rel=1e-6)
    logits, target = fed.global_test.outputs(fed.trainer.model, call, ("test",))["test"]
    expected = torch.nn.functional.cross_entropy(logits, target)
    assert out["global_test_loss"] == pytest.approx(float(expected), rel=1e-6)
