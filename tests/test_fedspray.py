"""FedSpray on real Cora (Louvain, the largest communities): the messages and their bytes, the GNN
that never leaves its client, the server's weighted means by hand, the S = 0 ablation, the
profiles, determinism, the reduction to Local training, and the refusals."""

from __future__ import annotations

import pytest
import torch

from graphfed.algorithms.fedspray import encoder
from graphfed.algorithms.fedspray.client import NODE_PROXIES
from graphfed.algorithms.fedspray.options import ENCODER, PROXIES, FedSprayOptions
from graphfed.algorithms.fedspray.proxies import alignment_weights
from graphfed.config import load_config
from graphfed.errors import GraphfedError
from graphfed.experiment import build_federation
from tests.conftest import require

pytestmark = require("Cora")

SMALL = ["dataset=Cora", "partition=louvain", "partition.mode=largest", "num_clients=4",
         "rounds=2", "local_epochs=3", "device=cpu"]
CORA_FEATURES, CORA_CLASSES = 1433, 7


def federation(*extra: str, algorithm: str = "fedspray"):
    fed = build_federation(load_config(None, [f"algorithm={algorithm}", *SMALL, *extra]), 0)
    fed.setup()
    return fed


def exchanged(fed, rnd: int) -> tuple[dict, dict]:
    """Run round ``rnd``; the messages the server sent and the replies it aggregated."""
    server, sent, seen = fed.runtime.server, {}, {}
    configure, aggregate = server.configure_fit, server.aggregate_fit

    def send(r, clients):
        sent.update(configure(r, clients))
        return sent

    def keep(r, replies):
        seen.update(replies)
        return aggregate(r, replies)

    server.configure_fit, server.aggregate_fit = send, keep
    fed.fit_round(rnd)
    server.configure_fit, server.aggregate_fit = configure, aggregate
    return sent, seen


def nbytes(message) -> int:
    return sum(t.numel() * t.element_size() for t in message.tensors.values())


@pytest.mark.parametrize("hidden", [64, 16])
def test_both_directions_carry_the_encoder_and_proxies_whatever_the_gnn_size(hidden):
    """ω = d_x d_s + d_s + 2 (d_s C + C) floats and S = C d_s, fp32, each way (spec §2); the
    GNN's hidden size changes nothing (§6.9) and no GNN tensor crosses."""
    d_s = 32
    fed = federation(f"model.hidden={hidden}", f"fedspray.proxy_dim={d_s}")
    sent, replies = exchanged(fed, 1)
    floats = (CORA_FEATURES * d_s + d_s + 2 * (d_s * CORA_CLASSES + CORA_CLASSES)
              + CORA_CLASSES * d_s)
    gnn_names = set(fed.runtime.contexts[0].state["params"])
    assert len(replies) == 4
    for message in [*sent.values(), *replies.values()]:
        assert nbytes(message) == 4 * floats
        assert not gnn_names & set(message.tensors)
        assert set(message.tensors) == {*encoder.encoder_shapes(CORA_FEATURES, CORA_CLASSES,
                                                                fed.runtime.server.options),
                                        PROXIES}


def test_the_gnn_is_trained_and_kept_on_the_client_only():
    fed = federation()
    initial = fed.runtime.server.setup.initial_params
    _, replies = exchanged(fed, 1)
    first = {c: ctx.state["params"] for c, ctx in enumerate(fed.runtime.contexts)}
    for c, params in first.items():
        assert set(params) == set(initial)
        assert any(not torch.equal(params[k], initial[k]) for k in initial), c
        for t in replies[c].tensors.values():  # no reply tensor is any of its GNN's tensors
            assert all(t.shape != v.shape or not torch.equal(t, v) for v in params.values())
    assert not torch.equal(first[0]["convs.0.lin.weight"], first[1]["convs.0.lin.weight"])


