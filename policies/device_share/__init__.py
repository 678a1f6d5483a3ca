"""DeviceShare: fractional sharing of accelerators at device level (memory, compute, whole devices)."""
