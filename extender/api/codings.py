"""Which request ``Transfer-Encoding`` kube-extender reads, and the answer to any other: one
verdict for both workers (``extender.api.workers`` over gunicorn's parser, ``extender.api.http1``
over llhttp), whichever parser noticed the problem first.

The extender reads exactly one coding, ``chunked`` (any case, spaces or tabs around). A request's
Transfer-Encoding fields are one list (RFC 9110 5.3), and:

* ``chunked`` that is not the final coding, or comes more than once, leaves the body's length
  unknown: 400 (RFC 9112 6.3), and the connection closes;
* an empty list element is a 400 too - RFC 9110 5.6.1 lets a recipient skip it, but gunicorn
  and llhttp refuse it and a framing header is no place to guess;
* any other coding, alone or before a final ``chunked`` (``gzip``, ``br, chunked``), is one the
  extender does not implement: 501 (RFC 9112 6.1). (A lone ``gzip`` is also "not chunked last";
  the 501 says more than a 400 would.) A coding with parameters (``chunked;x=1``) is not
  ``chunked``.
"""

from __future__ import annotations

from typing import Iterable

UNFRAMED = "Transfer-Encoding: chunked must be the final coding, and come once (RFC 9112 6.3)"
EMPTY = "Transfer-Encoding has an empty element"


def refusal(values: Iterable[str]) -> tuple[int, str] | None:
    """None when the Transfer-Encoding field ``values`` (in order; none at all: no coding) are
    exactly ``chunked``; else the status and message to answer with and close the connection."""
    fields = list(values)
    elements = [e.strip(" \t").lower() for value in fields for e in value.split(",")]
    if not elements:
        return None
    if "" in elements:
        return 400, EMPTY
    if "chunked" in elements and (elements[-1] != "chunked" or elements.count("chunked") > 1):
        return 400, UNFRAMED
    if elements != ["chunked"]:
        first = next(v for v in fields if v.strip(" \t").lower() != "chunked")
        return 501, f"Unsupported transfer coding: {first!r}"
    return None
