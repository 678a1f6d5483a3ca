"""Runs plugins: the registry, profiles, the Framework per profile, the Permit waiting room, the
handle plugins are given, and the Engine that answers the four extender verbs (scheduling,
preemption and binding cycles) over the cache and the queue."""
