"""FedEgo: ego-graph layout, Mixup, the tree forward, λ, Θ sharing, server offsets, byte
accounting, and FedEgo's two simulations on real Cora."""

import pytest
import torch
from torch_geometric.nn import SAGEConv

from graphfed.algorithms.fedego import FedEgoOptions
from graphfed.algorithms.fedego.ego_view import (
    ego_view,
    label_distribution,
    mashed_ego_graphs,
    resampled_positions,
)
from graphfed.algorithms.fedego.options import REDUCTION, mixing_weight, split_params
from graphfed.config import load_config
from graphfed.data.federated import build_partition, materialize
from graphfed.data.partition import parse_partition
from graphfed.data.partition.fedego import code_edge_relabel
from graphfed.data.sampling import NeighbourSampler
from graphfed.data.stats import edge_homophily
from graphfed.experiment import build_federation
from graphfed.models.ego import (
    FedEgoNet,
    PersonalLayers,
    mash,
    tree_edges,
    tree_size,
)
from tests.conftest import cpu_threads, require

SIZE = tree_size(2, 6)


def batched_tree_edges(num_trees: int, hops: int, fanout: int) -> torch.Tensor:
    """The reference graph: the tree template repeated for ``num_trees`` trees in a row."""
    template = tree_edges(hops, fanout)
    offsets = torch.arange(num_trees).repeat_interleave(template.size(1))
    return template.repeat(1, num_trees) + offsets * tree_size(hops, fanout)


def test_tree_layout_children_of_p_are_6p_plus_1_to_6p_plus_6():
    assert SIZE == 43
    edges = tree_edges(2, 6)
    assert edges.shape == (2, 42)
    for child, parent in edges.t().tolist():
        assert 6 * parent + 1 <= child <= 6 * parent + 6
    two = batched_tree_edges(2, 2, 6)
    assert two[:, 42:].min() >= 43 and two[:, :42].max() < 43


def test_sampler_draws_real_neighbours_at_aligned_positions(cora):
    sampler = NeighbourSampler(cora.graph.edge_index, cora.graph.num_nodes)
    centres = torch.tensor([0, 5, 100])
    trees = sampler.sample(centres)
    assert trees.shape == (3, SIZE) and torch.equal(trees[:, 0], centres)
    adjacency = set(map(tuple, cora.graph.edge_index.t().tolist()))
    for child, parent in tree_edges(2, 6).t().tolist():
        for t in trees:
            assert (int(t[child]), int(t[parent])) in adjacency


def test_ego_tree_gradients_are_the_same_bits_on_one_or_two_threads(cora):
    """A node at many tree positions has its gradient terms summed in one order whatever the
    thread count (summed by atomic adds on several threads, the order changed run to run)."""
    torch.manual_seed(0)
    model = FedEgoNet(cora.graph.num_features, 64, 7, dropout=0.0)
    sampler = NeighbourSampler(cora.graph.edge_index, cora.graph.num_nodes)
    nodes, positions = sampler.sample(torch.arange(256)).unique(return_inverse=True)
    x = cora.graph.x[nodes]

    def gradient(threads: int) -> torch.Tensor:
        model.zero_grad()
        with cpu_threads(threads):
            model(x, positions=positions).square().sum().backward()
        return model.reduction.weight.grad.clone()

    one = gradient(1)
    assert all(torch.equal(gradient(2), one) for _ in range(10))


def test_a_mashed_graph_of_identical_ego_graphs_is_that_ego_graph():
    one = torch.randn(SIZE, 8)
    assert torch.allclose(mash(one.expand(32, SIZE, 8)), one, rtol=0, atol=1e-6)


def test_tree_forward_equals_sage_message_passing_on_the_tree_edges():
    torch.manual_seed(0)
    layers = PersonalLayers(8, 3, dropout=0.0).eval()
    trees = torch.randn(4, SIZE, 8)
    fast = layers(trees)
    edges = batched_tree_edges(4, 2, 6)
    h = trees.reshape(-1, 8)
    for conv in layers.convs:
        assert isinstance(conv, SAGEConv)
        h = torch.relu(conv(h, edges))
    reference = layers.classifier(h[torch.arange(4) * SIZE])
    assert torch.allclose(fast, reference, atol=1e-5)


