"""Which request ``Transfer-Encoding`` kube-extender reads, and the answer to any other: one
verdict for both workers (``extender.api.workers`` over gunicorn's parser, ``extender.api.http1``
over llhttp), whichever parser noticed the problem first - but for the two cases the parsers
hide from it (a coding gunicorn does not know, ``extender.api.workers``; a tab ending the field,
below).

The extender reads exactly one coding, ``chunked`` (any case, spaces around), in an HTTP/1.1
request without Content-Length. A request's Transfer-Encoding fields are one list (RFC 9110 5.3),
and each of these is a 400 that closes the connection:

* ``chunked`` that is not the final coding, or comes more than once: the body's length is
  unknown (RFC 9112 6.3);
* Transfer-Encoding in an HTTP/1.0 request, or beside Content-Length: framing to be treated as
  faulty (RFC 9112 6.1);
* an empty list element, or a tab beside a coding: RFC 9110 lets a recipient skip the one and
  read the other as whitespace, but llhttp (the fast lane's parser) refuses both, gunicorn the
  first, and a framing header is no place to guess. (A tab that ends the field is the one
  difference left: gunicorn strips it, as whitespace around a field value, and gthread reads
  ``chunked<TAB>``; llhttp hands it on and refuses it.)

Any other coding, alone or before a final ``chunked`` (``gzip``, ``br, chunked``), is one the
extender does not implement: 501 (RFC 9112 6.1) naming the first field that is not ``chunked``.
(A lone ``gzip`` is also "not chunked last"; the 501 says more than a 400 would.) A coding with
parameters (``chunked;x=1``) is not ``chunked``.
"""

from __future__ import annotations

from typing import Iterable

UNFRAMED = "Transfer-Encoding: chunked must be the final coding, and come once (RFC 9112 6.3)"
EMPTY = "Transfer-Encoding has an empty element"
TAB = "Transfer-Encoding: a tab beside a coding is not read"
HTTP10 = "Transfer-Encoding in an HTTP/1.0 request (RFC 9112 6.1)"
WITH_LENGTH = "Transfer-Encoding with Content-Length (RFC 9112 6.1)"


def refusal(values: Iterable[str], *, length: bool = False, http10: bool = False) -> tuple[int, str] | None:
    """None when the Transfer-Encoding field ``values`` (in order; none at all: no coding) are
    exactly ``chunked``; else the status and message to answer with and close the connection.
    ``length``: the request has a Content-Length too; ``http10``: it is HTTP/1.0."""
    fields = list(values)
    if not fields:
        return None
    elements = [e.strip(" ").lower() for value in fields for e in value.split(",")]
    if "" in elements:
        return 400, EMPTY
    if any("\t" in e for e in elements):
        return 400, TAB
    if http10:
        return 400, HTTP10
    if length:
        return 400, WITH_LENGTH
    if "chunked" in elements and (elements[-1] != "chunked" or elements.count("chunked") > 1):
        return 400, UNFRAMED
    if elements != ["chunked"]:
        first = next(v for v in fields if v.strip(" ").lower() != "chunked")
        return 501, f"Unsupported transfer coding: {first!r}"
    return None
