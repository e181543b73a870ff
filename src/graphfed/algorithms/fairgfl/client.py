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
from graphfed.algorithms.fairgfl.encoder import encoder_from
from graphfed.algorithms.fairgfl.options import ENCODINGS, LINKS, LOSS, FairGFLOptions
from graphfed.mechanisms import privacy
from graphfed.protocol import ClientContext, Message

ENCODER_STATE = "fairgfl_encoder"  # the encoder the server sent, kept in the client's state
CACHE_STATE = "fairgfl_responses"  # the permanent randomised responses


class FairGFLClient(FedAvgClient):
    options: FairGFLOptions

    def answer_setup(self, message, ctx):
        """Keep the public encoder; nothing goes back (the server knows n_i from the
        partition, ``Setup.client_sizes``)."""
        ctx.state[ENCODER_STATE] = dict(message.tensors)
        return Message()

    def local_step(self, message, ctx):
        return None  # the reply carries more than a trained model: no batched step

    def fit(self, message, ctx: ClientContext):
        params = {k: message.tensors[k] for k in self.setup.initial_params}
        loss = ctx.trainer.evaluate(params, ctx.data, ("train",))["train"]["loss"]
        trained, stats = self.local_train(params, ctx)
        encodings, links = self.sanitised_batch(ctx)
        return self.reply({**trained, ENCODINGS: encodings, LINKS: links}, ctx, stats,
                          **{LOSS: float(loss)})

    @torch.no_grad()
    def sanitised_batch(self, ctx: ClientContext) -> tuple[Tensor, Tensor]:
        """Step 1 of Algorithm 1: b_i uniformly sampled nodes, their (cached) privatised
        encodings and the (cached) randomised-response links among them, sparsified by the
        distances of the privatised encodings and packed b_i x b_i bits into bytes."""
        o = self.options
        graph = ctx.data.graph
        n = graph.num_nodes
        nodes = torch.randperm(n)[:min(o.batch_nodes, n)].sort().values
        codes = self._encodings(ctx)[nodes]
        cache = ctx.state.setdefault(CACHE_STATE, privacy.empty_cache())
        private = privacy.privatise_nodes(cache, nodes, codes, o.eps_v, o.levels,
                                          o.feature_mechanism, o.permanent)
        bits = privacy.adjacency(graph.edge_index, nodes)
        noisy = privacy.privatise_pairs(cache, nodes, bits, o.eps_e, o.permanent)
        if o.sparsify:
            noisy = privacy.sparsify(noisy, private, o.eps_e)
        return private.float(), privacy.pack_bits(noisy)

    def _encodings(self, ctx: ClientContext) -> Tensor:
        """Enc(x) of every node of the client, computed once per process (``ctx.cache``)."""
        if "fairgfl_codes" not in ctx.cache:
            x = ctx.data.graph.x.float()
            encoder = encoder_from(ctx.state[ENCODER_STATE], x.shape[1], self.options)
            with torch.no_grad():
                ctx.cache["fairgfl_codes"] = encoder.encode(x)
        return ctx.cache["fairgfl_codes"]
