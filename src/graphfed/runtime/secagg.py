"""SecAgg+ (Bell et al., CCS 2020) for the fit phase, on Flower's own implementation.

How graphfed uses it: every client runs Flower's SecAgg+ client mod (``secaggplus_mod``)
unchanged, and graphfed's ``FlowerRuntime`` speaks the four stages that mod understands: setup
(each client makes two key pairs), share keys (each Shamir-shares its mask seed and first
private key among its neighbours, encrypted to each), collect masked vectors (each trains,
quantises its weighted update and adds its private mask and the pairwise masks it agreed with
every neighbour) and unmask (the survivors send the shares that remove the masks). Flower's
server side, ``SecAggPlusWorkflow``, could not be used: it is driven by a legacy ``Strategy``
(its sampling, ``ClientProxy`` objects, ``FitIns``/``FitRes``), which graphfed's own run loop over
the ``Grid`` does not have, and it halts a round when a client drops out before the masked
vectors (it asks for shares nobody holds). What the server does here is routing (public keys,
encrypted shares) and unmasking built only from Flower's primitives: Shamir's
``combine_shares``, the ECDH key agreement ``generate_shared_key``, the mask generator
``pseudo_rand_gen``, its modular arithmetic and ``dequantize``. No cryptography is graphfed's.

What a client masks (``update_arrays``): its update, the reply minus the model it was sent, per
tensor, and its training loss; the mod multiplies them by the client's weight over the round's
largest (the server sends each client its weight: the partition's training count, or 1) and
prepends the quantised weight, so the unmasked sums give the weighted mean:
sum(w_i * update_i) / sum(w_i). Quantisation rounds stochastically with NumPy's global
generator, which the ClientApp seeds per (run seed, round, client) right before the mod
quantises (``quantisation_seed``); ``in_process_sum`` quantises with the same seed and sums
without masks (they cancel exactly modulo 2**modulus_bits), so every runtime gives the same
numbers.

Secure sums (``SumRequest``): a payload the algorithm needs only the sum of (FedGCN's per-node
neighbour sums, FedProto's count-weighted prototypes) travels through the same four stages and
the same mod, the client's weight being 1 (so the mod scales nothing) and the clipping range
the payload's own public bound, which the server announces in the setup stage. What a client
masks (``summand_arrays``) is its answer's tensors in order, and on a fit round its training
loss; the unmasked total, dequantised, is the sum itself (``Unmasked.sums``). The seeds are
the fit's: ``quantisation_seed`` of the round (0 for a setup exchange). Each entry is off by
less than one quantisation step, 2 * bound / 2**quantization_bits, per contributor. What the
server learns: the total, who contributed, and the bound; on Flower the setup exchange's sum
is carried as fit ("train") messages with the stages, since the mod acts on those alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import reduce
from typing import TypeVar

import numpy as np
from flwr.app import ConfigRecord, RecordDict
from flwr.common import (
    Code,
    FitRes,
    Status,
    bytes_to_ndarray,
    ndarrays_to_parameters,
)
from flwr.common.secure_aggregation.crypto.shamir import combine_shares
from flwr.common.secure_aggregation.crypto.symmetric_encryption import generate_shared_key
from flwr.common.secure_aggregation.ndarrays_arithmetic import (
    factor_combine,
    factor_extract,
    parameters_addition,
    parameters_mod,
    parameters_multiply,
    parameters_subtraction,
)
from flwr.common.secure_aggregation.quantization import dequantize, quantize
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key, Stage
from flwr.common.secure_aggregation.secaggplus_utils import pseudo_rand_gen
from flwr.compat.common.recorddict_compat import fitres_to_recorddict
from flwr.supercore.primitives.asymmetric import bytes_to_private_key, bytes_to_public_key

from graphfed.messages import TRAIN_LOSS, Message
from graphfed.privacy.secure_aggregation import SecAggPlan, SecureSum, SecureTotal
from graphfed.runtime.base import RoundFailed, log
from graphfed.seeding import SERVER, call_seed

WEIGHT = "secagg-weight"  # the control field that tells a client its weight
SUMMED = "secagg-sum"  # the control field of a secure sum: the phase whose answer is summed
QUANTISATION_STREAM = 0x5EC0  # the stochastic rounding's seed, apart from the fit's streams
RING_STREAM = 0x5EC1  # the server's draw of the neighbour ring
Arrays = list[np.ndarray]
T = TypeVar("T")
# one stage's exchange: each client's content -> the replies, and the clients that failed (why)
Ask = Callable[[dict[int, RecordDict]], tuple[dict[int, RecordDict], dict[int, str]]]


def update_arrays(sent: Message, reply: Message) -> Arrays:
    """What a client masks: its update (reply minus what it was sent) per tensor it returns
    (the model; what else it was sent, a payload to hold, it does not return), float64, in the
    order it was sent, then its training loss."""
    out = []
    for name, before in sent.tensors.items():
        after = reply.tensors.get(name)
        if after is None:
            continue
        if after.shape != before.shape or not before.is_floating_point():
            raise ValueError(f"secure aggregation sums float tensors shaped as sent; reply "
                             f"tensor {name!r} is not one")
        out.append((after.detach().double().cpu() - before.detach().double().cpu()).numpy())
    return _finite([*out, _loss(reply)])


def summand_arrays(reply: Message, with_loss: bool) -> Arrays:
    """What a client masks in a secure sum: its answer's tensors, float64, in order, then on a
    fit round its training loss."""
    out = []
    for name, tensor in reply.tensors.items():
        if not tensor.is_floating_point():
            raise ValueError(f"a secure sum adds float tensors; {name!r} is not one")
        out.append(tensor.detach().double().cpu().numpy())
    return _finite([*out, _loss(reply)] if with_loss else out)


def _loss(reply: Message) -> np.ndarray:
    return np.array([float(reply.scalars[TRAIN_LOSS])])


def _finite(arrays: Arrays) -> Arrays:
    if not all(np.isfinite(a).all() for a in arrays):
        raise ValueError("secure aggregation: the update or loss is not finite")
    return arrays


def _as_fit_result(arrays: Arrays, weight: int) -> RecordDict:
    result = FitRes(Status(Code.OK, ""), ndarrays_to_parameters(arrays), weight, {})
    return fitres_to_recorddict(result, keep_input=False)


def fit_result(sent: Message, reply: Message, weight: int) -> RecordDict:
    """The fit reply as Flower's mod takes it (a ``FitRes``): the update arrays and the weight
    the server gave (never the client's own count)."""
    return _as_fit_result(update_arrays(sent, reply), weight)


def sum_result(reply: Message, with_loss: bool) -> RecordDict:
    """A secure sum's answer as Flower's mod takes it: the summand arrays, weight 1."""
    return _as_fit_result(summand_arrays(reply, with_loss), 1)


def quantisation_seed(seed: int, rnd: int, client: int) -> int:
    """NumPy's global seed for a client's stochastic rounding in a round."""
    words = np.random.SeedSequence([call_seed(seed, rnd, client, "fit"), QUANTISATION_STREAM])
    return int(words.generate_state(1)[0])


def quantised(arrays: Arrays, weight: int, plan: SecAggPlan, seed: int) -> Arrays:
    """The mod's own steps before masking (``secaggplus_mod._collect_masked_vectors``): the
    weight over the largest quantised, the arrays scaled by it and quantised with NumPy's
    generator seeded by ``seed``, the quantised weight in front, as 64-bit integers."""
    q_ratio = round(weight / plan.max_weight * plan.target_range)
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        values = quantize(parameters_multiply(arrays, q_ratio / plan.target_range),
                          plan.clipping_range, plan.target_range)
    finally:
        np.random.set_state(state)
    return [a.astype(np.int64) for a in factor_combine(q_ratio, values)]  # as the masks make


def unmasked_values(total: Arrays, contributors: int, plan: SecAggPlan
                    ) -> tuple[int, Arrays]:
    """The sum of the quantised weights, and of ``contributors`` clients' weighted arrays, from
    the unmasked sum of their quantised vectors (the end of ``SecAggPlusWorkflow.unmask_stage``):
    dequantised, each contributor's shift of c removed."""
    q_total, values = factor_extract(parameters_mod(total, plan.mod_range))
    offset = -(contributors - 1) * plan.clipping_range
    return q_total, [v + offset for v in dequantize(values, plan.clipping_range,
                                                    plan.target_range)]


def reveal(total: Arrays, contributors: int, plan: SecAggPlan) -> Arrays:
    """The weighted means: the unmasked values divided by the sum of the quantised weights."""
    q_total, values = unmasked_values(total, contributors, plan)
    if q_total <= 0:
        raise RoundFailed("secure aggregation revealed no weight: nothing to average")
    scale = plan.target_range / q_total
    return [v * scale for v in values]


@dataclass
class Unmasked:
    """The unmasked sum of the contributors' quantised vectors, and the round's bookkeeping."""

    total: Arrays
    contributors: list[int]
    dropped: dict[int, str]
    bytes_up: int  # the masked vectors' payload
    wire: tuple[int, int] | None = None

    def means(self, plan: SecAggPlan) -> SecureSum:
        """The weighted mean update and training loss (the averaging family's fit)."""
        means = reveal(self.total, len(self.contributors), plan)
        return SecureSum(means[:-1], float(means[-1][0]), self.contributors, self.dropped,
                         self.bytes_up, self.wire)

    def sums(self, plan: SecAggPlan, with_loss: bool) -> SecureTotal:
        """The summands' total, and with ``with_loss`` the mean training loss (its last
        array). Every weight was 1, so the quantised weights sum to the contributors' count
        times 2**quantization_bits; anything else is refused."""
        q_total, values = unmasked_values(self.total, len(self.contributors), plan)
        if q_total != len(self.contributors) * plan.target_range:
            raise RoundFailed(f"secure sum revealed the weight {q_total}, not "
                              f"{len(self.contributors)} contributors of weight 1")
        loss = float(values.pop()[0]) / len(self.contributors) if with_loss else None
        return SecureTotal(values, loss, self.contributors, self.dropped, self.bytes_up,
                           self.wire)


def ring(clients: list[int], shares: int, seed: int, rnd: int) -> dict[int, set[int]]:
    """Each client's neighbours, itself included: SecAgg+'s ring of the clients in a random
    order, ``shares // 2`` on each side (every client, with ``shares`` = all of them)."""
    order = np.random.default_rng([call_seed(seed, rnd, SERVER, "fit"), RING_STREAM]
                                  ).permutation(clients)
    half, k = shares // 2, len(clients)
    return {int(c): {int(order[(i + offset) % k]) for offset in range(-half, half + 1)}
            for i, c in enumerate(order)}


def check_alive(rnd: int, stage: str, neighbours: dict[int, set[int]], who: set[int],
                alive: set[int], threshold: int) -> None:
    """Every client in ``who`` keeps ``threshold`` live neighbours (its secrets stay
    recoverable), or the round stops."""
    short = sorted(c for c in who if len(neighbours[c] & alive) < threshold)
    if short:
        raise RoundFailed(f"round {rnd}: secure aggregation lost too many clients by {stage} "
                          f"(clients {sorted(alive)} left): clients {short} keep fewer than "
                          f"secure_aggregation.threshold={threshold} live neighbours")


def _summed(vectors: list[Arrays], plan: SecAggPlan) -> Arrays:
    return parameters_mod(reduce(parameters_addition, vectors), plan.mod_range)


def masked_nbytes(vector: Arrays) -> int:
    """A masked vector's payload: one 64-bit integer an entry."""
    return 8 * sum(int(np.asarray(a).size) for a in vector)


def in_process_sum(rnd: int, seed: int, sent: dict[int, Message],
                   replies: dict[int, Message], failed: dict[int, str],
                   arrays: Callable[[int, Message], Arrays], shapes: list[tuple[int, ...]],
                   weights: dict[int, int], plan: SecAggPlan) -> Unmasked:
    """The in-process runtime's secure aggregation: what each client masks (``arrays`` of its
    reply, which must have ``shapes``) quantised as Flower's mod quantises it (same seeds),
    summed without the masks, which would cancel exactly."""
    dropped = dict(failed)
    vectors: dict[int, Arrays] = {}
    for client, reply in sorted(replies.items()):
        try:
            masked = arrays(client, reply)
            if [a.shape for a in masked] != shapes:
                raise ValueError(f"shapes {[a.shape for a in masked]}, expected {shapes}")
        except (KeyError, ValueError) as e:
            dropped[client] = f"{type(e).__name__}: {e}"
            log.warning("round %d: client %d failed: %s", rnd, client, dropped[client])
            continue
        vectors[client] = quantised(masked, weights[client], plan,
                                    quantisation_seed(seed, rnd, client))
    neighbours = ring(sorted(sent), plan.shares, seed, rnd)
    check_alive(rnd, "the masked vectors", neighbours, set(sent), set(vectors), plan.threshold)
    return Unmasked(_summed(list(vectors.values()), plan), sorted(vectors), dropped,
                    sum(masked_nbytes(v) for v in vectors.values()))


def record_nbytes(content: RecordDict) -> int:
    """Bytes a stage's record carries: every array's and byte string's length, 8 a number."""
    total = sum(len(a.data) for record in content.array_records.values()
                for a in record.values())
    for record in content.config_records.values():
        for value in record.values():
            for item in value if isinstance(value, list) else [value]:
                total += len(item) if isinstance(item, (bytes, str)) else 8
    return total + 8 * sum(len(record) for record in content.metric_records.values())


class FlowerSecAgg:
    """One round's SecAgg+ stages from the server's side, over ``ask`` (the transport) to
    ``nodes`` (client -> Flower node id, the ids the mod knows its peers by)."""

    def __init__(self, rnd: int, seed: int, nodes: dict[int, int], plan: SecAggPlan,
                 ask: Ask):
        self.rnd, self.plan, self.ask = rnd, plan, ask
        self.nodes = nodes
        self.client_of = {node: client for client, node in nodes.items()}
        self.neighbours = ring(sorted(nodes), plan.shares, seed, rnd)
        self.dropped: dict[int, str] = {}
        self.up = self.down = 0

    def _stage(self, name: str, contents: dict[int, RecordDict],
               read: Callable[[int, ConfigRecord], T]) -> dict[int, T]:
        """Send one stage; what ``read`` makes of each reply's SecAgg+ record. A client that
        fails, is silent past the timeout or sends a record ``read`` refuses drops out."""
        self.down += sum(record_nbytes(c) for c in contents.values())
        replies, failed = self.ask(contents)
        out: dict[int, T] = {}
        for client, content in sorted(replies.items()):
            self.up += record_nbytes(content)
            try:
                out[client] = read(client, content.config_records[RECORD_KEY_CONFIGS])
            except (KeyError, TypeError, ValueError) as e:
                failed[client] = f"malformed {name} reply: {type(e).__name__}: {e}"
        for client, why in sorted(failed.items()):
            self.dropped[client] = f"secure aggregation, {name}: {why}"
            log.warning("round %d: client %d dropped from secure aggregation at %s: %s",
                        self.rnd, client, name, why)
        return out

    def _ids(self, clients: set[int]) -> list[int]:
        return [self.nodes[c] for c in sorted(clients)]

    def run(self, fit: dict[int, RecordDict], shapes: list[tuple[int, ...]]) -> Unmasked:
        """The four stages; ``fit``: each client's fit message (graphfed's records);
        ``shapes``: the arrays the client masks (each tensor, the loss on a fit round), which
        the mod prefixes with the quantised weight."""
        plan, clients = self.plan, set(fit)
        shapes = [(1,), *shapes]
        setup = {Key.STAGE: Stage.SETUP, Key.SAMPLE_NUMBER: len(fit),
                 Key.SHARE_NUMBER: plan.shares, Key.THRESHOLD: plan.threshold,
                 Key.CLIPPING_RANGE: float(plan.clipping_range),
                 Key.TARGET_RANGE: plan.target_range, Key.MOD_RANGE: plan.mod_range,
                 Key.MAX_WEIGHT: float(plan.max_weight)}
        keys = self._stage("setup", {c: _configs(setup) for c in fit}, _public_keys)
        self._check("the key setup", clients, set(keys))
        ciphertexts = self._stage("share keys", {c: _configs({
            Key.STAGE: Stage.SHARE_KEYS,
            **{str(self.nodes[n]): list(keys[n]) for n in self.neighbours[c] & set(keys)}})
            for c in keys}, self._encrypted_shares)
        shared = set(ciphertexts)
        self._check("the key exchange", shared, shared)
        inbox: dict[int, list[tuple[int, bytes]]] = {c: [] for c in shared}
        for source, sent in ciphertexts.items():
            for target, ciphertext in sent:
                if target in inbox:
                    inbox[target].append((self.nodes[source], ciphertext))
        masked = self._stage("masked vectors", {c: _with_configs(fit[c], {
            Key.STAGE: Stage.COLLECT_MASKED_VECTORS,
            Key.CIPHERTEXT_LIST: [ct for _, ct in inbox[c]],
            Key.SOURCE_LIST: [src for src, _ in inbox[c]]}) for c in shared},
            lambda c, record: _masked_vector(record, shapes, plan.mod_range))
        active, dead = set(masked), shared - set(masked)
        self._check("the masked vectors", shared, active)
        shares = self._collect_shares(active, dead)
        total = self._unmasked(_summed(list(masked.values()), plan), shares, active,
                               {c: keys[c][0] for c in keys}, shapes)
        return Unmasked(total, sorted(active), self.dropped,
                        sum(masked_nbytes(v) for v in masked.values()), (self.up, self.down))

    def _check(self, stage: str, who: set[int], alive: set[int]) -> None:
        check_alive(self.rnd, stage, self.neighbours, who, alive, self.plan.threshold)

    def _encrypted_shares(self, client: int, record: ConfigRecord) -> list[tuple[int, bytes]]:
        """(target client, ciphertext) for each of ``client``'s neighbours."""
        targets, texts = record[Key.DESTINATION_LIST], record[Key.CIPHERTEXT_LIST]
        if not (isinstance(targets, list) and isinstance(texts, list)
                and len(targets) == len(texts)):
            raise ValueError("destinations and ciphertexts do not pair up")
        out = []
        for node, text in zip(targets, texts, strict=True):
            target = self.client_of.get(node) if isinstance(node, int) else None
            if target is None or target not in self.neighbours[client] or not isinstance(
                    text, bytes):
                raise ValueError(f"a share for {node!r}, not one of its neighbours")
            out.append((target, text))
        return out

    def _collect_shares(self, active: set[int], dead: set[int]) -> dict[int, list[bytes]]:
        """The unmask stage: each survivor's shares of its live neighbours' mask seeds and of
        its dropped neighbours' first private keys, grouped by whose secret they are."""
        def read(client: int, record: ConfigRecord) -> list[tuple[int, bytes]]:
            owners, shares = record[Key.NODE_ID_LIST], record[Key.SHARE_LIST]
            if not (isinstance(owners, list) and isinstance(shares, list)
                    and len(owners) == len(shares)):
                raise ValueError("node ids and shares do not pair up")
            expected = {self.nodes[c]: c for c in self.neighbours[client] & (active | dead)}
            return [(expected[node], share) for node, share in zip(owners, shares, strict=True)
                    if isinstance(node, int) and node in expected and isinstance(share, bytes)]

        replies = self._stage("unmask", {c: _configs({
            Key.STAGE: Stage.UNMASK,
            Key.ACTIVE_NODE_ID_LIST: self._ids(self.neighbours[c] & active),
            Key.DEAD_NODE_ID_LIST: self._ids(self.neighbours[c] & dead)}) for c in active},
            read)
        shares: dict[int, list[bytes]] = {c: [] for c in active | dead}
        for pairs in replies.values():
            for owner, share in pairs:
                shares[owner].append(share)
        short = sorted(c for c, got in shares.items() if len(got) < self.plan.threshold)
        if short:
            raise RoundFailed(f"round {self.rnd}: secure aggregation got fewer than "
                              f"secure_aggregation.threshold={self.plan.threshold} shares of "
                              f"clients {short}'s secrets: their masks cannot be removed")
        return shares

    def _unmasked(self, total: Arrays, shares: dict[int, list[bytes]], active: set[int],
                  public: dict[int, bytes], shapes: list[tuple[int, ...]]) -> Arrays:
        """``total`` without the survivors' private masks and the pairwise masks the survivors
        agreed with clients that dropped out after the key exchange."""
        mod = self.plan.mod_range
        try:
            for client, held in shares.items():
                secret = combine_shares(held)
                if client in active:
                    total = parameters_subtraction(total, pseudo_rand_gen(secret, mod, shapes))
                    continue
                private = bytes_to_private_key(secret)
                for peer in sorted(self.neighbours[client] & active):
                    key = generate_shared_key(private, bytes_to_public_key(public[peer]))
                    mask = pseudo_rand_gen(key, mod, shapes)
                    add = self.nodes[client] > self.nodes[peer]
                    total = (parameters_addition if add else parameters_subtraction)(total, mask)
        except ValueError as e:
            raise RoundFailed(f"round {self.rnd}: secure aggregation could not rebuild a "
                              f"secret from its shares: {e}") from None
        return total


def _configs(values: dict) -> RecordDict:
    return RecordDict({RECORD_KEY_CONFIGS: ConfigRecord(values)})


def _with_configs(content: RecordDict, values: dict) -> RecordDict:
    out = RecordDict(dict(content.items()))
    out.config_records[RECORD_KEY_CONFIGS] = ConfigRecord(values)
    return out


def _public_keys(client: int, record: ConfigRecord) -> tuple[bytes, bytes]:
    pk1, pk2 = record[Key.PUBLIC_KEY_1], record[Key.PUBLIC_KEY_2]
    if not (isinstance(pk1, bytes) and isinstance(pk2, bytes)):
        raise TypeError("public keys are not bytes")
    return pk1, pk2


def _masked_vector(record: ConfigRecord, shapes: list[tuple[int, ...]], mod: int) -> Arrays:
    """A client's masked vector, checked: the arrays the round expects, integers in
    [0, modulus). It is uniformly random to the server until the masks are removed from the
    sum; one it refuses counts as a client that dropped out (its masks are removed too)."""
    blobs = record[Key.MASKED_PARAMETERS]
    if not isinstance(blobs, list):
        raise TypeError("masked parameters are not a list")
    vector = [bytes_to_ndarray(b) for b in blobs if isinstance(b, bytes)]
    if [a.shape for a in vector] != shapes:  # a blob that was no byte string is missing here
        raise ValueError(f"shapes {[a.shape for a in vector]}, expected {shapes}")
    for a in vector:
        if a.dtype.kind not in "iu" or (a.size and (a.min() < 0 or a.max() >= mod)):
            raise ValueError("entries are not integers modulo the protocol's modulus")
    return [a.astype(np.int64) for a in vector]
