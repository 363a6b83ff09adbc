"""One task's ``OperatorLineage``: the job's facts (``job_facts.py``) as OpenLineage datasets and facets.

Which task reports what:

* ``validate``, the partition tasks of the first segment and ``export`` read the input: it is their
  input dataset, with the fields the input check reads (a schema facet).  Later segments and the
  global steps read only the job's checkpoints and keys, which are not datasets of the catalogue.
* ``export`` writes the export: its output dataset, with its fields, the output statistics (rows and
  bytes, once written) and the column lineage of the text key from the input's text key through the
  recipe's ops (mappers: a direct transformation; filters and deduplicators: an indirect filter).
* Every task's run carries ``DataJuicerJobRunFacet`` with the job's funnel as far as it has run.

Importing this module imports the OpenLineage client and the provider's ``OperatorLineage``; only
``operators/openlineage.py`` imports it, once it knows the provider is installed and enabled.
"""

from __future__ import annotations

from dataclasses import dataclass

from airflow.providers.openlineage.extractors import OperatorLineage
from openlineage.client.event_v2 import InputDataset, OutputDataset
from openlineage.client.facet_v2 import column_lineage_dataset, output_statistics_output_dataset, schema_dataset

from airflow_provider_dj.openlineage_facets.job_facts import DatasetFacts, JobFacts, SchemaField, read_job_facts
from airflow_provider_dj.openlineage_facets.run_facet import run_facet
from airflow_provider_dj.openlineage_facets.schema import FACET_KEY

STEPS = ("validate", "partitions", "global", "export")
_FILTER_KINDS = ("filter", "deduplicator")


@dataclass(frozen=True)
class StepScope:
    """Which part of the job a task runs: its kind, and its segment, partitions or global op."""

    step: str
    segment_index: int | None = None
    partition_ids: list[int] | None = None
    global_op_index: int | None = None

    @property
    def reads_input(self) -> bool:
        return self.step in ("validate", "export") or (self.step == "partitions" and self.segment_index == 0)

    @property
    def writes_export(self) -> bool:
        return self.step == "export"


def _schema_facet(fields: tuple[SchemaField, ...]) -> schema_dataset.SchemaDatasetFacet:
    def one(f: SchemaField) -> schema_dataset.SchemaDatasetFacetFields:
        return schema_dataset.SchemaDatasetFacetFields(name=f.name, type=f.type, fields=[one(x) for x in f.fields])

    return schema_dataset.SchemaDatasetFacet(fields=[one(f) for f in fields])


def _input_dataset(ds: DatasetFacts) -> InputDataset:
    facets = {"schema": _schema_facet(ds.fields)} if ds.fields else {}
    return InputDataset(namespace=ds.namespace, name=ds.name, facets=facets)


def text_key_transformations(ops: tuple[tuple[str, str], ...]) -> list[column_lineage_dataset.Transformation]:
    """How the recipe's ops made the export's text key from the input's: what mappers changed, what the
    filters and deduplicators kept."""
    mappers = [name for name, kind in ops if kind not in _FILTER_KINDS]
    filters = [name for name, kind in ops if kind in _FILTER_KINDS]
    out = [
        column_lineage_dataset.Transformation(
            type="DIRECT",
            subtype="TRANSFORMATION" if mappers else "IDENTITY",
            description=", ".join(mappers) or None,
            masking=False,
        )
    ]
    if filters:
        out.append(
            column_lineage_dataset.Transformation(
                type="INDIRECT", subtype="FILTER", description=", ".join(filters), masking=False
            )
        )
    return out


def _column_lineage(facts: JobFacts) -> column_lineage_dataset.ColumnLineageDatasetFacet:
    key = facts.text_key
    transformations = text_key_transformations(facts.ops)
    inputs = [
        column_lineage_dataset.InputField(
            namespace=ds.namespace, name=ds.name, field=key, transformations=list(transformations)
        )
        for ds in facts.inputs
    ]
    described = " -> ".join(name for name, _kind in facts.ops) or "no ops"
    return column_lineage_dataset.ColumnLineageDatasetFacet(
        fields={key: column_lineage_dataset.Fields(inputFields=inputs, transformationDescription=described)}
    )


def _export_dataset(facts: JobFacts) -> OutputDataset:
    export = facts.export
    facets: dict = {"columnLineage": _column_lineage(facts)}
    if export.dataset.fields:
        facets["schema"] = _schema_facet(export.dataset.fields)
    output_facets = {}
    if export.written:
        output_facets["outputStatistics"] = output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
            rowCount=export.rows, size=export.bytes, fileCount=1
        )
    return OutputDataset(
        namespace=export.dataset.namespace, name=export.dataset.name, facets=facets, outputFacets=output_facets
    )


def operator_lineage(job_dir: str, scope: StepScope, *, final_since: float | None = None) -> OperatorLineage:
    """The lineage of one task of the job in ``job_dir`` (planned by validate), as of now.

    ``final_since``: for a failing task, when it started (``job_facts.read_job_facts``)."""
    facts = read_job_facts(job_dir, with_schema=scope.reads_input or scope.writes_export, final_since=final_since)
    facet = run_facet(
        facts,
        scope.step,
        segment_index=scope.segment_index,
        partition_ids=scope.partition_ids,
        global_op_index=scope.global_op_index,
    )
    return OperatorLineage(
        inputs=[_input_dataset(ds) for ds in facts.inputs] if scope.reads_input else [],
        outputs=[_export_dataset(facts)] if scope.writes_export else [],
        run_facets={FACET_KEY: facet},
    )
