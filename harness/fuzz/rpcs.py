"""Fuzzing every RPC of the five services against live processes (issue 10, "bad input").

Shared by the bounded CI test (tests/chaos/test_fuzz_rpcs.py) and the full run
(bench/fuzz_rpcs.py). The RPCs are enumerated from the generated descriptors
(`opentinker_api.<area>.v1.<area>_service_pb2`), so a new RPC is fuzzed without a change here.
Per RPC, Hypothesis draws cases from `harness.fuzz.strategies` (random messages, raw bytes, one-field
mutations of a valid example from `harness.fuzz.targets`), each case is one real call over a real
socket with a deadline, and `harness.fuzz.oracle.verdict` judges each outcome; after each RPC's batch
the service must answer grpc.health.v1 Check SERVING and a known-good request, and its process
must be alive (`harness.fuzz.targets.LiveTarget.health_problems`). Cases and responses are counted
per RPC and code (`RpcTally`, `summary_table`).
"""

from __future__ import annotations

import importlib
import time
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import text_format
from google.protobuf.descriptor import Descriptor, MethodDescriptor
from google.protobuf.message import Message
from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from harness.fuzz.oracle import KNOWN_FINDINGS, WAITING_RPCS, WORK_RPCS, Outcome, verdict
from harness.fuzz.strategies import message_strategy, mutation_strategy, wire_strategy

SERVICES = ("scheduler", "trainer", "rollout", "envhost", "coordinator")
UNARY_DEADLINE_S = 5.0
WORK_DEADLINE_S = 2.5
"""WORK_RPCS' deadline: their DEADLINE_EXCEEDED is accepted, so a shorter one only saves time."""
WAITING_DEADLINE_S = 0.5
MAX_STREAM_ITEMS = 16
WEIGHTS = {"near-valid": 2, "random": 1, "raw-bytes": 1}


# -- the RPCs ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Rpc:
    service: str
    """The stack's name for the process serving it ("scheduler", ...)."""
    method: MethodDescriptor

    @property
    def name(self) -> str:
        return f"{self.method.containing_service.name}.{self.method.name}"

    @property
    def path(self) -> str:
        return f"/{self.method.containing_service.full_name}/{self.method.name}"

    @property
    def request(self) -> Descriptor:
        return self.method.input_type

    @property
    def waits(self) -> bool:
        return self.name in WAITING_RPCS

    @property
    def may_outlive_deadline(self) -> bool:
        return self.name in WAITING_RPCS or self.name in WORK_RPCS


def all_rpcs() -> list[Rpc]:
    """Every RPC of every service, in proto order, from the generated descriptors."""
    rpcs = []
    for service in SERVICES:
        module = importlib.import_module(f"opentinker_api.{service}.v1.{service}_service_pb2")
        for descriptor in module.DESCRIPTOR.services_by_name.values():
            rpcs.extend(Rpc(service, method) for method in descriptor.methods)
    return rpcs


# -- cases and calls --------------------------------------------------------------------------

Payload = Message | bytes
Request = Payload | list[Payload]
"""One message (or raw bytes) for a unary request; a list of them for a client stream."""


@dataclass(frozen=True)
class Case:
    kind: str
    """"valid", "near-valid" (one field mutated), "random" or "raw-bytes"."""
    request: Request
    note: str = ""
    """The mutated field path of a near-valid case."""


def serialize(payload: Payload) -> bytes:
    return payload if isinstance(payload, bytes) else payload.SerializeToString()


