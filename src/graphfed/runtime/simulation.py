"""In-process simulation: every client lives in this process; messages are copied onto the
receiver's device at the boundary, so no tensor is shared between the server and a client."""

from __future__ import annotations

from graphfed.protocol import Client, ClientContext, Server
from graphfed.runtime.base import Runtime, answer_on_client, log
from graphfed.seeding import seeded_call
from graphfed.tensors import move_tensors


class SimulationRuntime(Runtime):
    def __init__(self, server: Server, client: Client, contexts: list[ClientContext],
                 client_fraction: float, seed: int):
        super().__init__(server, len(contexts), client_fraction, seed)
        self.client = client
        self.contexts = contexts

    def _call(self, rnd, phase, client, message, answer):
        with seeded_call(self.seed, rnd, client, phase):
            return answer_on_client(answer, message, self.contexts[client])

    def _ask(self, rnd, phase, messages, answer):
        replies, failed = {}, {}
        for c, m in messages.items():
            try:
                replies[c] = self._call(rnd, phase, c, m, answer)
            except Exception as e:  # a failing client is dropped for the round, as on a network
                log.warning("round %d: client %d failed: %r", rnd, c, e)
                failed[c] = f"{type(e).__name__}: {e}"
        return replies, failed

    def deliver_fit(self, rnd, messages):
        return self._ask(rnd, "fit", messages, self.client.fit)

    def deliver_setup(self, messages):
        return self._ask(0, "setup", messages, self.client.answer_setup)

    def deliver_evaluate(self, rnd, messages):
        return {c: self._call(rnd, "evaluate", c, m, self.client.evaluate)
                for c, m in messages.items()}

    def state_dict(self):
        return {**super().state_dict(), "clients": [ctx.state for ctx in self.contexts]}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        for ctx, client_state in zip(self.contexts, state["clients"], strict=True):
            ctx.state = move_tensors(client_state, ctx.trainer.device)
