"""Gang: all-or-nothing admission and binding of a pod group (coscheduling)."""
