"""Count the tensor operations a federated round dispatches against a centralized epoch.

On a GPU, a round of small clients is bound by the host, not the arithmetic: every operation
costs several microseconds to dispatch and launch, whatever its size. So the ratio of
operations a round dispatches to those of a centralized epoch over the same data (the
practical lower bound) predicts the GPU's round/epoch time ratio, and it can be measured on a
machine without one: a rough guide, checked against the H200's timings in
``docs/performance.md``, not a substitute for timing on a GPU.

    GRAPHFED_DATA=../shared/datasets python benchmarks/round_ops.py [--engine batched]
        [--plan cpu|accelerator] [--cases NAME,...] [--set KEY=VALUE ...] [--phases]
        [--cuda-graphs [--list-recorded]]

``--plan accelerator`` lays the batched engine's clients out as on a GPU (``training.plans``:
padded, one group, whole dropout masks) while computing on the CPU. Every operation the
dispatcher sees counts, views included: each costs the host its dispatch. To count older code,
copy this file into its checkout's ``benchmarks/`` and run it there with ``PYTHONPATH=src``.
``--cuda-graphs`` sets ``cuda_graphs=true`` and counts a replayed recording as the one launch
it is on a GPU (on the CPU each replay runs eagerly, checked, uncounted: ``training.replay``);
the line then adds what the recording holds (``recorded_ops``, ``recorded_views`` of them);
``--list-recorded`` also prints each kind of operation it holds, views apart, with its count
(``RECORDED case=... count op``): what a CUDA capture must accept.
"""

from __future__ import annotations

import argparse
import collections
import traceback

import torch
from round_time import CASES, case_names, central_epoch
from torch.utils._python_dispatch import TorchDispatchMode

from graphfed.config import load_config
from graphfed.experiment import build_federation

PHASES = ("forward", "backward", "optimizer", "masks", "engine", "summary", "boundary")


_COUNTING: list[OperationCount] = []  # the active counts, innermost last
_REPLAYING: list[str | None] = [None]  # "emulation" (uncounted) or "recorded" (tallied apart)


class OperationCount(TorchDispatchMode):
    """Counts the ATen operations dispatched while it is active, by name, and with
    ``phases`` by the part of the round that dispatched them (``phase_of``)."""

    def __init__(self, phases: bool = False) -> None:
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()
        self.phases: collections.Counter[str] | None = collections.Counter() if phases else None
        self.recorded: collections.Counter[str] = collections.Counter()
        self.recorded_kinds: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if _REPLAYING[0] is not None:  # a recording replayed: one launch (count_replays)
            if _REPLAYING[0] == "recorded":  # what the recording holds, views apart
                self.recorded["view" if func.is_view else "other"] += 1
                if not func.is_view:
                    self.recorded_kinds[str(func)] += 1
            return func(*args, **(kwargs or {}))
        self.counts[str(func.overloadpacket)] += 1
        if self.phases is not None:
            self.phases[phase_of(traceback.extract_stack())] += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def phase_of(stack: traceback.StackSummary) -> str:
    """The part of a round (or epoch, or evaluation) whose code dispatched an operation, by its
    call stack: dropout masks, the optimizer, a backward pass, local training's forward pass,
    loss and batches, the batched engine's set-up and statistics around them, an evaluation's
    summary across clients, and else the boundary and server (messages, checks, metrics,
    aggregation)."""
    files, names = [f.filename for f in stack], [f.name for f in stack]
    if "summarise" in names:  # an evaluation's statistics across clients, on the host
        return "summary"
    if any(f.endswith("models/dropout.py") for f in files):
        return "masks"
    if any(f.endswith(("stacked_optim.py", "optim/adam.py", "optim/sgd.py", "optimizer.py"))
           for f in files):
        return "optimizer"
    if "backward" in names:
        return "backward"
    if any(n in names for n in ("forward", "stacked_forward", "_node_losses", "_graph_losses",
                                "_joined_backward")) or any(
            f.endswith("training/trainer.py") and f_name == "train"
            for f, f_name in zip(files, names, strict=True)):
        return "forward"
    if "train_together" in names:
        return "engine"
    return "boundary"


