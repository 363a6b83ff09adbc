"""Recipe -> plan: segments between global ops, execution groups, concurrency, decisions."""
