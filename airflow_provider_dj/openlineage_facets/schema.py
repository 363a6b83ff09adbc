"""The run facet's JSON schema: the file shipped in this package and the URL events name it by.

Why a version in the file name: a catalogue keys a custom facet by its ``_schemaURL``; a change that
removes or retypes a field gets a new file and a new URL, so events of both versions stay readable.
Adding an optional field keeps the version.
"""

from __future__ import annotations

import os

#: The facet's name in ``run.facets`` (custom facets are prefixed with their producer's name).
FACET_KEY = "dataJuicerJob"
FACET_NAME = "DataJuicerJobRunFacet"
SCHEMA_VERSION = "1-0-0"
SCHEMA_FILE = f"{FACET_NAME}-{SCHEMA_VERSION}.json"
#: Where the schema file is published: the package's source tree, at its path in the package.
SCHEMA_BASE_URL = (
    "https://github.com/airflow-provider-dj/airflow-provider-dj/blob/main/airflow_provider_dj/openlineage_facets/schema"
)
SCHEMA_URL = f"{SCHEMA_BASE_URL}/{SCHEMA_FILE}#/$defs/{FACET_NAME}"


def schema_path() -> str:
    """The schema file in the installed package (a consumer validates events against it)."""
    return os.path.join(os.path.dirname(__file__), "schema", SCHEMA_FILE)
