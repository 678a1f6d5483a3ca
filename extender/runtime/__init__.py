"""Runs plugins: the registry, profiles, the Framework per profile, the Permit waiting room, and
the Engine that answers the four extender verbs over the cache."""