def _realigned(trees: torch.Tensor) -> torch.Tensor:
    """Each tree with its hop-1 subtrees and every parent's leaves shuffled (another alignment)."""
    out = trees.clone()
    for t in range(len(trees)):
        order = torch.randperm(6)
        for new, old in enumerate(order.tolist()):
            out[t, 1 + new] = trees[t, 1 + old]
            leaves = 7 + 6 * old + torch.randperm(6)
            out[t, 7 + 6 * new: 13 + 6 * new] = trees[t, leaves]
    return out


@pytest.mark.parametrize("linear", [True, False])
def test_theorem_4_1_linear_layers_make_the_mashed_centre_alignment_free(linear):
    torch.manual_seed(1)
    layers = PersonalLayers(8, 3, dropout=0.0, linear=linear).eval()
    for conv in layers.convs:
        conv.lin_l.bias.data.zero_()
    batch = torch.randn(32, SIZE, 8)
    a = layers(mash(batch).unsqueeze(0))
    b = layers(mash(_realigned(batch)).unsqueeze(0))
    assert torch.allclose(a, b, atol=1e-5) == linear  # with ReLU in between it is not


def test_mixing_weight_lies_in_0_1_and_vanishes_for_equal_distributions():
    options = FedEgoOptions()
    p = torch.tensor([0.2, 0.3, 0.5])
    assert mixing_weight(p, p, options) == 0.0
    opposite = mixing_weight(torch.tensor([1.0, 0, 0]), torch.tensor([0, 0, 1.0]), options)
    assert opposite == pytest.approx(1.0)
    for _ in range(20):
        a, b = torch.rand(5), torch.rand(5)
        lam = mixing_weight(a / a.sum(), b / b.sum(), options)
        assert 0.0 <= lam <= 1.0
    assert mixing_weight(p, p, FedEgoOptions(lambda_mode="fixed", lambda_value=0.3)) == 0.3


def test_server_resampling_draws_each_position_from_the_parents_children():
    positions = resampled_positions(50, FedEgoOptions())
    assert positions.shape == (50, SIZE) and bool((positions[:, 0] == 0).all())
    for child, parent in tree_edges(2, 6).t().tolist():
        p = positions[:, parent]
        assert bool(((positions[:, child] >= 6 * p + 1) & (positions[:, child] <= 6 * p + 6)).all())


@require("Cora")
def test_label_skew_split_follows_fedegos_protocol(cora):
    options = parse_partition({"name": "fedego_label", "test_num": 100})
    artifact = build_partition(cora, options, 5, seed=0)
    assert len(artifact.global_test_ids) == int(cora.graph.num_nodes * 0.3)  # Cora: no isolated
    test_sets = [set(ids[s == 2].tolist()) for ids, s in
                 zip(artifact.client_ids, artifact.client_splits, strict=True)]
    everything = set(artifact.global_test_ids.tolist())
    for ids, splits in zip(artifact.client_ids, artifact.client_splits, strict=True):
        assert int((splits == 1).sum()) == len(ids) // 5  # the paper's 20 % validation
    for i, tests in enumerate(test_sets):
        assert len(tests) == 100 and not tests & everything
        everything |= tests
        for later in artifact.client_ids[i + 1:]:  # a local test node is gone for later clients
            assert not tests & set(later.tolist())
    fed = materialize(cora, artifact)
    for client in fed.clients:
        degree = torch.bincount(client.graph.edge_index[0], minlength=client.graph.num_nodes)
        assert bool((degree > 0).all())  # connectivity filter
    small = parse_partition({"name": "fedego_label", "test_num": 20, "client_size": 0.1})
    for ids in build_partition(cora, small, 5, seed=0).client_ids:  # 80 % from 3 major labels
        counts = torch.bincount(cora.graph.y[ids], minlength=7)
        assert counts.sort(descending=True).values[:3].sum() >= 0.75 * len(ids)


