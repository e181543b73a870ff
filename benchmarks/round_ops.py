"""Count the tensor operations a federated round dispatches against a centralized epoch.

On a GPU, a round of small clients is bound by the host, not the arithmetic: every operation
costs several microseconds to dispatch and launch, whatever its size. So the ratio of
operations a round dispatches to those of a centralized epoch over the same data (the
practical lower bound) predicts the GPU's round/epoch time ratio, and it can be measured on a
machine without one. Checked against the H200 figures of 2026-11-25 (commit 4498e44, batched
engine): Cora 5.1 counted against 5.9 timed, PROTEINS 2.5 against 2.4; sequential 13.2 against
18.2 and 4.2 against 3.4; the 100-client CSBM, whose server-side work runs on the CPU, 25
against 13. A rough guide, then, not a substitute for timing on a GPU.

    GRAPHFED_DATA=../shared/datasets python benchmarks/round_ops.py [--engine batched]
        [--plan cpu|accelerator] [--cases NAME,...] [--set KEY=VALUE ...]

``--plan accelerator`` lays the batched engine's clients out as on a GPU (``training.plans``:
padded, one group, whole dropout masks) while computing on the CPU. Every operation the
dispatcher sees counts, views included: each costs the host its dispatch.
"""

from __future__ import annotations

import argparse
import collections

import torch
from round_time import CASES, union_client
from torch.utils._python_dispatch import TorchDispatchMode

from graphfed.config import load_config
from graphfed.experiment import build_federation
from graphfed.training import plans, prepare_client


class OperationCount(TorchDispatchMode):
    """Counts the ATen operations dispatched while it is active, by name."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def counted(fn) -> OperationCount:
    with OperationCount() as count:
        fn()
    return count


def bench(name: str, overrides: list[str], engine: str, plan: str, extra: list[str]) -> str:
    config = load_config(None, [*overrides, *extra, "checkpoint_every=0", "device=cpu",
                                f"engine={engine}"])
    fed = build_federation(config, seed=0)
    central = prepare_client(union_client(fed.data.clients), fed.trainer.model,
                             torch.device("cpu"))
    params = fed.trainer.initial_params()

    def epoch():
        fed.trainer.train(params, central, 1, config.batch_size)

    for rnd in (1, 2):  # warm-up: caches built once per run are not a round's work
        fed.fit_round(rnd)
        epoch()
        fed.evaluate(rnd)
    round_ops, epoch_ops = counted(lambda: fed.fit_round(3)).total, counted(epoch).total
    eval_ops = counted(lambda: fed.evaluate(3)).total
    return (f"RESULT case={name} engine={engine} plan={plan} round_ops={round_ops} "
            f"epoch_ops={epoch_ops} "
            f"ratio={round_ops / epoch_ops:.2f} eval_ops={eval_ops}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=("sequential", "batched"), default="batched")
    parser.add_argument("--plan", choices=("cpu", "accelerator"), default="cpu",
                        help="the batched engine's layout: this CPU's, or a GPU's")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated case names")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a config override added to every case (repeatable)")
    args = parser.parse_args()
    if args.plan == "accelerator":
        plans.for_device = lambda device: plans.ACCELERATOR_PLAN
    print(f"torch {torch.__version__}, plan {args.plan}")
    for name in args.cases.split(","):
        print(bench(name, CASES[name], args.engine, args.plan, args.set), flush=True)


if __name__ == "__main__":
    main()
