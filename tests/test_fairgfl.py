"""FairGFL on real Cora: the messages (Table IV's bytes), the permanent responses, the weights
and the max-loss step wired into the server, the reductions to FedAvg, and the refusals."""

from __future__ import annotations

import math

import pytest
import torch

from graphfed.algorithms.fairgfl.client import CACHE_STATE
from graphfed.algorithms.fairgfl.options import ENCODINGS, LINKS
from graphfed.config import load_config
from graphfed.errors import GraphfedError
from graphfed.experiment import build_federation
from tests.conftest import require

pytestmark = require("Cora")

SMALL = ["dataset=Cora", "partition=fairgfl_overlap", "num_clients=8", "rounds=2",
         "local_epochs=1", "device=cpu", "eval_train_split=true", "fairgfl.encoder_epochs=20"]


def federation(*extra: str, algorithm: str = "fairgfl"):
    return build_federation(load_config(None, [f"algorithm={algorithm}", *SMALL, *extra]), 0)


def replies_of(fed, rnd: int) -> dict:
    """Run round ``rnd`` and keep the replies the server aggregated."""
    server, seen = fed.runtime.server, {}
    aggregate = server.aggregate_fit

    def keep(r, replies):
        seen.update(replies)
        return aggregate(r, replies)

    server.aggregate_fit = keep
    fed.fit_round(rnd)
    server.aggregate_fit = aggregate
    return seen


def test_a_reply_carries_table_iv_bytes_for_the_papers_cora_model():
    """Cora, GCN 1433-256-7, d_enc 100, b = 64: model 1,475,612 B, features 25,600 B, links
    512 B (Table IV), counted from the tensors the client actually sent."""
    fed = federation("model.hidden=256", "fairgfl.code_dim=100", "num_clients=4")
    fed.setup()
    replies = replies_of(fed, 1)
    full = [m for m in replies.values() if m.tensors[ENCODINGS].shape[0] == 64]
    assert full
    for message in full:
        sizes = {k: t.numel() * t.element_size() for k, t in message.tensors.items()}
        assert sizes.pop(ENCODINGS) == 25_600 and sizes.pop(LINKS) == 512
        assert sum(sizes.values()) == 1_475_612


def test_permanent_responses_resend_the_same_values_and_spend_no_more_budget():
    fed = federation("num_clients=4")
    fed.setup()
    fed.fit_round(1)
    context = fed.runtime.contexts[0]
    first = {k: v.clone() for k, v in context.state[CACHE_STATE].items()}
    line = fed.fit_round(2)
    cache = context.state[CACHE_STATE]
    again = torch.isin(cache["node_ids"], first["node_ids"])
    old = torch.isin(first["node_ids"], cache["node_ids"])
    assert again.any()  # some node was sampled in both rounds (or kept from round 1)
    assert torch.equal(cache["node_values"][again], first["node_values"][old])
    options = fed.runtime.server.options
    assert line["server"]["eps_node"] == pytest.approx(options.code_dim * options.eps_v)
    assert line["server"]["eps_link"] == pytest.approx(options.eps_e)


def test_without_fair_weights_and_max_loss_step_it_is_uniform_fedavg():
    fair = federation("fairgfl.fair_aggregation=false", "fairgfl.lambda_maxloss=0")
    # FairGFL trains sequentially: so must the FedAvg it is compared with (the batched engine
    # draws its dropout masks from another stream)
    plain = federation("fedavg.weighted=false", "engine=sequential", algorithm="fedavg")
    fair.setup()
    for rnd in (1, 2):
        fair.fit_round(rnd)
        plain.fit_round(rnd)
    for name, value in plain.runtime.server.params.items():
        assert torch.allclose(fair.runtime.server.params[name], value, atol=1e-6), name


def test_weights_sum_to_one_and_fall_with_the_true_overlap():
    fed = federation("fairgfl.oracle_overlaps=true")
    fed.setup()
    line = fed.fit_round(1)
    record = line["server"]
    assert record["clients"] == list(range(8))
    weights = record["weights"]
    assert math.isclose(sum(weights), 1.0, abs_tol=1e-5)
    true = record["overlap_true"]
    order = sorted(range(8), key=true.__getitem__)
    assert [weights[c] for c in order] == sorted(weights, reverse=True)
    assert {"node_ratio_mae", "tau", "overlap_estimated"} <= set(record)


def test_the_max_loss_step_moves_towards_the_worst_client():
    fed = federation("fairgfl.lambda_maxloss=0.5", "fairgfl.fair_aggregation=false")
    fed.setup()
    before = {k: v.clone() for k, v in fed.runtime.server.params.items()}
    replies = replies_of(fed, 1)
    worst = max(replies, key=lambda c: replies[c].scalars["loss_received"])
    ids = sorted(replies)
    mean = {k: torch.stack([replies[c].tensors[k] for c in ids]).mean(0) for k in before}
    after = fed.runtime.server.params
    for k in before:
        expected = mean[k] + 0.5 * (replies[worst].tensors[k] - before[k])
        assert torch.allclose(after[k], expected, atol=1e-6), k


def test_fairgfl_needs_the_servers_public_pool():
    with pytest.raises(GraphfedError, match="public node pool"):
        federation("partition.public_fraction=0")
    with pytest.raises(GraphfedError, match="node-level"):
        load_config(None, ["algorithm=fairgfl", "dataset=MUTAG", "partition=dirichlet"])


def test_estimates_separate_clients_that_overlap_from_those_that_do_not():
    """Table III's claim on a small scale: a third of 24 clients hold no shared node; after
    three rounds of privatised mini-batches their estimated overlap ranks below the others'."""
    groups = ("partition.overlap_groups=[{fraction: 0.34, coefficient: 0}, "
              "{fraction: 0.33, coefficient: 2}, {fraction: 0.33, coefficient: 4}]")
    fed = federation("num_clients=24", "fairgfl.encoder_epochs=600", groups)
    fed.setup()
    for rnd in (1, 2, 3):
        line = fed.fit_round(rnd)
    record = line["server"]
    assert record["separation_auc"] > 0.9
    assert record["overlap_rank_corr"] > 0.5


def test_a_strict_tau_measures_its_recall_and_reports_it():
    fed = federation("fairgfl.tau_quantile=0.5", "fairgfl.correct_recall=true")
    fed.setup()
    server = fed.runtime.server
    assert 0.4 <= server.recall <= 0.6  # on the public pool's own two releases
    line = fed.fit_round(1)
    assert line["server"]["match_recall"] == server.recall
    off = federation("fairgfl.correct_recall=false").runtime.server
    off.configure_setup([])
    assert off.recall == 1.0  # the paper's raw ratios: no correction


def test_a_checkpoint_from_before_the_recall_correction_resumes_without_it():
    server = federation().runtime.server
    state = server.state_dict()
    del state["recall"]
    server.recall = 0.5
    server.load_state_dict(state)
    assert server.recall == 1.0
