"""Label and field selectors with Kubernetes semantics.

Contract:
    * :func:`parse_label_selector` implements the string grammar of ``labels.Parse``:
      comma-joined requirements ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``,
      ``k`` (exists), ``!k`` (does not exist), ``k>n`` / ``k<n`` (integer comparison).
      ``!=`` and ``notin`` also match objects that lack the key (as Kubernetes does).
      Malformed input raises :class:`SelectorError` (answered as 400 BadRequest).
    * :func:`label_selector_from_object` converts a ``metav1.LabelSelector`` dict
      (``matchLabels`` / ``matchExpressions``) into the same matcher; an empty selector matches
      everything, ``None`` matches nothing (policy/v1 PDB semantics are decided by the caller).
    * :func:`parse_field_selector` implements ``fields.ParseSelector``: comma-joined
      ``field=value`` / ``field==value`` / ``field!=value`` with ``\\`` escapes. The caller
      validates field names against what the resource supports. A missing field compares as
      the empty string, so ``spec.nodeName=`` selects unscheduled pods.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

__all__ = [
    "SelectorError",
    "LabelRequirement",
    "LabelSelector",
    "FieldRequirement",
    "FieldSelector",
    "parse_label_selector",
    "label_selector_from_object",
    "parse_field_selector",
]


class SelectorError(ValueError):
    """A selector string or object that cannot be parsed."""


_KEY = r"[A-Za-z0-9](?:[A-Za-z0-9._/-]*[A-Za-z0-9])?"
_VALUE = r"(?:[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)?"
_RE_NOT_EXISTS = re.compile(rf"^\s*!\s*({_KEY})\s*$")
_RE_EXISTS = re.compile(rf"^\s*({_KEY})\s*$")
_RE_SET = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s*\((.*)\)\s*$")
_RE_CMP = re.compile(rf"^\s*({_KEY})\s*(==|=|!=|>|<)\s*({_VALUE})\s*$")
_RE_VALUE = re.compile(rf"^{_VALUE}$")


@dataclass(frozen=True)
class LabelRequirement:
    """One label requirement; ``op`` is one of ``=, !=, in, notin, exists, !, gt, lt``."""

    key: str
    op: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.op
        if op == "=":
            v = labels.get(self.key)
            return v is not None and v in self.values
        if op == "in":
            return self.key in labels and labels[self.key] in self.values
        if op == "!=" or op == "notin":
            return self.key not in labels or labels[self.key] not in self.values
        if op == "exists":
            return self.key in labels
        if op == "!":
            return self.key not in labels
        if op in ("gt", "lt"):
            if self.key not in labels:
                return False
            try:
                have = int(labels[self.key])
            except ValueError:
                return False
            want = int(next(iter(self.values)))
            return have > want if op == "gt" else have < want
        raise AssertionError(op)  # pragma: no cover


@dataclass(frozen=True)
class LabelSelector:
    """A conjunction of :class:`LabelRequirement`; ``match_nothing`` models a null selector."""

    requirements: tuple[LabelRequirement, ...] = ()
    match_nothing: bool = False

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        if self.match_nothing:
            return False
        lab = labels or {}
        for r in self.requirements:
            if not r.matches(lab):
                return False
        return True

    def matches_object(self, obj: Mapping[str, Any]) -> bool:
        return self.matches((obj.get("metadata") or {}).get("labels"))

    @property
    def empty(self) -> bool:
        return not self.requirements and not self.match_nothing


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError(f"unable to parse requirement: unbalanced ')' in {text!r}")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise SelectorError(f"unable to parse requirement: unbalanced '(' in {text!r}")
    parts.append("".join(cur))
    return parts


def _check_value(v: str, raw: str) -> str:
    if len(v) > 63 or not _RE_VALUE.match(v):
        raise SelectorError(f"unable to parse requirement: invalid label value: {v!r} in {raw!r}")
    return v


def parse_label_selector(text: str | None) -> LabelSelector:
    """Parse a ``labelSelector`` query value; empty/``None`` selects everything."""
    if text is None or not text.strip():
        return LabelSelector()
    reqs: list[LabelRequirement] = []
    for part in _split_top_level(text):
        if not part.strip():
            raise SelectorError(f"unable to parse requirement: found '', expected: identifier in {text!r}")
        m = _RE_SET.match(part)
        if m:
            vals = [v.strip() for v in m.group(3).split(",")]
            if m.group(2) == "in" and vals == [""]:
                raise SelectorError(f"unable to parse requirement: for 'in' operator, values set can't be empty: {part!r}")
            reqs.append(LabelRequirement(m.group(1), m.group(2), frozenset(_check_value(v, part) for v in vals)))
            continue
        m = _RE_CMP.match(part)
        if m:
            key, op, val = m.group(1), m.group(2), m.group(3)
            if op in (">", "<"):
                if not re.fullmatch(r"-?\d+", val):
                    raise SelectorError(f"unable to parse requirement: for 'Gt', 'Lt' operators, the value must be an integer: {part!r}")
                reqs.append(LabelRequirement(key, "gt" if op == ">" else "lt", frozenset([val])))
            else:
                reqs.append(LabelRequirement(key, "!=" if op == "!=" else "=", frozenset([_check_value(val, part)])))
            continue
        m = _RE_NOT_EXISTS.match(part)
        if m:
            reqs.append(LabelRequirement(m.group(1), "!"))
            continue
        m = _RE_EXISTS.match(part)
        if m:
            reqs.append(LabelRequirement(m.group(1), "exists"))
            continue
        raise SelectorError(f"unable to parse requirement: {part.strip()!r} is not a valid label requirement")
    return LabelSelector(tuple(reqs))


def label_selector_from_object(sel: Mapping[str, Any] | None) -> LabelSelector:
    """Convert a ``metav1.LabelSelector``; ``None`` matches nothing, ``{}`` matches everything."""
    if sel is None:
        return LabelSelector(match_nothing=True)
    if not isinstance(sel, Mapping):
        raise SelectorError("label selector must be an object")
    reqs: list[LabelRequirement] = []
    for k, v in (sel.get("matchLabels") or {}).items():
        reqs.append(LabelRequirement(str(k), "=", frozenset([str(v)])))
    for expr in sel.get("matchExpressions") or []:
        if not isinstance(expr, Mapping):
            raise SelectorError("matchExpressions entries must be objects")
        key = str(expr.get("key", ""))
        op = expr.get("operator")
        values = frozenset(str(x) for x in (expr.get("values") or []))
        if op == "In":
            reqs.append(LabelRequirement(key, "in", values))
        elif op == "NotIn":
            reqs.append(LabelRequirement(key, "notin", values))
        elif op == "Exists":
            reqs.append(LabelRequirement(key, "exists"))
        elif op == "DoesNotExist":
            reqs.append(LabelRequirement(key, "!"))
        else:
            raise SelectorError(f"{op!r} is not a valid label selector operator")
    return LabelSelector(tuple(reqs))


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    op: str  # "=" or "!="
    value: str


@dataclass(frozen=True)
class FieldSelector:
    """A conjunction of field requirements evaluated through a per-resource field getter."""

    requirements: tuple[FieldRequirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.requirements

    def fields(self) -> set[str]:
        return {r.field for r in self.requirements}

    def matches(self, obj: Mapping[str, Any], getter: Callable[[Mapping[str, Any], str], str]) -> bool:
        for r in self.requirements:
            have = getter(obj, r.field)
            if (have == r.value) != (r.op == "="):
                return False
        return True


def _split_unescaped(text: str, sep: str) -> list[str]:
    out: list[str] = []
    cur: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            cur.append(text[i : i + 2])
            i += 2
            continue
        if ch == sep:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
        i += 1
    out.append("".join(cur))
    return out


def _unescape(v: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(v):
        if v[i] == "\\":
            if i + 1 >= len(v) or v[i + 1] not in "\\,=!":
                raise SelectorError(f"invalid field selector: invalid escape sequence in {v!r}")
            out.append(v[i + 1])
            i += 2
        else:
            out.append(v[i])
            i += 1
    return "".join(out)


def parse_field_selector(text: str | None) -> FieldSelector:
    """Parse a ``fieldSelector`` query value; empty/``None`` selects everything."""
    if text is None or not text.strip():
        return FieldSelector()
    reqs: list[FieldRequirement] = []
    for term in _split_unescaped(text, ","):
        if not term:
            continue
        # find the first unescaped operator
        i = 0
        op = None
        while i < len(term):
            if term[i] == "\\":
                i += 2
                continue
            if term.startswith("!=", i):
                op = "!="
                break
            if term.startswith("==", i):
                op = "=="
                break
            if term[i] == "=":
                op = "="
                break
            i += 1
        if op is None:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{term}'")
        field = term[:i].strip()
        value = _unescape(term[i + len(op) :])
        if not field:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{term}'")
        reqs.append(FieldRequirement(field, "!=" if op == "!=" else "=", value))
    return FieldSelector(tuple(reqs))
