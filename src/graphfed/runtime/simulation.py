"""In-process simulation: every client lives in this process; messages are copied onto the
receiver's device at the boundary, so no tensor is shared between the server and a client.

With ``batched`` the sampled clients whose fit is a standard local step are trained together
(``training.batched``), and the clients whose evaluation scores the parameters they deploy are
evaluated together (``training.batched_eval``); each still gets its own message and answers
with its own reply, so the boundary, its checks and the byte counts are those of the
sequential path."""

from __future__ import annotations

import importlib
from types import ModuleType

from graphfed.errors import GraphfedError
from graphfed.messages import Message
from graphfed.protocol import SERVER_DEVICE, Client, ClientContext, Server, evaluates_params
from graphfed.runtime.base import Runtime, answer_on_client, log, move_messages
from graphfed.seeding import call_seed, preserved_rngs, reseed, seed_all
from graphfed.tensors import move_tensors
from graphfed.training.batched import ClientJob, batch_refusal, train_together
from graphfed.training.batched_eval import EvalJob, eval_refusal, evaluate_together


class SimulationRuntime(Runtime):
    def __init__(self, server: Server, client: Client, contexts: list[ClientContext],
                 client_fraction: float, seed: int, batched: bool = False,
                 record: bool = False):
        super().__init__(server, len(contexts), client_fraction, seed)
        self.client = client
        self.contexts = contexts
        self.batched = batched
        self.record = record  # batched training replays its recordings (CUDA graphs)
        self._layouts: dict = {}  # the batched engine's padded data, one per size group
        self._eval_layouts: dict = {}  # the same for the clients evaluated together

    def _ask(self, rnd, phase, messages, answer):
        """Each client's answer under its own streams (``seeding.reseed``), the caller's
        streams kept once around them all: what a ``seeded_call`` per client gives."""
        replies, failed = {}, {}
        if not messages:  # keeping the streams costs NumPy's state twice, about 50 us
            return replies, failed
        with preserved_rngs():
            for c, m in messages.items():
                reseed(self.seed, rnd, c, phase)
                try:
                    replies[c] = answer_on_client(answer, m, self.contexts[c])
                except Exception as e:  # a failing client is dropped, as on a network
                    failed[c] = _dropped(rnd, c, e)
        return replies, failed

    def deliver_fit(self, rnd, messages):
        if not self.batched:
            return self._ask(rnd, "fit", messages, self.client.fit)
        together, alone = self._steps(rnd, messages)
        replies, failed = self._fit_together(rnd, together)
        more, more_failed = self._ask(rnd, "fit", alone, self.client.fit)
        return {**replies, **more}, {**failed, **more_failed}

    def _steps(self, rnd, messages):
        """Split the fit messages into standard local steps that can train together (each with
        its message on the client's device, one copy per distinct message) and the rest,
        which fit one by one."""
        together, alone, on_device = {}, {}, {}
        trainer = None  # one batch trains one model object: the clients sharing the first's
        for c, m in messages.items():
            ctx = self.contexts[c]
            copy = _on_device(m, ctx, on_device)
            try:
                step = self.client.local_step(copy, ctx)
            except Exception:  # fitting alone, it fails there again and is dropped with why
                step = None
            trainer = trainer or (ctx.trainer if step is not None else None)
            data = None if step is None else step.trains_on(ctx.data)
            if (step is None or ctx.trainer is not trainer
                    or batch_refusal(ctx.trainer, data) is not None):
                alone[c] = m
            else:
                seed = call_seed(self.seed, rnd, c, "fit")
                together[c] = (copy, ClientJob(step, data, seed))
        return together, alone

    def _fit_together(self, rnd, together):
        replies, failed = {}, {}
        if not together:
            return replies, failed
        clients = sorted(together)
        setup = self.client.setup
        try:
            results = train_together(self.contexts[clients[0]].trainer,
                                     [together[c][1] for c in clients], setup.local_epochs,
                                     setup.batch_size, self._layouts, record=self.record)
        except Exception as e:  # the batch fails as one: every client in it is dropped
            return replies, {c: _dropped(rnd, c, e) for c in clients}
        with preserved_rngs():
            for c, (params, stats) in zip(clients, results, strict=True):
                seed_all(together[c][1].seed)  # the client's own streams, as its fit's
                try:
                    replies[c] = self.client.step_done(together[c][0], self.contexts[c],
                                                       params, stats)
                except Exception as e:
                    failed[c] = _dropped(rnd, c, e)
        return move_messages(replies, SERVER_DEVICE), failed

    def deliver_secure_fit(self, rnd, messages, like, weights, plan):
        """Every client fits as without secure aggregation; their updates are then quantised
        as Flower's SecAgg+ mod quantises them and summed without the masks, which cancel
        exactly: the numbers of a Flower run of the same seed."""
        replies, failed = self.deliver_fit(rnd, messages)
        secagg = secagg_module()
        shapes = [*(tuple(t.shape) for t in like.values()), (1,)]
        return secagg.in_process_sum(
            rnd, self.seed, messages, replies, failed,
            lambda c, reply: secagg.update_arrays(messages[c], reply), shapes, weights,
            plan).means(plan)

    def deliver_secure_sum(self, rnd, phase, messages, shapes, plan):
        """Every client answers as without secure aggregation; the answers are quantised as
        Flower's mod quantises them (weight 1, same seeds) and summed without the masks."""
        with_loss = phase == "fit"
        if with_loss:
            replies, failed = self.deliver_fit(rnd, messages)
        else:
            replies, failed = self._ask(rnd, phase, messages, self.client.answer_setup)
        secagg = secagg_module()
        return secagg.in_process_sum(
            rnd, self.seed, messages, replies, failed,
            lambda c, reply: secagg.summand_arrays(reply, with_loss),
            [*shapes, *[(1,)] * with_loss], dict.fromkeys(messages, 1), plan
        ).sums(plan, with_loss)

    def deliver_setup(self, messages):
        return self._ask(0, "setup", messages, self.client.answer_setup)

    def deliver_evaluate(self, rnd, messages):
        together, alone = self._evaluations(messages) if self.batched else ({}, messages)
        results = {}
        if together:
            clients = sorted(together)
            scored = evaluate_together(self.contexts[clients[0]].trainer,
                                       [together[c] for c in clients], self._eval_layouts)
            results = dict(zip(clients, scored, strict=True))
        with preserved_rngs():
            for c, m in alone.items():
                reseed(self.seed, rnd, c, "evaluate")
                results[c] = answer_on_client(self.client.evaluate, m, self.contexts[c])
        return results

    def _evaluations(self, messages):
        """Split the evaluate messages into clients scored together (each with the parameters
        it deploys) and the rest, evaluated one by one. Evaluating draws nothing random, so
        no client's stream is skipped."""
        if not evaluates_params(self.client):
            return {}, messages
        together, alone, on_device = {}, {}, {}
        trainer = None  # one pass runs one model object: the clients sharing the first's
        for c, m in messages.items():
            ctx = self.contexts[c]
            trainer = trainer or ctx.trainer
            if ctx.trainer is not trainer or eval_refusal(ctx.trainer, ctx.data) is not None:
                alone[c] = m
                continue
            params = self.client.scored_params(_on_device(m, ctx, on_device), ctx)
            together[c] = EvalJob(params, ctx.data, ctx.global_test)
        return together, alone

    def state_dict(self):
        return {**super().state_dict(), "clients": [ctx.state for ctx in self.contexts]}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        for ctx, client_state in zip(self.contexts, state["clients"], strict=True):
            ctx.state = move_tensors(client_state, ctx.trainer.device)


def secagg_module() -> ModuleType:
    """``runtime.secagg``, whose protocol is Flower's SecAgg+ (the ``graphfed[flower]`` extra),
    or a one-line error saying how to install it."""
    try:
        return importlib.import_module("graphfed.runtime.secagg")
    except ImportError as e:
        raise GraphfedError(f"secure_aggregation runs Flower's SecAgg+, which cannot be "
                            f"imported ({e}): pip install 'graphfed[flower]'") from None


def _on_device(message: Message, ctx: ClientContext, copies: dict) -> Message:
    """``message`` on the client's device: one copy per distinct message and device, which
    the clients it was sent to share (they only read it)."""
    key = (id(message), ctx.trainer.device)
    if key not in copies:
        copies[key] = message.to(ctx.trainer.device)
    return copies[key]


def _dropped(rnd: int, client: int, error: Exception) -> str:
    """Log a client's failure; the reason its round record keeps."""
    log.warning("round %d: client %d failed: %r", rnd, client, error)
    return f"{type(error).__name__}: {error}"
