"""FairGFL's client (Algorithm 1; spec §3.2, §3.6): the received global model's loss on its
training nodes, local epochs, then an LDP-sanitised mini-batch of its subgraph: the privatised
encodings of b_i = min(b, n_i) sampled nodes and the perturbed, sparsified links among them,
packed into bits. With permanent randomised response a node's encoding and a pair's bit are
privatised once and re-sent whenever sampled again (App. F-A), so repeated queries learn
nothing new."""

from __future__ import annotations

import torch
from torch import Tensor

from graphfed.algorithms.averaging.fedavg import FedAvgClient
from graphfed.algorithms.averaging.qfedavg import received_loss
from graphfed.algorithms.fairgfl.encoder import encoder_from, encoder_spec
from graphfed.algorithms.fairgfl.options import (
    ENCODINGS,
    EPS_LINK,
    EPS_NODE,
    LINKS,
    LOSS,
    FairGFLOptions,
)
from graphfed.mechanisms import privacy
from graphfed.messages import Message, check_message
from graphfed.protocol import ClientContext
from graphfed.tensors import move_tensors
from graphfed.training.step import LocalStep

ENCODER_STATE = "fairgfl_encoder"  # the encoder the server sent, kept in the client's state
CACHE_STATE = "fairgfl_responses"  # the permanent randomised responses


class FairGFLClient(FedAvgClient):
    options: FairGFLOptions

    def answer_setup(self, message: Message, ctx: ClientContext) -> Message:
        """Keep the public encoder, checked against the shapes this run's options give it;
        nothing goes back (the server knows n_i from the partition, ``Setup.client_sizes``)."""
        check_message(message, encoder_spec(ctx.node_data().graph.x.shape[1], self.options),
                      sender="the server's encoder")
        ctx.state[ENCODER_STATE] = dict(message.tensors)
        return Message()

    def local_step(self, message: Message, ctx: ClientContext) -> LocalStep | None:
        return None  # the reply carries more than a trained model: no batched step

    def fit(self, message: Message, ctx: ClientContext) -> Message:
        params = {k: message.tensors[k] for k in self.setup.initial_params}
        loss = received_loss(params, ctx)
        trained, stats = self.local_train(params, ctx)
        encodings, links = self.sanitised_batch(ctx)
        o = self.options
        spent = privacy.privacy_spent(ctx.state[CACHE_STATE], o.eps_v, o.eps_e, o.permanent)
        return self.reply({**trained, ENCODINGS: encodings, LINKS: links}, ctx, stats,
                          **{LOSS: loss, EPS_NODE: spent["eps_node"],
                             EPS_LINK: spent["eps_link"]})

    @torch.no_grad()
    def sanitised_batch(self, ctx: ClientContext) -> tuple[Tensor, Tensor]:
        """Step 1 of Algorithm 1: b_i uniformly sampled nodes, their privatised encodings and
        the randomised-response links among them (both through the permanent cache),
        sparsified by the distances of the privatised encodings, the b_i x b_i bits packed."""
        o = self.options
        graph = ctx.node_data().graph
        nodes = torch.randperm(graph.num_nodes)[:min(o.batch_nodes, graph.num_nodes)]
        generator = torch.Generator().manual_seed(int(torch.randint(2**62, ())))
        # the cache lives on the CPU beside the drawn node ids; a resumed run's client state
        # arrives on the trainer's device
        cache = move_tensors(ctx.state.get(CACHE_STATE) or privacy.empty_rr_cache(o.code_dim),
                             "cpu")

        def privatise(codes: Tensor) -> Tensor:
            return privacy.privatise_features(codes, o.eps_v, generator, o.feature_mechanism,
                                              levels=o.levels)

        encodings, cache = privacy.release_features(cache, nodes, self._encodings(ctx)[nodes],
                                                    privatise, o.permanent)
        adjacency = _adjacency(graph.edge_index, nodes, graph.num_nodes)
        links, cache = privacy.release_links(cache, nodes, adjacency, o.eps_e, generator,
                                             o.permanent)
        if o.sparsify:
            links = privacy.sparsify_links(links, encodings, o.eps_e)
        ctx.state[CACHE_STATE] = cache
        return encodings.float(), privacy.pack_bits(links)

    def _encodings(self, ctx: ClientContext) -> Tensor:
        """Enc(x) of every node of the client, computed once per process (``ctx.cache``)."""
        if "fairgfl_codes" not in ctx.cache:
            x = ctx.node_data().graph.x.float()
            encoder = encoder_from(ctx.state[ENCODER_STATE], x.shape[1], self.options)
            with torch.no_grad():
                ctx.cache["fairgfl_codes"] = encoder.encode(x)
        return ctx.cache["fairgfl_codes"]


def _adjacency(edge_index: Tensor, nodes: Tensor, num_nodes: int) -> Tensor:
    """The b x b adjacency among ``nodes`` (in their order) of the client's subgraph."""
    position = torch.full((num_nodes,), -1)
    position[nodes] = torch.arange(len(nodes))
    src, dst = position[edge_index[0]], position[edge_index[1]]
    inside = (src >= 0) & (dst >= 0)
    adjacency = torch.zeros(len(nodes), len(nodes), dtype=torch.bool)
    adjacency[src[inside], dst[inside]] = True
    return adjacency | adjacency.T