def counted(fn, phases: bool = False) -> OperationCount:
    with OperationCount(phases) as count:
        _COUNTING.append(count)
        try:
            fn()
        finally:
            _COUNTING.pop()
    return count


def count_replays() -> None:
    """Emulate recordings on the CPU and count each replay as one operation, of the engine;
    the operations the recording holds are tallied apart (``recorded``), views (which launch
    nothing) and others, the emulation's copies of its results left out."""
    from graphfed.training import replay

    replay.CHECK_ON_CPU = True
    eager = replay.Replay._replay

    def replayed(self):
        if _COUNTING:
            _COUNTING[-1].counts["cuda graph replay"] += 1
            if _COUNTING[-1].phases is not None:
                _COUNTING[-1].phases["engine"] += 1
        run = self.run

        def recorded():
            _REPLAYING[0] = "recorded"
            try:
                return run()
            finally:
                _REPLAYING[0] = "emulation"

        self.run, _REPLAYING[0] = recorded, "emulation"
        try:
            return eager(self)
        finally:
            self.run, _REPLAYING[0] = run, None

    replay.Replay._replay = replayed


def bench(name: str, overrides: list[str], engine: str, plan: str, extra: list[str],
          phases: bool = False, list_recorded: bool = False) -> str:
    config = load_config(None, [*overrides, *extra, "checkpoint_every=0", "device=cpu",
                                f"engine={engine}"])
    fed = build_federation(config, seed=0)
    epoch = central_epoch(fed)
    for rnd in (1, 2):  # warm-up: caches built once per run are not a round's work
        fed.fit_round(rnd)
        epoch()
        fed.evaluate(rnd)
    rnd, ep = counted(lambda: fed.fit_round(3), phases), counted(epoch, phases)
    evaluation = counted(lambda: fed.evaluate(3), phases)
    eval_ops = evaluation.total
    line = (f"RESULT case={name} engine={engine} plan={plan} round_ops={rnd.total} "
            f"epoch_ops={ep.total} ratio={rnd.total / ep.total:.2f} eval_ops={eval_ops}")
    if rnd.recorded:
        line += (f" recorded_ops={sum(rnd.recorded.values())} "
                 f"recorded_views={rnd.recorded['view']}")
        if list_recorded:
            line += "".join(f"\nRECORDED case={name} {count} {op}"
                            for op, count in sorted(rnd.recorded_kinds.items()))
    if phases:
        line += "".join(f"\nPHASES case={name} {side} " + " ".join(
            f"{p}={count.phases[p]}" for p in PHASES) for side, count in (("round", rnd),
                                                                          ("eval", evaluation),
                                                                          ("epoch", ep)))
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=("sequential", "batched"), default="batched")
    parser.add_argument("--plan", choices=("cpu", "accelerator"), default="cpu",
                        help="the batched engine's layout: this CPU's, or a GPU's")
    parser.add_argument("--cases", type=case_names(CASES), default=list(CASES),
                        help="comma-separated case names")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a config override added to every case (repeatable)")
    parser.add_argument("--cuda-graphs", action="store_true",
                        help="record full-batch training and count each replay as one launch")
    parser.add_argument("--list-recorded", action="store_true",
                        help="with --cuda-graphs, list the kinds of operation a recording holds")
    parser.add_argument("--phases", action="store_true",
                        help="also count by the part of the round, evaluation and epoch "
                        "that dispatched them (slow)")
    args = parser.parse_args()
    if args.plan == "accelerator":  # imported here: code before the plans counts too
        from graphfed.training import plans

        plans.for_device = lambda device: plans.ACCELERATOR_PLAN
    if args.cuda_graphs:
        count_replays()
        args.set.append("cuda_graphs=true")
    print(f"torch {torch.__version__}, plan {args.plan}, cuda graphs {args.cuda_graphs}")
    for name in args.cases:
        print(bench(name, CASES[name], args.engine, args.plan, args.set, args.phases,
                    args.list_recorded), flush=True)


if __name__ == "__main__":
    main()
