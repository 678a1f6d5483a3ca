"""The one verdict both workers give a request's Transfer-Encoding (``extender.api.codings``).
Over real sockets, for both workers: tests/integration/test_wire_fuzz_http.py."""

from __future__ import annotations

import pytest

from extender.api.codings import EMPTY, UNFRAMED, refusal


@pytest.mark.parametrize("values, want", [
    ([], None),
    (["chunked"], None),
    (["Chunked"], None),
    ([" CHUNKED\t"], None),
    (["gzip"], (501, "Unsupported transfer coding: 'gzip'")),
    (["identity"], (501, "Unsupported transfer coding: 'identity'")),
    (["gzip, chunked"], (501, "Unsupported transfer coding: 'gzip, chunked'")),
    (["br,chunked"], (501, "Unsupported transfer coding: 'br,chunked'")),
    (["gzip", "chunked"], (501, "Unsupported transfer coding: 'gzip'")),
    (["chunked;x=1"], (501, "Unsupported transfer coding: 'chunked;x=1'")),
    (["chunked;x=1, gzip"], (501, "Unsupported transfer coding: 'chunked;x=1, gzip'")),
    (["chunked, gzip"], (400, UNFRAMED)),
    (["Chunked , GZIP"], (400, UNFRAMED)),
    (["chunked\t, gzip"], (400, UNFRAMED)),
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
