"""FairGFL's matching under LDP: how often two privatisations of the same node fall under the
calibrated threshold tau (recall) and how often two different nodes do (the false-match rate
per pair), for each feature mechanism and budget. The encoder is FairGFL's, trained on the
partition's public pool; tau is calibrated there as the server does; the pairs are the first
``--nodes`` client nodes. Prints one table row per (mechanism, eps_v).

    GRAPHFED_DATA=../shared/datasets python benchmarks/fairgfl_matching.py \
        [--dataset Cora] [--code-dim 100] [--eps 4,8,16] [--nodes 500] [--quantiles 0.95,0.5]
        [--seed 0]

``--seed`` draws another partition and encoder training: the false-match rate at a fixed
quantile depends on how far the trained encoder spreads the nodes.
"""

from __future__ import annotations

import argparse

import torch

from graphfed.algorithms.fairgfl.encoder import train_encoder
from graphfed.algorithms.fairgfl.options import FairGFLOptions
from graphfed.build import federated_data
from graphfed.config import load_config
from graphfed.mechanisms import privacy
from graphfed.mechanisms.overlap import calibrate_threshold


def releases(eps: float, mechanism: str):
    """M_v at ``eps``, every call drawing on from one generator seeded 1."""
    generator = torch.Generator().manual_seed(1)
    return lambda x: privacy.privatise_features(x, eps, generator, mechanism)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="Cora")
    parser.add_argument("--code-dim", type=int, default=100)
    parser.add_argument("--eps", default="4,8,16")
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--mechanisms", default="grr_quantized,exponential")
    parser.add_argument("--quantiles", default="0.95",
                        help="tau_quantile values: the share of true matches tau keeps")
    parser.add_argument("--seed", type=int, default=0, help="partition and encoder seed")
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    config = load_config(None, ["algorithm=fairgfl", f"dataset={args.dataset}",
                                "partition=fairgfl_overlap", "num_clients=40"])
    data = federated_data(config, args.seed)
    public = data.public.graph.x.float()
    clients = torch.cat([c.graph.x for c in data.clients]).float()[:args.nodes]
    encoder = train_encoder(public, FairGFLOptions(code_dim=args.code_dim))
    with torch.no_grad():
        public_codes, codes = encoder.encode(public), encoder.encode(clients)
    different = ~torch.eye(len(codes), dtype=torch.bool)
    print("| mechanism | eps_v | tau_quantile | tau | recall | false-match rate per pair |")
    print("|---|---|---|---|---|---|")
    for mechanism in args.mechanisms.split(","):
        for eps in (float(e) for e in args.eps.split(",")):
            for quantile in (float(q) for q in args.quantiles.split(",")):
                privatise = releases(eps, mechanism)
                tau = calibrate_threshold(public_codes, privatise, quantile)
                first, second = privatise(codes), privatise(codes)
                recall = ((first - second).norm(dim=1) < tau).double().mean().item()
                false = (torch.cdist(first, second)[different] < tau).double().mean().item()
                print(f"| {mechanism} | {eps:g} | {quantile:g} | {tau:.3f} | {recall:.3f} | "
                      f"{false:.4f} |")


if __name__ == "__main__":
    main()
