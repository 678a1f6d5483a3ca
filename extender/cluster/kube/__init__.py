"""Kubernetes as a cluster source and writer: list+watch, Binding, patches, eviction, events and
leader election, through the official ``kubernetes`` client's configuration, auth and transport
(raw JSON in and out: no generated model objects on the hot path)."""