def invoke(channel: grpc.Channel, rpc: Rpc, request: Request, metadata: Sequence[tuple[str, str]]) -> Outcome:
    """One real call; a response stream is read to its end or cancelled after MAX_STREAM_ITEMS."""
    timeout = WAITING_DEADLINE_S if rpc.waits else WORK_DEADLINE_S if rpc.name in WORK_RPCS else UNARY_DEADLINE_S
    kind = ("stream" if rpc.method.client_streaming else "unary") + "_" + (
        "stream" if rpc.method.server_streaming else "unary")
    callable_ = getattr(channel, kind)(rpc.path, request_serializer=serialize, response_deserializer=None)
    argument = iter(request) if rpc.method.client_streaming else request
    sent = len(request) if rpc.method.client_streaming else 1
    started = time.perf_counter()
    if not rpc.method.server_streaming:
        try:
            callable_(argument, timeout=timeout, metadata=metadata)
        except grpc.RpcError as error:
            return Outcome(error.code(), error.details() or "", time.perf_counter() - started, requests=sent)
        return Outcome(grpc.StatusCode.OK, "", time.perf_counter() - started, requests=sent)
    return _read_stream(callable_(argument, timeout=timeout, metadata=metadata), started, sent)


def _read_stream(call: Any, started: float, sent: int) -> Outcome:
    responses = 0
    try:
        for _ in call:
            responses += 1
            if responses >= MAX_STREAM_ITEMS:
                call.cancel()
                return Outcome(grpc.StatusCode.CANCELLED, "", time.perf_counter() - started, responses, True, sent)
    except grpc.RpcError as error:
        return Outcome(error.code(), error.details() or "", time.perf_counter() - started, responses, requests=sent)
    return Outcome(grpc.StatusCode.OK, "", time.perf_counter() - started, responses, requests=sent)


# -- tallies ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Failure:
    rpc: str
    case_kind: str
    problem: str
    details: str
    reproducer: str


@dataclass
class RpcTally:
    rpc: str
    cases: Counter = field(default_factory=Counter)
    """Cases by kind."""
    codes: Counter = field(default_factory=Counter)
    """Responses by status code name."""
    failures: list[Failure] = field(default_factory=list)
    known: list[Failure] = field(default_factory=list)
    """Failures matching a KNOWN_FINDINGS entry: reported to code owners, printed, not failed in CI."""
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.cases.values())


def reproducer(case: Case, limit: int = 600) -> str:
    """The request as protobuf text (or hex for raw bytes), cut at `limit` characters."""
    items = case.request if isinstance(case.request, list) else [case.request]
    text = " | ".join(_as_text(item) for item in items)
    mutated = f"[mutated {case.note}] " if case.note else ""
    return mutated + (text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)")


def _as_text(item: Payload) -> str:
    if isinstance(item, bytes):
        return f"hex {item.hex()}"
    try:
        return f"{type(item).DESCRIPTOR.full_name} {{{text_format.MessageToString(item, as_one_line=True)}}}"
    except Exception:  # noqa: BLE001 - text_format re-parses Struct entries and has a depth limit
        return f"{type(item).DESCRIPTOR.full_name} hex {item.SerializeToString().hex()}"


# -- strategies per RPC -----------------------------------------------------------------------

def case_strategy(rpc: Rpc, examples: Sequence[Request]) -> st.SearchStrategy[Case]:
    """Near-valid (twice the weight), random and raw-bytes cases for `rpc`."""
    request = rpc.request
    random_one = message_strategy(request)
    raw_one = wire_strategy(request)
    if rpc.method.client_streaming:
        random = st.lists(random_one, min_size=1, max_size=3)
        raw = st.lists(st.one_of(raw_one, random_one.map(serialize)), min_size=1, max_size=3)
    else:
        random, raw = random_one, raw_one
    branches = {"random": random.map(lambda r: Case("random", r)),
                "raw-bytes": raw.map(lambda r: Case("raw-bytes", r))}
    if examples:
        branches["near-valid"] = _near_valid(examples, rpc.method.client_streaming)
    kinds = [kind for kind, weight in WEIGHTS.items() if kind in branches for _ in range(weight)]
    return st.sampled_from(kinds).flatmap(branches.__getitem__)


