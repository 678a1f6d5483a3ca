"""An emulator of the parts of kube-scheduler that talk to extenders (``kube-extender simulate``).

Built from ``shared/spec/extender-protocol.md`` (section numbers in the docstrings refer to it)
and ``shared/spec/scheduling-framework.md``:

* ``config``      the scheduler side: ``extenders[]`` entries, validation (§2.2), call order
                  (§2.3), queue knobs, the ``version`` switch ("1.29" / "1.30" and later, §10);
* ``gojson``      Go's encoding/json: compact requests, strict decoding of the four replies;
* ``client``      ``HTTPExtender`` verb by verb, over HTTP, a Flask app in-process, or a callable;
* ``cache``       nodes, bound and assumed pods, snapshots;
* ``filters``     in-tree Filter/Score plugins (a documented subset);
* ``queue``       activeQ / backoffQ / unschedulable pool / gated pods (§7);
* ``preemption``  DefaultPreemption's dry run, ``callExtenders``, candidate selection (§6);
* ``scheduler``   scheduling cycles, extender chains, asynchronous binding cycles, virtual time;
* ``workload``    workload files; ``report``: text, JSON and SVG reports; ``cli``: ``simulate``.

Not emulated: volume, port, topology-spread and inter-pod-affinity plugins, DRA, QueueingHints
(1.32+), asynchronous preemption (1.33+), graceful termination (victims disappear at once),
PDB status bookkeeping, multiple profiles with different plugin sets, HTTP/2, proxies and the TLS
``serverName`` override.
"""
