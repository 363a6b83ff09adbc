"""Running the plan: segments on partitions, ops on tables, global ops, Ray dispatch, the
failure-rate guard."""