def _near_valid(examples: Sequence[Request], streaming: bool) -> st.SearchStrategy[Case]:
    if not streaming:
        return st.sampled_from(list(examples)).flatmap(mutation_strategy).map(
            lambda mutated: Case("near-valid", mutated[1], mutated[0]))

    def mutate_one(example: list[Payload]) -> st.SearchStrategy[Case]:
        messages = [i for i, item in enumerate(example) if isinstance(item, Message)]
        return st.sampled_from(messages).flatmap(lambda index: mutation_strategy(example[index]).map(
            lambda mutated: Case("near-valid", [*example[:index], mutated[1], *example[index + 1:]],
                                 f"[{index}].{mutated[0]}")))
    return st.sampled_from(list(examples)).flatmap(mutate_one)


# -- running ----------------------------------------------------------------------------------

class Target:
    """What the runner needs of a live stack (harness/fuzz/targets.LiveTarget)."""

    metadata: Sequence[tuple[str, str]]
    tenant_key: bool
    """True when `metadata` carries a tenant's key (the oracle's `verdict(..., tenant_key=True)`)."""

    def channel(self, service: str) -> grpc.Channel: ...
    def examples(self, rpc: Rpc) -> list[Request]: ...
    def after_batch(self, rpc: Rpc) -> None: ...
    def health_problems(self, service: str) -> list[str]: ...


def fuzz_rpc(target: Target, rpc: Rpc, *, max_examples: int, seed: int) -> RpcTally:
    """The valid examples once, then `max_examples` Hypothesis cases; then the health checks."""
    tally = RpcTally(rpc.name)
    channel = target.channel(rpc.service)
    examples = target.examples(rpc)
    started = time.perf_counter()

    def check(case: Case) -> None:
        outcome = invoke(channel, rpc, case.request, target.metadata)
        tally.cases[case.kind] += 1
        tally.codes[outcome.code.name] += 1
        problem = verdict(rpc, outcome, tenant_key=target.tenant_key)
        if problem:
            failure = Failure(rpc.name, case.kind, problem, outcome.details[:300], reproducer(case))
            known = any(finding.matches(failure, case) for finding in KNOWN_FINDINGS)
            (tally.known if known else tally.failures).append(failure)

    for example in examples:
        check(Case("valid", example))
    if max_examples > 0:
        run_hypothesis(case_strategy(rpc, examples), check, max_examples=max_examples,
                       seed=seed ^ zlib.crc32(rpc.name.encode()))
    target.after_batch(rpc)
    for problem in target.health_problems(rpc.service):
        tally.failures.append(Failure(rpc.name, "health", problem, "", "after the batch"))
    tally.seconds = time.perf_counter() - started
    return tally


def run_hypothesis(strategy: st.SearchStrategy[Case], check: Callable[[Case], None], *,
                   max_examples: int, seed: int) -> None:
    """`check` every drawn case; no shrinking (failures are recorded, not raised), no database."""
    @hypothesis_seed(seed)
    @settings(max_examples=max_examples, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet, derandomize=False)
    @given(strategy)
    def fuzz(case: Case) -> None:
        check(case)
    fuzz()


def summary_table(tallies: Sequence[RpcTally]) -> str:
    """RPC, cases (by kind), responses by code, failures: one line per RPC and a total."""
    lines = [f"{'rpc':<36} {'cases':>6} {'fail':>5} {'known':>5} {'secs':>6}  responses by code"]
    for tally in tallies:
        codes = ", ".join(f"{code} {count}" for code, count in tally.codes.most_common())
        lines.append(f"{tally.rpc:<36} {tally.total:>6} {len(tally.failures):>5} {len(tally.known):>5} "
                     f"{tally.seconds:>6.1f}  {codes}")
    codes = sum((t.codes for t in tallies), Counter())
    kinds = sum((t.cases for t in tallies), Counter())
    lines.append(f"{'TOTAL':<36} {sum(t.total for t in tallies):>6} {sum(len(t.failures) for t in tallies):>5} "
                 f"{sum(len(t.known) for t in tallies):>5} {sum(t.seconds for t in tallies):>6.1f}  "
                 + ", ".join(f"{c} {n}" for c, n in codes.most_common()))
    lines.append("cases by kind: " + ", ".join(f"{k} {n}" for k, n in kinds.most_common()))
    return "\n".join(lines)

