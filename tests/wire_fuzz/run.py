"""The fuzz run: ``Fuzzer`` sends cases to one server, judges every reply (``oracle.judge``),
keeps the counts, and checks the server itself between requests; ``fuzz`` draws the cases."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from openapi_doc import OpenApi

from wire_fuzz import PREFIX, VERBS
from wire_fuzz.bodies import CHUNK_DAMAGE, GOLDEN, Case, cases, damaged_head, encode
from wire_fuzz.client import Conn, Reply, ServerClosed, request
from wire_fuzz.oracle import judge
from wire_fuzz.server import Server

OPENAPI = OpenApi()
"""docs/openapi.yaml: every answer must also be one the document gives."""

KNOWN_GOOD = encode(GOLDEN["filter"]["v1.36"]).encode()
"""A filter body as kube-scheduler v1.36 sent it: it must get a valid 200 after every batch."""

ONE_SHOT = ("short", "long", "bad-chunks", "bad-head")
"""Framings that leave the connection unusable: each is sent on a connection of its own."""

Exchange = tuple[bytes, Reply]
"""A body the server was given (as it framed it) and the reply it wrote."""


@dataclass
class Violation:
    verb: str
    worker: str
    problem: str
    case: str

    def __str__(self) -> str:
        return f"[{self.worker} {self.verb}] {self.problem}\n    request: {self.case}"


@dataclass
class Fuzzer:
    """Sends cases to one server and judges the replies. The server is checked as it goes: the
    cache digest after every ``digest_every``-th request and every bind (only a bind that
    answered success may change it), and at every ``batch``-th request a checkpoint: /healthz,
    the known-good filter, the same worker process, the cache."""

    server: Server
    batch: int = 100
    digest_every: int = 5
    counts: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    """(verb, worker, outcome) -> replies; outcome "200", "4xx 400", "5xx 500", ... or "no reply"."""
    violations: list[Violation] = field(default_factory=list)
    sent: int = 0
    conn: Conn | None = None
    known: str = ""
    """The cache digest as it must be now."""
    pids: list[int] = field(default_factory=list)
    recent: list[str] = field(default_factory=list)
    """The cases sent since the digest was last compared (named when it changed)."""
    previous: Case | None = None

    def __post_init__(self) -> None:
        self.pids = self.server.worker_pids()
        self.known = self.server.digest()

    def violation(self, verb: str, problem: str, case: Case | str) -> None:
        self.violations.append(Violation(verb, self.server.worker, problem,
                                         case.describe() if isinstance(case, Case) else case))

    def send(self, case: Case) -> None:
        """Send one case, judge what comes back, keep the books."""
        self.sent += 1
        self.recent.append(case.describe())
        exchanges = self._attempt(case)
        for body, reply in exchanges:
            self._count(case.verb, reply)
            for problem in judge(case.verb, body, reply, case.errors_expected()) + OPENAPI.problems(
                    case.method, case.target(), reply.status, reply.headers.get("content-type", ""), reply.body):
                self.violation(case.verb, problem, case)
        if not exchanges:
            self._count(case.verb, None)
        first = exchanges[0][1] if exchanges else None
        self._expect(case, first)
        if first is not None and case.verb != "bind" and first.status != 413 and (
                case.framing in ("chunked", "expect") or case.target().endswith("?pretty")):
            self._same_as_plain(case, first)
        if case.verb == "bind" and first is not None and first.status == 200 and first.json() == {"Error": ""}:
            self.known = self.server.digest()  # bound (or bound already): the cache may have changed
            self.recent = []
        elif case.verb == "bind" or self.sent % self.digest_every == 0:
            self.check_cache(case.verb)
        if self.sent % self.batch == 0:
            self.checkpoint()
        self.previous = case

    def _attempt(self, case: Case) -> list[Exchange]:
        """``_exchange``, once more on a new connection when the kept one turns out closed (as a
        client would) - a violation by the previous request, which said keep-alive."""
        reused = self.conn is not None and case.framing not in ONE_SHOT
        try:
            return self._exchange(case)
        except (ServerClosed, OSError) as exc:
            self._drop()
            if not reused:
                self.violation(case.verb, f"no reply ({type(exc).__name__}: {exc})", case)
                return []
            previous = self.previous or case
            self.violation(previous.verb, "the server closed the connection after this request's reply, "
                                          f"which had not said Connection: close ({type(exc).__name__})", previous)
            return self._attempt(case)

    def _exchange(self, case: Case) -> list[Exchange]:
        """Write the case as its framing says; what the server was given and answered, in order."""
        body = case.body
        if case.framing in ONE_SHOT:
            return self._one_shot(case)
        conn = self._connection()
        if case.framing in ("plain", "oversized"):
            conn.send(case.plain())
        elif case.framing in ("chunked", "oversized-chunked"):
            conn.send(case.head("Transfer-Encoding: chunked") + case.chunks())
        elif case.framing == "fragmented":
            data = case.plain()
            for start, end in zip([0, *case.cuts], [*case.cuts, len(data)]):
                conn.send(data[start:end])
                time.sleep(0.001)
        elif case.framing == "expect":
            conn.send(case.head("Expect: 100-continue", length=len(body)))
            interim = conn.reply(interim=True)
            if interim.status != 100:
                return self._finish([(body, interim)])
            conn.send(body)
        elif case.framing == "pipelined":
            conn.send(case.plain() + request("POST", f"{PREFIX}/filter", KNOWN_GOOD, length=len(KNOWN_GOOD)))
            first = conn.reply()
            if not first.close:
                self._known_good(conn.reply(), case)
            return self._finish([(body, first)])
        else:
            raise ValueError(f"unknown framing {case.framing}")
        return self._finish([(body, conn.reply())])

    def _one_shot(self, case: Case) -> list[Exchange]:
        """A case that leaves the connection unusable, on a connection of its own: written, the
        client stops sending, every reply until the server closes is read."""
        body = case.body
        if case.framing in ("short", "long"):
            cut = len(body) // 2 if case.framing == "short" else len(body) + 17
            data, given = case.head(length=cut) + body, body[:cut]
        elif case.framing == "bad-chunks":
            data, given = case.head("Transfer-Encoding: chunked") + CHUNK_DAMAGE[case.damage](body), body
        else:
            data, given = damaged_head(case), body
        conn = Conn(self.server.port)
        replies = []
        try:
            conn.send(data)
            conn.stop_sending()
            while True:
                replies.append(conn.reply())
        except ServerClosed:
            pass
        finally:
            conn.close()
        if case.framing == "short":  # the rest of the body reached the server as the next "request"
            return [(given, r) for r in replies[:1]] + [(b"", r) for r in replies[1:]]
        return [(given, r) for r in replies]

    def _expect(self, case: Case, first: Reply | None) -> None:
        """What the framing itself demands of the first reply, beyond the oracle."""
        if case.framing.startswith("oversized") and (first is None or first.status != 413):
            self.violation(case.verb, f"a body over the limit got {first.status if first else 'no reply'}, "
                                      "not 413", case)
        if case.framing in ("long", "bad-chunks") and first is not None and first.status == 200:
            self.violation(case.verb, "200 to a request whose body never arrived as framed", case)
        if case.framing == "short" and first is None:
            self.violation(case.verb, "no reply to the body its Content-Length announced", case)

    def _same_as_plain(self, case: Case, reply: Reply) -> None:
        """The same body sent plainly (one Content-Length, no query) gets the same answer."""
        plain = Case(case.verb, case.body, case.notes, content_type=case.content_type)
        conn = Conn(self.server.port)
        try:
            conn.send(plain.plain())
            again = conn.reply()
        finally:
            conn.close()
        if again.status != reply.status or again.json() != reply.json():
            self.violation(case.verb, f"answered {reply.status} {reply.body[:80]!r}, but sent plainly "
                                      f"{again.status} {again.body[:80]!r}", case)

    def _known_good(self, reply: Reply, case: Case | str) -> None:
        problems = judge("filter", KNOWN_GOOD, reply)
        if reply.status != 200:
            problems.append(f"status {reply.status}")
        for problem in problems:
            self.violation("filter", f"the known-good filter: {problem}", case)

    def _connection(self) -> Conn:
        if self.conn is None:
            self.conn = Conn(self.server.port)
        return self.conn

    def _drop(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def _finish(self, out: list[Exchange]) -> list[Exchange]:
        if any(reply.close for _, reply in out):
            self._drop()
        return out

    def _count(self, verb: str, reply: Reply | None) -> None:
        if reply is None:
            outcome = "no reply"
        elif reply.status == 200:
            outcome = "200"
        else:
            outcome = f"{reply.status // 100}xx {reply.status}"
        self.counts[(verb, self.server.worker, outcome)] += 1

    def check_cache(self, verb: str) -> None:
        digest = self.server.digest()
        if digest != self.known:
            self.violation(verb, "the cache changed without a successful bind", " | ".join(self.recent[-5:]))
            self.known = digest
        self.recent = []

    def checkpoint(self) -> None:
        """The server still serves, as the same worker process, with the cache as it was."""
        self._drop()
        health = self.server.get("/healthz")
        if health.status != 200 or health.json() != {"status": "ok"}:
            self.violation("healthz", f"/healthz answered {health.status} {health.body[:100]!r}", "checkpoint")
        conn = Conn(self.server.port)
        try:
            conn.send(request("POST", f"{PREFIX}/filter", KNOWN_GOOD, length=len(KNOWN_GOOD)))
            self._known_good(conn.reply(), "checkpoint")
        finally:
            conn.close()
        pids = self.server.worker_pids()
        if pids != self.pids:
            self.violation("server", f"worker processes changed from {self.pids} to {pids} (a restart)",
                           " | ".join(self.recent[-5:]))
            self.pids = pids
        self.check_cache("checkpoint")

    def finish(self) -> None:
        """The last checkpoint, and what the server counted and logged."""
        self.checkpoint()
        internal = self.server.metric("kube_extender_internal_errors_total")
        if internal:
            self.violation("server", f"kube_extender_internal_errors_total = {internal:g}", "metrics")
        log = self.server.log_tail(1 << 24)
        for pattern in ("Traceback", "level=error", "WORKER TIMEOUT", "Error handling request"):
            if pattern in log:
                at = log.index(pattern)
                self.violation("server", f"the log says {pattern!r}", log[max(0, at - 300):at + 600])
        if log.count("Booting worker") != 1:
            self.violation("server", f"{log.count('Booting worker')} workers booted", "log")


def fuzz(fuzzer: Fuzzer, verb: str, examples: int, seed: int = 0) -> None:
    """Send ``examples`` generated cases of ``verb``; the same ``seed`` sends the same cases."""

    @hypothesis_seed(seed * 31 + VERBS.index(verb))
    @settings(max_examples=examples, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=cases(verb))
    def one(case: Case) -> None:
        fuzzer.send(case)

    one()