@require("Cora")
def test_louvain_split_gives_n_plus_1_disjoint_parts_with_part_0_as_the_test_graph(cora):
    artifact = build_partition(cora, parse_partition({"name": "fedego_louvain"}), 5, seed=0)
    parts = [artifact.global_test_ids, *artifact.client_ids]
    every = torch.cat(parts)
    assert len(every) == cora.graph.num_nodes == len(every.unique())
    sizes = [len(p) for p in parts]
    assert max(sizes) <= cora.graph.num_nodes // 6 + 20
    for splits in artifact.client_splits:  # test last, the validation fifth just before it
        val = len(splits) // 5
        assert torch.equal(splits[-200:], torch.full((200,), 2))
        assert torch.equal(splits[-200 - val:-200], torch.full((val,), 1))
        assert bool((splits[:-200 - val] == 0).all())
    with pytest.raises(ValueError, match="part 0"):
        parse_partition({"name": "fedego_louvain", "global_test": 0.2})
    config = load_config(None, ["dataset=Cora", "algorithm=fedego", "partition=fedego_louvain",
                                "client_global_eval=true"])  # part 0 is a global test graph
    assert config.partition.has_global_test


def test_code_edge_relabel_numbers_nodes_by_first_appearance_along_the_edge_list():
    edge_index = torch.tensor([[4, 4, 2, 0], [2, 0, 4, 4]])  # node 1 and 3 have no edge
    relabel = code_edge_relabel(edge_index, 5)
    assert relabel.tolist() == [2, 3, 1, 4, 0]  # 4 first, then 2, then 0; 1 and 3 last


@require("Cora")
def test_code_misalignment_keeps_features_in_place_and_decouples_labels_from_structure(cora):
    """FedEgo's code split a graph whose edges were renumbered but whose features were not."""
    options = parse_partition({"name": "fedego_louvain", "code_misalignment": True})
    artifact = build_partition(cora, options, 5, seed=0)
    data = materialize(cora, artifact)
    relabel = code_edge_relabel(cora.graph.edge_index, cora.graph.num_nodes)
    client, ids = data.clients[0], artifact.client_ids[0]
    assert torch.equal(client.graph.x, cora.graph.x[ids])  # features keep dataset order
    assert torch.equal(client.graph.y, cora.graph.y[ids])
    position = torch.full((cora.graph.num_nodes,), -1)
    position[ids] = torch.arange(len(ids))
    renumbered = relabel[cora.graph.edge_index]
    inside = (position[renumbered] >= 0).all(0)
    expected = {tuple(e) for e in position[renumbered[:, inside]].t().tolist()}
    assert {tuple(e) for e in client.graph.edge_index.t().tolist()} == expected
    aligned = materialize(cora, build_partition(
        cora, parse_partition({"name": "fedego_louvain"}), 5, seed=0)).clients[0].graph
    real = edge_homophily(aligned.edge_index, aligned.y)
    assert real > 0.7 > 0.35 > edge_homophily(client.graph.edge_index, client.graph.y)


def _federation(*overrides):
    config = load_config("configs/fedego-cora.yaml",
                         ["model.hidden=16", "partition.test_num=50", "rounds=2", "device=cpu",
                          "local_epochs=1", *overrides])
    return build_federation(config, 0)


@require("Cora")
def test_theta_is_the_same_on_every_client_after_each_round_and_phi_is_personal():
    fed = _federation()
    runtime = fed.runtime
    for rnd in (1, 2):
        fed.fit_round(rnd)
        message = runtime.server.configure_evaluate(rnd, [0])[0]
        deployed = [runtime.client.current(message, ctx) for ctx in runtime.contexts]
        for params in deployed:
            theta, _ = split_params(params)
            for k, v in runtime.server.theta.items():
                assert torch.equal(theta[k], v)
        _, phi0 = split_params(deployed[0])
        _, phi1 = split_params(deployed[1])
        assert any(not torch.equal(phi0[k], phi1[k]) for k in phi0)


