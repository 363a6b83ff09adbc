"""The job directory: its layout (one owner of every path), identity, lock, registry,
resume proof, stop requests and the summary a job leaves."""
