"""The job directory's primitives: its layout (one owner of every path), identity, lock, registry,
stop requests, integrity checksums, the event log, progress logs and fault injection.  They import
only ``core/``, settings and the layout, so every engine layer above can use them; what needs the
recipe, the plan or the checkpoints (setup, summary, status) is in ``engine/job/``."""
