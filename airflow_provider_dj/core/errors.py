"""``DJError``: the one base of every error this provider raises on purpose.

Why one base: a DAG author or a script can catch "anything the provider refused or could not do"
with one ``except DJError`` and let real bugs (``TypeError``, ...) through.  The existing names stay
where users import them from; each also keeps its old built-in base (``ValueError``,
``RuntimeError``, ``KeyError``), so an ``except ValueError`` written against an earlier release
still catches what it caught.
"""

from __future__ import annotations


class DJError(Exception):
    """Base class of the provider's own errors: the message says what went wrong and what to do."""


class RefusedError(DJError):
    """A refusal before any work: nothing was planned, written or computed, so there is nothing to resume.

    Why a base: a caller tells "fix the named thing and run again" (a bad recipe, input, job id or
    resume; a plan no worker could hold; a job another run holds) from a failure mid-job (resume it)
    with one ``isinstance``; the CLI exits 2 for these, and the DAG's first tasks fail them without
    retry, since a retry would be refused the same way.
    """
