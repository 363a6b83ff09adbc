"""What a job tells people and tools: the event log, progress logs and the tracer."""