def test_the_server_takes_the_specs_weighted_means():
    """ω: the labelled-node-weighted mean (Eq. 14); class j's proxy: Σ_k a_j^k S_j^k / Σ_k a_j^k
    with a_j^k client k's training share of class j (Eq. 15), computed here by hand."""
    fed = federation()
    _, replies = exchanged(fed, 1)
    server, contexts = fed.runtime.server, fed.runtime.contexts
    sizes = {c: contexts[c].data.num_samples("train") for c in replies}
    total = sum(sizes.values())
    for name, value in server.encoder.items():
        expected = sum(sizes[c] * replies[c].tensors[name].double() for c in replies) / total
        assert torch.allclose(value.double(), expected, atol=1e-6), name
    for j in range(CORA_CLASSES):
        share = {c: float((contexts[c].data.labels("train") == j).float().mean())
                 for c in replies}
        if sum(share.values()) == 0:
            continue
        expected = sum(share[c] * replies[c].tensors[PROXIES][j].double()
                       for c in replies) / sum(share.values())
        assert torch.allclose(server.proxies[j].double(), expected, atol=1e-6), j


def test_alignment_weights_sum_to_one_over_the_clients_holding_a_class():
    ratios = torch.tensor([[0.8, 0.2, 0.0], [0.5, 0.0, 0.5], [0.0, 0.0, 0.0]])
    sizes = torch.tensor([10.0, 30.0, 5.0])
    for rule in ("class_ratio", "uniform", "size"):
        weights = alignment_weights(ratios, sizes, rule)
        assert torch.allclose(weights.sum(0), torch.ones(3)), rule
        assert torch.equal(weights == 0, ratios == 0), rule
    assert torch.allclose(alignment_weights(ratios, sizes, "class_ratio")[:, 0],
                          torch.tensor([0.8 / 1.3, 0.5 / 1.3, 0.0]))


def test_zero_proxies_sends_no_proxies_and_targets_read_features_only():
    """S = 0 (Table 3): the encoder is drawn and sent as before; no proxy is sent, trained or
    aligned, and the soft target is g_p(g_e(x)) for every node."""
    plain, zero = federation(), federation("fedspray.zero_proxies=true")
    for name, value in plain.runtime.server.encoder.items():
        assert torch.equal(zero.runtime.server.encoder[name], value)
    sent, replies = exchanged(zero, 1)
    for message in [*sent.values(), *replies.values()]:
        assert set(message.tensors) == set(plain.runtime.server.encoder)
    client, ctx = zero.runtime.client, zero.runtime.contexts[0]
    q = torch.rand(len(ctx.data.y), CORA_CLASSES).softmax(1)
    assert not client.phase1_proxies(sent[0], ctx, q).any()
    assert NODE_PROXIES not in ctx.state
    plain_sent, _ = exchanged(plain, 1)
    assert plain.runtime.client.phase1_proxies(plain_sent[0], plain.runtime.contexts[0],
                                               q).abs().sum() > 0


def test_profiles_fill_only_what_the_run_leaves_unset():
    paper, code = FedSprayOptions(), FedSprayOptions(profile="code")
    assert (paper.lambda1, paper.labeled_proxy_mode, paper.projector_init, paper.gnn_init) == (
        5.0, "global_class", "global_projector", "pyg")
    assert (code.lambda1, code.labeled_proxy_mode, code.projector_init, code.gnn_init) == (
        1.0, "per_node_persistent", "global_classifier", "uniform01")
    assert FedSprayOptions(profile="code", lambda1=5).lambda1 == 5
    assert paper.gnn_dropout == code.gnn_dropout == 0.0 and paper.kd_nodes == "confident"
    config = load_config(None, ["algorithm=fedspray", *SMALL, "fedspray.profile=code"])
    assert config.algorithm_options().gnn_init == "uniform01"


def test_the_code_profile_draws_gnns_in_u01_and_keeps_per_node_proxies():
    fed = federation("fedspray.profile=code")
    contexts = fed.runtime.contexts
    drawn = [ctx.state["params"] for ctx in contexts]
    for params in drawn:
        assert all(bool(((v >= 0) & (v < 1)).all()) for v in params.values())
    assert not torch.equal(drawn[0]["convs.0.lin.weight"], drawn[1]["convs.0.lin.weight"])
    exchanged(fed, 1)
    kept = contexts[0].state[NODE_PROXIES]
    assert kept.shape == (contexts[0].data.num_samples("train"), 64)
    assert not torch.allclose(kept, torch.full_like(kept, 0.1))  # trained from the 0.1 start
    exchanged(fed, 2)
    assert not torch.equal(contexts[0].state[NODE_PROXIES], kept)