@require("Cora")
def test_phi_is_mixed_by_each_clients_own_lambda():
    fed = _federation()
    runtime = fed.runtime
    fed.fit_round(1)
    message = runtime.server.configure_fit(2, [0])[0]
    ctx = runtime.contexts[0]
    own = label_distribution(ctx.data.y, 7)
    lam = mixing_weight(own, runtime.server.distribution, runtime.client.options)
    assert 0 < lam < 1
    _, before = split_params(ctx.state["params"])
    _, after = split_params(runtime.client.current(message, ctx))
    for k, v in runtime.server.phi.items():
        assert torch.allclose(after[k], lam * v + (1 - lam) * before[k], atol=1e-6)


@require("Cora")
def test_soft_labels_sum_to_one_and_upload_bytes_match_the_message_shapes():
    fed = _federation("batch_size=16")
    line = fed.fit_round(1)
    ctx = fed.runtime.contexts[0]
    options = fed.runtime.client.options
    view_x, view_y = mashed_ego_graphs(ego_view(ctx.data, options, ctx.cache), fed.trainer.model,
                                       split_params(ctx.state["params"])[0], 7, 16, options)
    assert view_x.shape[1:] == (SIZE, 16) and view_y.shape[1:] == (SIZE, 7)
    assert torch.allclose(view_y.sum(-1), torch.ones(len(view_y), SIZE))
    mashed = line["server"]["mashed_graphs"]
    trains = [c.data.num_samples("train") for c in fed.runtime.contexts]
    assert mashed == sum(-(-n // 16) for n in trains)  # one mashed graph per batch of 16 centres
    ego = line["server"]["upload_ego_bytes"]
    assert ego == mashed * SIZE * (16 + 7) * 4
    theta = sum(v.numel() * 4 for k, v in fed.trainer.initial_params().items()
                if k.startswith(REDUCTION))
    assert line["bytes_up"] == ego + 5 * (theta + 2 * 8)  # Θ_i and two scalars per client


@require("Cora")
def test_smaller_batches_upload_more_ego_graph_bytes():
    ego = {b: _federation(f"batch_size={b}").fit_round(1)["server"]["upload_ego_bytes"]
           for b in (8, 32)}
    assert ego[8] > 3.5 * ego[32]


@require("Cora")
def test_ablation_switches_change_what_is_uploaded_and_mixed():
    no_mixup = _federation("fedego.mixup=false", "fedego.noise_sigma=0")
    no_mixup.fit_round(1)
    ctx = no_mixup.runtime.contexts[0]
    _, y = mashed_ego_graphs(ego_view(ctx.data, no_mixup.runtime.client.options, ctx.cache),
                             no_mixup.trainer.model, split_params(ctx.state["params"])[0], 7, 32,
                             no_mixup.runtime.client.options)
    assert set(y.unique().tolist()) <= {0.0, 1.0}  # a single ego-graph's one-hot labels
    frozen = _federation("fedego.average_reduction=false")
    frozen.fit_round(1)
    message = frozen.runtime.server.configure_fit(2, [0])[0]
    ctx = frozen.runtime.contexts[0]
    theta_kept, _ = split_params(frozen.runtime.client.current(message, ctx))
    theta_own, _ = split_params(ctx.state["params"])
    assert all(torch.equal(theta_kept[k], theta_own[k]) for k in theta_own)


@require("Cora")
def test_without_ego_the_reduction_is_sage_and_uploads_carry_no_structure():
    fed = _federation("fedego.ego=false")
    line = fed.fit_round(1)
    server = fed.runtime.server
    assert set(server.theta) >= {"convs.0.lin_l.weight", "convs.1.lin_r.weight"}
    assert server.size == 1 and line["server"]["upload_ego_bytes"] == (
        line["server"]["mashed_graphs"] * (16 + 7) * 4)
    evaluation = fed.evaluate(1)
    assert 0.0 <= evaluation["test_acc"] <= 1.0 and "client_global_test_acc" in evaluation


@require("Cora")
def test_a_reply_whose_soft_labels_do_not_sum_to_one_is_dropped_not_aggregated(monkeypatch):
    fed = _federation()
    honest = fed.runtime.client.fit

    def tampered(message, ctx):
        reply = honest(message, ctx)
        if ctx.client_id == 1:
            reply.tensors["mashed_y"] = reply.tensors["mashed_y"] * 2
        return reply

    monkeypatch.setattr(fed.runtime.client, "fit", tampered)
    line = fed.fit_round(1)
    assert 1 not in line["answered"] and "sum to 1" in line["dropped"][1]
    trains = [c.data.num_samples("train") for c in fed.runtime.contexts]
    kept = sum(-(-n // 32) for i, n in enumerate(trains) if i != 1)  # only clients 0, 2, 3, 4
    assert line["server"]["mashed_graphs"] == kept


# ------------------------------------------------------------------ paper or code

def test_shared_sage_weights_are_eq_9_on_trees_and_on_graphs():
    torch.manual_seed(0)
    layers = PersonalLayers(8, 3, dropout=0.0, shared=True).eval()
    assert sorted(k for k, _ in layers.named_parameters()) == [
        "classifier.weight", "convs.0.weight", "convs.1.weight"]  # one W per layer, no bias
    trees = torch.randn(4, SIZE, 8)
    w0, w1 = (conv.weight for conv in layers.convs)
    hop1 = torch.relu((trees[:, 1:7] + trees[:, 7:].reshape(4, 6, 6, 8).mean(2)) @ w0.t())
    centre = torch.relu((trees[:, 0] + trees[:, 1:7].mean(1)) @ w0.t())
    by_hand = layers.classifier(torch.relu((centre + hop1.mean(1)) @ w1.t()))
    assert torch.allclose(layers(trees), by_hand, atol=1e-5)
    # message passing on the tree edges (full-neighbourhood evaluation) gives the same centres
    graph = layers.embed(trees.reshape(-1, 8), batched_tree_edges(4, 2, 6))
    assert torch.allclose(layers.classifier(graph[torch.arange(4) * SIZE]), by_hand, atol=1e-5)


@pytest.mark.parametrize("last", [True, False])
def test_linear_variant_keeps_the_last_relu_only_in_the_codes_setting(last):
    torch.manual_seed(2)
    layers = PersonalLayers(8, 3, dropout=0.0, linear=True, last_activation=last).eval()
    centres = layers.embed(torch.randn(16, SIZE, 8))
    assert bool((centres >= 0).all()) == last


@require("Cora")
@pytest.mark.parametrize("source", ["after_training", "training_batches"])
def test_mashed_graphs_come_from_fresh_batches_or_from_the_training_batches(source):
    fed = _federation("local_epochs=2", f"fedego.mash_from={source}")
    uploads = fed.fit_round(1)["server"]["mashed_graphs"]
    # the code: one per 32 of all training nodes; the paper: one per batch of each epoch's
    # training subset (sampling.train_fraction of the client's nodes), two epochs
    trained = sum(-(-ctx.data.epoch_nodes("train", 32, True).numel() // 32)
                  for ctx in fed.runtime.contexts)
    pool = sum(-(-len(ctx.data.index["train"]) // 32) for ctx in fed.runtime.contexts)
    assert trained != pool
    assert uploads == (2 * trained if source == "training_batches" else pool)


@require("Cora")
@pytest.mark.parametrize("source", ["all", "train"])
def test_the_label_distribution_behind_lambda_can_leave_out_test_labels(source):
    fed = _federation(f"fedego.label_distribution_from={source}")
    runtime = fed.runtime
    fed.fit_round(1)
    message = runtime.server.configure_fit(2, [0])[0]
    ctx = runtime.contexts[0]
    y = ctx.data.y if source == "all" else ctx.data.y[ctx.data.index["train"]]
    lam = mixing_weight(label_distribution(y, 7), runtime.server.distribution,
                        runtime.client.options)
    other = ctx.data.y[ctx.data.index["train"]] if source == "all" else ctx.data.y
    assert lam != mixing_weight(label_distribution(other, 7), runtime.server.distribution,
                                runtime.client.options)
    _, before = split_params(ctx.state["params"])
    _, after = split_params(runtime.client.current(message, ctx))
    for k, v in runtime.server.phi.items():
        assert torch.allclose(after[k], lam * v + (1 - lam) * before[k], atol=1e-6)
