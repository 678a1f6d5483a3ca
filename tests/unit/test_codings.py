"""The one verdict both workers give a request's Transfer-Encoding (``extender.api.codings``).
Over real sockets, for both workers: tests/integration/test_wire_fuzz_http.py."""

from __future__ import annotations

import pytest

from extender.api.codings import EMPTY, HTTP10, TAB, UNFRAMED, WITH_LENGTH, refusal


@pytest.mark.parametrize("values, want", [
    ([], None),
    (["chunked"], None),
    (["Chunked"], None),
    ([" CHUNKED "], None),
    (["chunked\t"], (400, TAB)),
    (["br\t"], (400, TAB)),
    (["gzip"], (501, "Unsupported transfer coding: 'gzip'")),
    (["identity"], (501, "Unsupported transfer coding: 'identity'")),
    (["gzip, chunked"], (501, "Unsupported transfer coding: 'gzip, chunked'")),
    (["br,chunked"], (501, "Unsupported transfer coding: 'br,chunked'")),
    (["gzip", "chunked"], (501, "Unsupported transfer coding: 'gzip'")),
    (["chunked;x=1"], (501, "Unsupported transfer coding: 'chunked;x=1'")),
    (["chunked;x=1, gzip"], (501, "Unsupported transfer coding: 'chunked;x=1, gzip'")),
    (["chunked, gzip"], (400, UNFRAMED)),
    (["Chunked , GZIP"], (400, UNFRAMED)),
    (["chunked\t, gzip"], (400, TAB)),
    (["chunked", "gzip"], (400, UNFRAMED)),
    (["chunked", "br"], (400, UNFRAMED)),
    (["chunked, chunked"], (400, UNFRAMED)),
    (["chunked", "chunked"], (400, UNFRAMED)),
    (["gzip, chunked, chunked"], (400, UNFRAMED)),
    (["chunked, gzip;q=1"], (400, UNFRAMED)),
    (["chunked,"], (400, EMPTY)),
    (["chunked,,"], (400, EMPTY)),
    ([",chunked"], (400, EMPTY)),
    (["chunked", ""], (400, EMPTY)),
    ([""], (400, EMPTY)),
], ids=repr)
def test_only_one_final_chunked_is_read(values: list[str], want: tuple[int, str] | None) -> None:
    """RFC 9112 6.3: ``chunked`` not last or more than once leaves the body's length unknown, a
    400; any other coding is one the extender does not implement, a 501 naming the first field
    that is not ``chunked``; an empty element is a 400 (gunicorn and llhttp refuse it)."""
    assert refusal(values) == want


@pytest.mark.parametrize("values, length, http10, want", [
    (["chunked"], True, False, (400, WITH_LENGTH)),
    (["gzip"], True, False, (400, WITH_LENGTH)),
    (["chunked"], False, True, (400, HTTP10)),
    (["gzip, chunked"], False, True, (400, HTTP10)),
    ([], True, True, None),
    (["chunked,"], True, True, (400, EMPTY)),
], ids=repr)
def test_framing_beside_transfer_encoding_is_faulty(values: list[str], length: bool, http10: bool,
                                                    want: tuple[int, str] | None) -> None:
    """RFC 9112 6.1: Transfer-Encoding in HTTP/1.0, or with Content-Length, is framing to treat as
    faulty - a 400, before any coding's 501 (llhttp refuses both before the fast lane looks)."""
    assert refusal(values, length=length, http10=http10) == want
