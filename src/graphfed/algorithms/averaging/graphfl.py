"""GraphFL (Wang, Li, Li, Chen, ICDM 2022, arXiv 2012.04187) as a FedEgo baseline: federated
meta-learning (MAML) for semi-supervised node classification.

Each round every client runs ``local_epochs`` meta-iterations from the global model θ. One
meta-iteration samples disjoint support and query node sets from its training nodes (80 each in
FedEgo's code, 100 in the paper), takes ``inner_steps`` plain gradient steps on the support loss
(θ' = θ - α ∇L_S(θ)), and computes the query loss at θ'; its gradient with respect to θ (through
the inner steps, or at θ' with ``first_order``, as FedEgo's code does) is the meta-gradient, applied
by the run's optimizer. The client returns its meta-updated model and the server averages (FedAvg).
Before every evaluation a client fine-tunes the global model on its training nodes (its labelled
"support" for the downstream task) for ``finetune_epochs`` epochs with the run's optimizer, and
tests that model; the fine-tuned model is not kept.

Simplified versus the paper and FedEgo's code: the inner loop is plain gradient descent with its
own step size α (FedEgo's code runs Adam epochs on the support set, takes the last query batch's
gradient and lets the server subtract the averaged gradient with step 1, then runs a second,
FedAvg fine-tuning stage each round); GraphFL's self-training on unlabelled nodes is not included.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor

from graphfed.algorithms.averaging.fedavg import FedAvgClient, FedAvgOptions, FedAvgServer
from graphfed.algorithms.registry import Algorithm, register
from graphfed.messages import TRAIN_LOSS, Message
from graphfed.protocol import ClientContext
from graphfed.tensors import Params
from graphfed.training import Trainer
from graphfed.training.batches import PreparedNodeClient
from graphfed.training.trainer import SplitMetrics


class GraphFLOptions(FedAvgOptions):
    support_size: int = Field(80, ge=1, description="support nodes per meta-iteration "
                              "(FedEgo's code: 80; the GraphFL paper: 100)")
    query_size: int = Field(80, ge=1, description="query nodes per meta-iteration (80; paper 100)")
    inner_lr: float = Field(0.01, gt=0.0, description="step size α of the inner (support) "
                            "gradient steps (our choice; neither paper nor code fixes it)")
    inner_steps: int = Field(1, ge=1, description="inner gradient steps on the support set")
    first_order: bool = Field(True, description="take the query gradient at the adapted weights "
                              "(first-order MAML, as FedEgo's code); false: through the inner "
                              "steps")
    finetune_epochs: int = Field(5, ge=0, description="epochs of fine-tuning on the client's "
                                 "training nodes before each evaluation (FedEgo: 5 local epochs)")


def support_query(index: Tensor, support: int, query: int) -> tuple[Tensor, Tensor]:
    """Disjoint random support and query subsets of ``index``; when it has fewer than
    ``support + query`` nodes both shrink in proportion."""
    order = index[torch.randperm(len(index), device=index.device)]
    if len(order) < support + query:
        support = max(1, len(order) * support // (support + query))
        query = len(order) - support
    return order[:support], order[support:support + query]


def _loss(trainer: Trainer, params: Params, data: PreparedNodeClient, nodes: Tensor) -> Tensor:
    batch = data.batch_of(nodes)
    return F.cross_entropy(trainer.forward(params, batch), batch.targets)


def meta_gradient(trainer: Trainer, params: Params, data: PreparedNodeClient, support: Tensor,
                  query: Tensor, inner_lr: float,
                  inner_steps: int = 1, first_order: bool = True) -> tuple[Params, float]:
    """∇_θ L_Q(θ') with θ' = θ after ``inner_steps`` gradient steps on L_S (first order: the
    gradient at θ'), and the query loss."""
    theta = {k: v.detach().requires_grad_(True) for k, v in params.items()}
    fast = theta
    for _ in range(inner_steps):
        grads = torch.autograd.grad(_loss(trainer, fast, data, support), list(fast.values()),
                                    create_graph=not first_order, allow_unused=True)
        fast = {k: v if g is None else v - inner_lr * g
                for (k, v), g in zip(fast.items(), grads, strict=True)}
        if first_order:
            fast = {k: v.detach().requires_grad_(True) for k, v in fast.items()}
    query_loss = _loss(trainer, fast, data, query)
    wrt = fast if first_order else theta
    grads = torch.autograd.grad(query_loss, list(wrt.values()), allow_unused=True)
    meta = {k: torch.zeros_like(v) if g is None else g.detach()
            for (k, v), g in zip(wrt.items(), grads, strict=True)}
    return meta, float(query_loss.detach())


class GraphFLClient(FedAvgClient):
    options: GraphFLOptions
    def fit(self, message: Message, ctx: ClientContext) -> Message:
        o = self.options
        live = {k: v.detach().clone().requires_grad_(True) for k, v in message.tensors.items()}
        optimizer = ctx.trainer.make_optimizer(list(live.values()))
        ctx.trainer.model.train()
        losses = []
        for _ in range(self.setup.local_epochs):
            data = ctx.node_data()
            support, query = support_query(data.index["train"], o.support_size, o.query_size)
            meta, loss = meta_gradient(ctx.trainer, live, data, support, query, o.inner_lr,
                                       o.inner_steps, o.first_order)
            optimizer.zero_grad(set_to_none=True)
            for k, v in live.items():
                v.grad = meta[k]
            optimizer.step()
            losses.append(loss)
        params = {k: v.detach() for k, v in live.items()}
        return self.reply(params, ctx, None, **{TRAIN_LOSS: sum(losses) / len(losses)})

    def evaluate(self, message: Message, ctx: ClientContext) -> SplitMetrics:
        params = message.tensors
        if self.options.finetune_epochs:
            params, _ = ctx.trainer.train(params, ctx.data, self.options.finetune_epochs,
                                          self.setup.batch_size)
        return self.evaluate_params(params, ctx)


GRAPHFL = register(Algorithm(
    "graphfl", FedAvgServer, GraphFLClient, GraphFLOptions,
    family="averaging",
    paper="Wang et al., ICDM 2022 (GraphFL)",
    levels=("node",),
    description="federated MAML: support/query meta-steps, FedAvg, fine-tuning on the training "
                "nodes before evaluation"))