def test_the_code_profile_starts_the_projector_from_the_global_classifier():
    """An Adam step moves each entry by about the rate: at 1e-7 the uploaded g_q is the global
    g_p it started from (the code's slip), not the global g_q."""
    fed = federation("fedspray.profile=code", "local_epochs=1", "fedspray.encoder_lr=1e-7")
    sent, replies = exchanged(fed, 1)
    for part in ("weight", "bias"):
        uploaded = replies[0].tensors[f"{encoder.PROJECTOR}.{part}"]
        assert torch.allclose(uploaded, sent[0].tensors[f"{encoder.CLASSIFIER}.{part}"],
                              atol=1e-5)
        assert not torch.allclose(uploaded, sent[0].tensors[f"{encoder.PROJECTOR}.{part}"],
                                  atol=1e-3)


def test_a_seed_gives_the_same_run():
    def run():
        fed = federation()
        exchanged(fed, 1)
        exchanged(fed, 2)
        return fed.runtime.server, fed.runtime.contexts[2].state["params"]

    (server_a, gnn_a), (server_b, gnn_b) = run(), run()
    assert torch.equal(server_a.proxies, server_b.proxies)
    for name, value in server_a.encoder.items():
        assert torch.equal(server_b.encoder[name], value)
    for name, value in gnn_a.items():
        assert torch.equal(gnn_b[name], value)


def test_without_distillation_the_gnns_are_local_training():
    """λ1 = 0 (Eq. 7): each client's GNN is Local training's with the same optimiser."""
    spray = federation("fedspray.lambda1=0")
    local = federation("optimizer.lr=0.003", "optimizer.weight_decay=0",
                       "optimizer.persistent=true", "model.dropout=0", algorithm="local")
    for rnd in (1, 2):
        spray.fit_round(rnd)
        local.fit_round(rnd)
    for mine, theirs in zip(spray.runtime.contexts, local.runtime.contexts, strict=True):
        for name, value in theirs.state["params"].items():
            assert torch.allclose(mine.state["params"][name], value, atol=1e-6), name


def test_refusals():
    with pytest.raises(GraphfedError, match="combine=add"):
        load_config(None, ["algorithm=fedspray", *SMALL, "fedspray.profile=code",
                           "fedspray.combine=concat"])
    with pytest.raises(GraphfedError, match="full-batch"):
        load_config(None, ["algorithm=fedspray", *SMALL, "sampling.fanouts=[5,5]"])
    with pytest.raises(GraphfedError, match="node-level"):
        load_config(None, ["algorithm=fedspray", "dataset=MUTAG", "partition=dirichlet"])


def test_concat_widens_the_classifier_only():
    fed = federation("fedspray.combine=concat", "fedspray.proxy_dim=16")
    assert fed.runtime.server.encoder[f"{encoder.CLASSIFIER}.weight"].shape == (CORA_CLASSES, 32)
    assert fed.runtime.server.encoder[f"{encoder.PROJECTOR}.weight"].shape == (CORA_CLASSES, 16)
    _, replies = exchanged(fed, 1)
    assert all(ENCODER + "classifier.weight" in m.tensors for m in replies.values())


def test_a_class_without_labelled_nodes_uploads_a_zero_proxy():
    """Spec §2: client k's proxy row for a class it has no labelled node of is zero (the
    server's class weights give such a row no weight: the alignment-weights test)."""
    fed = federation()
    _, replies = exchanged(fed, 1)
    contexts = fed.runtime.contexts
    absent = [(c, j) for c in replies for j in range(CORA_CLASSES)
              if not bool((contexts[c].data.labels("train") == j).any())]
    assert absent, "the test federation should have a client without some class"
    for c, j in absent:
        assert torch.count_nonzero(replies[c].tensors[PROXIES][j]) == 0, (c, j)
    present = [(c, j) for c in replies for j in range(CORA_CLASSES) if (c, j) not in absent]
    assert all(torch.count_nonzero(replies[c].tensors[PROXIES][j]) > 0 for c, j in present)
