"""What the fuzz sends: the golden payloads mutated (hypothesis strategies), encoded, and put on
the wire in one of several framings (``Case``)."""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterator

from hypothesis import strategies as st

from wire_fuzz import PREFIX, TESTS, VERBS
from wire_fuzz.client import chunked, request

PAYLOADS = TESTS / "payloads"
VERSIONS = ("v1.30", "v1.36")
LIMIT = 256 * 1024
"""``server.maxRequestBytes`` of the fuzzed server: small, so oversized bodies are cheap to send."""
KNOWN_NODES = ("node-1", "node-2", "node-3")
MAX_BYTES = LIMIT + 64 * 1024
"""Mutations compound (a list grown 3,000 times, then again): a body is cut to this, over the
limit still. A body much larger would still be in flight when the server, having answered 413
without reading it, closes the connection - and the reset would swallow the answer."""
ONE_SHOT_BYTES = 64 * 1024
"""Bodies sent with a framing the server may answer before reading them all (a Content-Length
lie, broken chunks, a bad head; written in pieces, over the limit) stay under this, so they are
on their way before the server closes."""


def golden(version: str, verb: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((PAYLOADS / f"kube-scheduler-{version}" / f"{verb}.json").read_text())["body"]
    return body


GOLDEN = {verb: {v: golden(v, verb) for v in VERSIONS} for verb in VERBS}


# ---- encoding: JSON text with what json.dumps cannot write -------------------------------------

@dataclass(frozen=True)
class Raw:
    """JSON text inserted verbatim (deep nesting, NaN, a lone surrogate, a number no double holds)."""

    text: str


@dataclass(frozen=True)
class Pairs:
    """A JSON object written with these (key, value) pairs in order; keys may repeat."""

    items: tuple[tuple[str, Any], ...]


def encode(value: Any, ascii_only: bool = False) -> str:
    """Compact JSON of ``value``, as Go's ``json.Marshal`` writes it; Raw and Pairs as they say."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, (dict, Pairs)):
        items = value.items if isinstance(value, Pairs) else value.items()
        return "{" + ",".join(json.dumps(k, ensure_ascii=ascii_only) + ":" + encode(v, ascii_only)
                              for k, v in items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(encode(v, ascii_only) for v in value) + "]"
    return json.dumps(value, ensure_ascii=ascii_only)


# ---- mutations of the golden bodies (hypothesis) -----------------------------------------------

EDGE_INTS = [0, -1, 1, 7, 2**31 - 1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64 - 1,
             2**64, 10**30, -(10**30)]
EDGE_STRINGS = ["", " ", "x", "\u0000", "\t\n", "é", "日本語", "🙂", "\u202egpu", "\ufeff", "a" * 5000, "null",
                "-1", "NaN", "{}", "../etc", "%s%n%d", "node-1", "node-2", "gpu-pod", "default", "kube-system",
                "NODE-1", "node-1 ", "example.com/gpu"]
RAW_VALUES = ["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "123456789012345678901234567890",
              "-123456789012345678901234567890", "1.0e+", "01", "-", '"\\ud800"', '"\\x41"', "tru", "nul",
              '"unterminated', "[1,]", '{"a":1,}', "{,}"]
DEEP = [Raw("[" * d + "]" * d) for d in (64, 600, 1100, 20000)] + \
       [Raw('{"a":' * d + "1" + "}" * d) for d in (64, 600, 1100, 20000)]
QUANTITY_SUFFIXES = ["", "m", "k", "M", "G", "T", "P", "E", "n", "u", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "e3", "E-2",
                     "e+1", "e64", "e65", "e-999", "ki", "KI", "Qi", "i", " Gi", "e", "%", "\u00a0"]
QUANTITY_EDGES = ["-1", "-0", "+1", "-500m", "-1Gi", "-0.001", "1.2.3", "abc", "", " ", "１", "٣", "1\u00a0", "0x10",
                  "NaN", "Inf", "+-1", "--1", "e3", ".", ".5", "1.", "9" * 400, "99999999999999999999999Ei", "1E64",
                  "0.0000000001n", "1e-999", "1e999", "\u0000", " 1 ", "1 1"]

json_scalars = st.one_of(st.none(), st.booleans(), st.sampled_from(EDGE_INTS), st.integers(),
                         st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=16),
                         st.sampled_from(EDGE_STRINGS))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=12)
wild_values = st.one_of(json_scalars, json_values, st.sampled_from(DEEP), st.sampled_from(RAW_VALUES).map(Raw))

quantities = st.one_of(
    st.sampled_from(QUANTITY_EDGES),
    st.builds(lambda sign, number, suffix: f"{sign}{number}{suffix}", st.sampled_from(["", "", "-", "+"]),
              st.one_of(st.integers(0, 10**6).map(str), st.decimals(0, 10**4, places=3).map(str)),
              st.sampled_from(QUANTITY_SUFFIXES)),
    st.one_of(st.integers(-(10**20), 10**20), st.floats(allow_nan=False, allow_infinity=False), st.none(),
              st.booleans(), st.just([]), st.just({})),
)

Path_ = tuple[Any, ...]


def positions(doc: Any, at: Path_ = ()) -> Iterator[Path_]:
    """Every position in ``doc`` (the root included), parents before children."""
    yield at
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from positions(v, (*at, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from positions(v, (*at, i))


HOT = {"Pod", "metadata", "name", "namespace", "uid", "spec", "containers", "initContainers", "resources",
       "requests", "limits", "overhead", "priority", "schedulerName", "preemptionPolicy", "NodeNames", "Nodes",
       "items", "NodeNameToMetaVictims", "NodeNameToVictims", "Pods", "UID", "NumPDBViolations", "PodName",
       "PodNamespace", "PodUID", "Node", "allocatable", "status"}
QUANTITY_MAPS = {"requests", "limits", "overhead", "allocatable", "capacity"}


def get(doc: Any, at: Path_) -> Any:
    for k in at:
        doc = doc[k]
    return doc


def put(doc: Any, at: Path_, value: Any) -> Any:
    """``doc`` with the value at ``at`` replaced (the root itself when ``at`` is empty)."""
    if not at:
        return value
    get(doc, at[:-1])[at[-1]] = value
    return doc


def case_variant(key: str, how: int) -> str:
    return [key.lower(), key.upper(), key.swapcase(), key[:1].lower() + key[1:]][how % 4]


def _node_object(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": f"uid-{name}", "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110", "example.com/gpu": "4"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def _full_victims(body: dict[str, Any]) -> dict[str, Any]:
    """The preempt body in its nodeCacheCapable: false form: full victim pods."""
    victims = {}
    for node, mv in body["NodeNameToMetaVictims"].items():
        pods = [{"metadata": {"name": f"victim-{p['UID'][:8]}", "namespace": "default", "uid": p["UID"]},
                 "spec": {"nodeName": node, "priority": 0, "containers": [
                     {"name": "main", "resources": {"requests": {"cpu": "1", "example.com/gpu": "1"}}}]},
                 "status": {"phase": "Running"}} for p in mv["Pods"]]
        victims[node] = {"Pods": pods, "NumPDBViolations": mv["NumPDBViolations"]}
    return {"Pod": body["Pod"], "NodeNameToVictims": victims, "NodeNameToMetaVictims": None}


node_name_lists = st.one_of(
    st.lists(st.sampled_from([*KNOWN_NODES, "ghost", "", "NODE-1", "node-1 ", "日本", "n" * 300]), max_size=8),
    st.integers(100, 6000).map(lambda k: [f"node-{i % 5}" if i % 7 else f"gone-{i}" for i in range(k)]),
    st.lists(json_scalars, max_size=4),
)


@st.composite
def mutated_doc(draw: Any, verb: str) -> tuple[Any, list[str]]:
    """A golden body of ``verb`` with up to four mutations, and a note per mutation."""
    version = draw(st.sampled_from(VERSIONS))
    doc: Any = copy.deepcopy(GOLDEN[verb][version])
    notes = [version]
    if verb in ("filter", "prioritize") and draw(st.integers(0, 4)) == 0:
        doc = {"Pod": doc["Pod"], "Nodes": {"metadata": {}, "items": [_node_object(n) for n in doc["NodeNames"]]},
               "NodeNames": None}
        notes.append("full Node objects")
    if verb == "preempt" and draw(st.integers(0, 3)) == 0:
        doc = _full_victims(doc)
        notes.append("full victim pods")
    for _ in range(draw(st.integers(0, 4))):
        doc, note = _mutate(draw, doc)
        notes.append(note)
    return doc, notes


def _mutate(draw: Any, doc: Any) -> tuple[Any, str]:
    every = list(positions(doc))
    hot = [p for p in every if len(p) <= 2 or any(k in HOT for k in p if isinstance(k, str))]
    quantity_at = [p for p in every if len(p) >= 2 and p[-2] in QUANTITY_MAPS]
    names_at = [p for p in every if p and isinstance(p[-1], str) and p[-1].lower() == "nodenames"]
    kind = draw(st.sampled_from(["replace", "replace", "delete", "null", "rename", "case-dup", "wrap", "quantity",
                                 "quantity", "quantity", "names", "deep", "grow"]))
    if kind == "quantity" and quantity_at:
        at = draw(st.sampled_from(quantity_at))
        q = draw(quantities)
        return put(doc, at, q), f"quantity {_where(at)} = {q!r:.40}"
    if kind == "names" and names_at:
        at = draw(st.sampled_from(names_at))
        names = draw(node_name_lists)
        return put(doc, at, names), f"names {_where(at)} = {len(names)} names {names[:3]!r:.60}"
    at = draw(st.sampled_from(hot if hot and draw(st.integers(0, 3)) else every))
    target = get(doc, at)
    if kind == "delete" and at:
        del get(doc, at[:-1])[at[-1]]
        return doc, f"delete {_where(at)}"
    if kind == "null":
        return put(doc, at, None), f"null {_where(at)}"
    if kind == "rename" and at and isinstance(at[-1], str):
        parent = get(doc, at[:-1])
        new = case_variant(at[-1], draw(st.integers(0, 3))) if draw(st.booleans()) else at[-1] + "x"
        renamed = {(new if k == at[-1] else k): v for k, v in parent.items()}
        return put(doc, at[:-1], renamed), f"rename {_where(at)} -> {new!r}"
    if kind == "case-dup" and isinstance(target, dict) and target:
        key = draw(st.sampled_from(sorted(target)))
        twin = case_variant(key, draw(st.integers(0, 3)))
        value = draw(wild_values)
        pairs = [(twin, value), *target.items()] if draw(st.booleans()) else [*target.items(), (twin, value)]
        if twin in target:
            return put(doc, at, Pairs(tuple(pairs))), f"duplicate key {_where((*at, key))} = {_short(value)}"
        return put(doc, at, dict(pairs)), f"case twin {_where((*at, twin))} = {_short(value)}"
    if kind == "wrap":
        return put(doc, at, [target] if draw(st.booleans()) else {"value": target}), f"wrap {_where(at)}"
    if kind == "deep":
        value = draw(st.sampled_from(DEEP))
        return put(doc, at, value), f"deep {_where(at)} ({len(value.text)} bytes)"
    if kind == "grow" and isinstance(target, (list, dict)) and target:
        k = min(draw(st.integers(50, 3000)), MAX_BYTES // len(encode(target)) + 1)  # about the limit, no more
        if isinstance(target, list):
            grown: Any = target * (k // len(target) + 1)
        else:
            grown = {**target, **{f"k{i}": next(iter(target.values())) for i in range(k)}}
        return put(doc, at, grown), f"grow {_where(at)} x{k}"
    value = draw(wild_values)
    return put(doc, at, value), f"replace {_where(at)} = {_short(value)}"


def _where(at: Path_) -> str:
    return "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in at) or "<root>"


def _short(value: Any) -> str:
    text = value.text if isinstance(value, Raw) else repr(value)
    return text if len(text) <= 40 else f"{text[:37]}...({len(text)})"


@st.composite
def body_bytes(draw: Any, doc: Any, notes: list[str]) -> bytes:
    """``doc`` encoded, sometimes damaged."""
    text = encode(doc, ascii_only=draw(st.booleans()))
    data = text.encode("utf-8", "surrogatepass")
    damage = draw(st.sampled_from(["none"] * 12 + ["truncate", "trailing", "bom", "bad-utf8", "dup-key", "space",
                                                   "nan", "empty", "second-doc"]))
    if damage == "none":
        return data
    notes.append(f"bytes: {damage}")
    if damage == "truncate":
        return data[:draw(st.integers(0, max(0, len(data) - 1)))]
    if damage == "trailing":
        return data + draw(st.sampled_from([b" x", b"}", b"\x00", b",", b"]", b"\xff"]))
    if damage == "second-doc":
        return data + b"{}"
    if damage == "bom":
        return b"\xef\xbb\xbf" + data
    if damage == "bad-utf8":
        at = draw(st.integers(0, len(data)))
        return data[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xc0\xaf"])) + data[at:]
    if damage == "dup-key" and data.startswith(b"{") and len(data) > 2:
        key = draw(st.sampled_from(["Pod", "NodeNames", "Nodes", "PodName", "PodUID", "Node", "NodeNameToMetaVictims"]))
        dup = f'"{key}":{encode(draw(wild_values))}'.encode("utf-8", "surrogatepass")
        if draw(st.booleans()):
            return b"{" + dup + b"," + data[1:]
        return data[:-1] + b"," + dup + b"}"
    if damage == "space":
        return b" \t\r\n" + data + b"\n"
    if damage == "nan":
        return re.sub(rb":(-?\d+)([,}])", lambda m: b":NaN" + m.group(2), data, count=1)
    if damage == "empty":
        return b""
    return data  # a duplicate key where the body is no object


@dataclass
class Case:
    """One generated request: the body and how it travels."""

    verb: str
    body: bytes
    notes: list[str]
    method: str = "POST"
    path: str = ""
    content_type: str | None = "application/json"
    framing: str = "plain"
    """plain; chunked; expect (``Expect: 100-continue``, the body after the interim reply);
    pipelined (a known-good request right behind it); short (Content-Length less than the body:
    the rest reaches the server as the next request); long (Content-Length more than the body,
    then the client stops sending); oversized and oversized-chunked (a body over the limit);
    bad-chunks (chunked framing broken as ``damage`` says); bad-head (the head damaged as
    ``damage`` says, see ``HEAD_DAMAGE``); fragmented (a plain request written in pieces, cut at
    ``cuts``, a moment apart: the fast lane reads heads and bodies in pieces)."""
    damage: str = ""
    cuts: list[int] = field(default_factory=list)

    def target(self) -> str:
        return self.path or f"{PREFIX}/{self.verb}"

    def errors_expected(self) -> tuple[int, ...]:
        """Statuses of 500 and above this request may get: 501 for a transfer coding the server
        does not implement - an unknown one, gzip alone or before chunked (RFC 9112 6.1: a
        server SHOULD answer 501; both workers do); no other (chunked before gzip, or twice,
        is a 400: RFC 9112 6.3)."""
        return (501,) if self.damage in _UNIMPLEMENTED_CODINGS else ()

    def describe(self) -> str:
        extra = [] if self.framing == "plain" else [f"framing {self.framing} {self.damage}".rstrip()]
        if self.method != "POST" or self.path:
            extra.append(f"{self.method} {self.target()}")
        if self.content_type != "application/json":
            extra.append(f"content-type {self.content_type!r}")
        return "; ".join([*self.notes, *extra, f"{len(self.body)} bytes"])

    def head(self, *headers: str, length: int | None = None) -> bytes:
        return request(self.method, self.target(), b"", *headers, length=length, content_type=self.content_type)

    def plain(self) -> bytes:
        """The case as a well-framed request with a Content-Length."""
        return self.head(length=len(self.body)) + self.body

    def chunks(self) -> bytes:
        """The body in chunks of varied sizes (the last chunk and the terminator included)."""
        return chunked(self.body, [1 + (len(self.body) * k) % 977 for k in range(1, 40)])


CHUNK_DAMAGE = {
    "size not hex": lambda body: b"zz\r\n" + body + b"\r\n0\r\n\r\n",
    "negative size": lambda body: b"-5\r\n" + body + b"\r\n0\r\n\r\n",
    "no CRLF after the data": lambda body: f"{len(body):x}\r\n".encode() + body + b"XX0\r\n\r\n",
    "extension with a NUL": lambda body: f"{len(body):x};a=\x00\r\n".encode() + body + b"\r\n0\r\n\r\n",
    "size beyond the data": lambda body: f"{len(body) + 99:x}\r\n".encode() + body,
    "no last chunk": lambda body: f"{len(body):x}\r\n".encode() + body + b"\r\n",
    "huge size": lambda body: b"fffffffffffffffffff\r\n" + body + b"\r\n0\r\n\r\n",
}
"""Broken chunked framings of a body: the request ends after them (the client stops sending)."""

HEAD_DAMAGE = {
    "Content-Length not a number": ["Content-Length: 12abc"],
    "Content-Length negative": ["Content-Length: -5"],
    "Content-Length twice, different": ["Content-Length: 1", "Content-Length: 2"],
    "Content-Length and chunked": ["Content-Length: 5", "Transfer-Encoding: chunked"],
    "Transfer-Encoding gzip": ["Transfer-Encoding: gzip"],
    "Transfer-Encoding gzip, chunked": ["Transfer-Encoding: gzip, chunked"],
    "Transfer-Encoding unknown": ["Transfer-Encoding: br"],
    "Transfer-Encoding chunked, gzip": ["Transfer-Encoding: chunked, gzip"],
    "Transfer-Encoding chunked twice": ["Transfer-Encoding: chunked", "Transfer-Encoding: chunked"],
    "Transfer-Encoding chunked, unknown": ["Transfer-Encoding: chunked, br"],
    "Transfer-Encoding empty element": ["Transfer-Encoding: chunked,"],
    "Expect other than 100-continue": ["Expect: 200-ok"],
    "space in a header name": ["Bad Name: x"],
    "header without a colon": ["NoColon"],
    "folded header": ["X-Folded: a", " continued"],
    "NUL in a header": ["X-Nul: a\x00b"],
    "header over 8 KiB": ["X-Long: " + "v" * 9000],
    "150 headers": [f"X-H{i}: {i}" for i in range(150)],
    "underscore header": ["X_Forwarded_For: 10.0.0.1"],
}

_UNIMPLEMENTED_CODINGS = frozenset({"Transfer-Encoding gzip", "Transfer-Encoding gzip, chunked",
                                    "Transfer-Encoding unknown"})
"""Head damages that ask for a transfer coding the server does not implement."""

"""Heads gunicorn (or the fast lane) must refuse, as extra header lines."""

LINE_DAMAGE = {
    "HTTP/1.0": lambda m, t: f"{m} {t} HTTP/1.0",
    "HTTP/9.9": lambda m, t: f"{m} {t} HTTP/9.9",
    "lower-case method": lambda m, t: f"{m.lower()} {t} HTTP/1.1",
    "absolute URI": lambda m, t: f"{m} http://127.0.0.1{t} HTTP/1.1",
    "target over 4 KiB": lambda m, t: f"{m} {t}?{'a' * 5000} HTTP/1.1",
    "extra word": lambda m, t: f"{m} {t} HTTP/1.1 extra",
    "no target": lambda m, t: f"{m} HTTP/1.1",
}
"""Request lines other than ``METHOD /target HTTP/1.1``."""


def damaged_head(case: Case) -> bytes:
    """``case`` with its head damaged as ``case.damage`` names (a HEAD_DAMAGE or LINE_DAMAGE)."""
    plain = case.plain()
    head, _, _ = plain.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    if case.damage in LINE_DAMAGE:
        lines[0] = LINE_DAMAGE[case.damage](case.method, case.target())
    else:
        extra = HEAD_DAMAGE[case.damage]
        lines = [line for line in lines if not (extra[0].startswith(("Content-Length", "Transfer-Encoding"))
                                                and line.startswith("Content-Length"))] + extra
    return "\r\n".join(lines).encode("latin-1") + b"\r\n\r\n" + case.body


CONTENT_TYPES = [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=xyz",
                 "application/json; charset=utf-16", "application/octet-stream", "application/json;;;"]


@st.composite
def cases(draw: Any, verb: str) -> Case:
    """A mutated golden body of ``verb`` and how it is sent."""
    doc, notes = draw(mutated_doc(verb))
    body = draw(body_bytes(doc, notes))
    if len(body) > MAX_BYTES:
        notes.append(f"cut from {len(body)} bytes")
        body = body[:MAX_BYTES]
    case = Case(verb, body, notes)
    http = draw(st.sampled_from(["plain"] * 30 + ["content-type", "content-type", "method", "path", "query",
                                                  "chunked", "chunked", "expect", "pipelined", "pipelined",
                                                  "short", "long", "oversized", "oversized", "bad-chunks",
                                                  "bad-head", "bad-head", "fragmented", "fragmented"]))
    if http in ("short", "long", "bad-chunks", "bad-head", "fragmented") and len(body) > ONE_SHOT_BYTES:
        http = "plain"  # the server may answer before reading it all: a larger body would be reset in flight
    if http == "content-type":
        case.content_type = draw(st.sampled_from(CONTENT_TYPES))
    elif http == "method":
        case.method = draw(st.sampled_from(["GET", "PUT", "DELETE", "PATCH"]))
    elif http == "path":
        case.path = draw(st.sampled_from([f"{PREFIX}/{verb}/", f"{PREFIX}//{verb}", f"{PREFIX}/{verb.upper()}",
                                          f"/{verb}", f"{PREFIX}/{verb}%00", f"{PREFIX}/{verb}/../{verb}"]))
    elif http == "query":
        case.path = f"{PREFIX}/{verb}" + draw(st.sampled_from(["?pretty", "?x=1&&=", "?%zz", "?pretty=false#f"]))
    elif http == "oversized":
        case.framing = draw(st.sampled_from(["oversized", "oversized-chunked"]))
        case.body = body + b" " * max(1, draw(st.integers(1, MAX_BYTES - LIMIT)) + LIMIT - len(body))
    elif http == "bad-chunks":
        case.framing, case.damage = http, draw(st.sampled_from(sorted(CHUNK_DAMAGE)))
    elif http == "bad-head":
        case.framing, case.damage = http, draw(st.sampled_from(sorted(HEAD_DAMAGE) + sorted(LINE_DAMAGE)))
    elif http == "fragmented":
        case.framing = http
        case.cuts = sorted(draw(st.lists(st.integers(1, len(case.plain()) - 1), max_size=8, unique=True)))
    elif http != "plain":
        case.framing = http
    return case
