"""CapacityQuota: elastic quotas per namespace (guaranteed min, max, borrowing and reclaim)."""
