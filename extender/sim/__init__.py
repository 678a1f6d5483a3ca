"""An emulator of the parts of kube-scheduler that talk to extenders (``kube-extender simulate``).

Built from kube-scheduler's source (1.29 to 1.36) and from what a real kube-scheduler was seen
doing. Section marks in the docstrings here and in ``tests/e2e`` name the parts of that
behaviour:

====== ==========================================================================================
§1     the wire types (``k8s.io/kube-scheduler/extender/v1``): JSON keys, structs
§2     the ``extenders[]`` configuration: fields and defaults (§2.1), ``validateExtenders``
       (§2.2), start-up side effects and call order in ``buildExtenders`` (§2.3)
§3     ``HTTPExtender`` (``pkg/scheduler/extender.go``): building requests (§3.1), TLS
       (§3.2), replies and errors (§3.3), each verb (§3.4), ``IsInterested`` and friends
       (§3.5), ``nodeCacheCapable`` (§3.6), how Filter results feed back (§3.7)
§4     extenders in the scheduling cycle (``schedule_one.go``): order of operations (§4.1), how
       many nodes an extender sees (§4.2), errors in the Filter chain (§4.3), score combination
       (§4.4)
§5     the binding cycle (§5.1), what a binder must do (§5.2), bind failure (§5.3), concurrency
       (§5.4)
§6     preemption: when the preempt verb is called (§6.1), ``convertToVictims`` (§6.2), after
       the extenders (§6.3), failed versus unresolvable versus omitted nodes (§6.4)
§7     requeueing of pods an extender rejected
§8     upstream's extender tests (§8.1 ``TestSchedulerExtender``, §8.2 unit scenarios)
§10    what differs between releases
§12    points that are easy to get wrong
§13    observed with a real kube-scheduler (1.30, 1.36): request headers and gzip (§13.1),
       pods without kind (§13.2), a shortage of an ``ignoredByScheduler`` resource alone never
       reaches the preempt verb (§13.4), an unreachable extender backs the pod off (§13.6),
       scheduling gates as PreEnqueue (§13.8)
====== ==========================================================================================

The packages:

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
(1.32+), asynchronous preemption (1.33+), graceful termination unless asked for
(``graceful_termination``; without it deleted pods and victims disappear at once), PDB status
bookkeeping, multiple profiles with different plugin sets, HTTP/2, proxies and the TLS
``serverName`` override.
"""
