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
