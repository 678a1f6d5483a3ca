"""Fuzzing the wire over real HTTP: generated requests against ``kube-extender serve``, judged by
an oracle written from the extender contract, not from the server's code.

* ``bodies``: what is sent. Mutations of the golden payloads in ``tests/payloads/`` (what
  kube-scheduler v1.30 and v1.36 really sent), drawn with hypothesis: wrong types, missing and
  null fields, huge numbers, negative and malformed quantities, deep nesting, unicode, key case
  and duplicate keys, the other request forms (full Node objects, full victim pods); then byte
  damage (truncation, trailing garbage, invalid UTF-8, a BOM, NaN); then how it travels: other
  methods, paths and content types, bodies over ``server.maxRequestBytes``, chunked bodies
  (well-formed or broken), ``Expect: 100-continue``, pipelined requests, requests written in
  pieces, Content-Length lies and damaged heads (the gevent worker's fast lane parses HTTP
  itself).
* ``oracle``: every reply is a 200 with a valid answer for its verb, or a 4xx whose JSON body
  names the problem (details in ``oracle.judge``). No 5xx: a body that makes the server fail
  inside is a bad body, and bad bodies get a 400 (the one exception: HTTP's 501 for a transfer
  coding the server does not implement). Every reply must also be one ``docs/openapi.yaml``
  gives (``tests/openapi_doc.py``).
* ``client`` and ``server``: a raw-socket HTTP/1.1 client (requests written byte for byte,
  replies read in order) and the real server as a subprocess (either worker).
* ``run``: the ``Fuzzer`` sends the cases, keeps the counts, and checks the server itself: the
  cache digest (``/debug/snapshot``) may only change after a bind that answered success; after
  every batch ``/healthz`` and a known-good filter answer and the worker is the same process;
  at the end no internal error was counted or logged.

``tests/integration/test_wire_fuzz_http.py`` runs a short seeded fuzz in the suite;
``benchmarks/fuzz_wire.py`` the full one, with a report.
"""

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
VERBS = ("filter", "prioritize", "preempt", "bind")
WORKERS = ("gevent", "gthread")
PREFIX = "/scheduler"
