"""Every error the provider raises on purpose, importable from one place.

    from airflow_provider_dj.exceptions import DJError, RefusedError, PartitionFailedError

Each class is defined beside the code that raises it; this module only re-exports them, so a caller
never needs to know which module that is.  What to catch (docs/python_api.md, "Errors"):

* ``DJError``: anything the provider refused or could not do (a bug, ``TypeError`` say, is not one).
* ``RefusedError``: refused before any work (a bad recipe, input, job id or resume; a plan no worker
  could hold; a job another run holds): nothing was written, fix the named thing and run again.
* ``PartitionFailedError`` (its ``cause`` is the op's error), ``FailureRateExceededError``: the job
  failed while it ran; its committed checkpoints are kept and ``resume=`` continues it.
* ``JobStopped``: a stop was requested (``dj-airflow stop``); resume continues it too.

Names are resolved on first use, so importing this module imports neither the engine nor Airflow,
and using one name imports only the module that defines it.
"""

from __future__ import annotations

from airflow_provider_dj.core.errors import DJError, RefusedError  # noqa: F401 - re-exported (__all__)
from airflow_provider_dj.core.lazy import lazy_exports

_BY_MODULE = {
    # Files, credentials, the host seam, write roots (core/), and the provider's settings.
    "airflow_provider_dj.core.fs": ("StorageFullError",),
    "airflow_provider_dj.core.host": ("HostUnavailableError",),
    "airflow_provider_dj.core.storage_options": ("StorageConfigError",),
    "airflow_provider_dj.core.write_roots": ("WriteOutsideRootsError",),
    "airflow_provider_dj.settings": ("SettingError",),
    # The recipe and its templates.
    "airflow_provider_dj.engine.config.schema": ("RecipeError",),
    "airflow_provider_dj.engine.config.path_confinement": ("PathOutsideRootsError",),
    "airflow_provider_dj.engine.config.templates": ("TemplateRenderError",),
    "airflow_provider_dj.dag_builder.templating": ("LogicalDateError",),
    "airflow_provider_dj.ops.registry": ("UnknownOpError",),
    "airflow_provider_dj.ops.base": ("OpArgumentError", "OpFatalError"),
    # The input and its partitions.
    "airflow_provider_dj.engine.input.sources": ("InputError", "InputOutsideRootsError"),
    "airflow_provider_dj.engine.input.schema": ("InputMismatchError",),
    "airflow_provider_dj.engine.input.partitioning": (
        "InputChangedError",
        "InputTypeConflictError",
        "PartitioningError",
    ),
    "airflow_provider_dj.engine.input.partition_memory": ("PartitionTooLargeError",),
    # Planning, a job's identity and lock, resume, dedup history.
    "airflow_provider_dj.engine.planning.global_memory": ("GlobalStepTooLargeError",),
    "airflow_provider_dj.engine.gpu.planner": ("PlanningError",),
    "airflow_provider_dj.engine.gpu.profiles": ("ReportFormatError",),
    "airflow_provider_dj.engine.jobdir.identity": ("JobIdError",),
    "airflow_provider_dj.engine.jobdir.lock": ("JobLockedError",),
    "airflow_provider_dj.engine.job.resume": ("ResumeRefusedError",),
    "airflow_provider_dj.engine.history.index": ("HistoryIndexError",),
    "airflow_provider_dj.engine.history.commit": ("HistoryCommitError",),
    # The GPU preflight.
    "airflow_provider_dj.engine.preflight.preflight": ("PreflightError",),
    "airflow_provider_dj.engine.preflight.memory": ("NoValidPeakError",),
    "airflow_provider_dj.engine.preflight.sampling": ("EmptySampleError",),
    # While partitions and global steps run.
    "airflow_provider_dj.engine.execution.ray_dispatch": ("DispatchKilledError", "PartitionFailedError"),
    "airflow_provider_dj.engine.execution.failure_guard": ("FailureRateExceededError",),
    "airflow_provider_dj.engine.execution.op_runner": ("InvalidOutputError",),
    "airflow_provider_dj.engine.execution.key_rows": ("UnkeyableRowError",),
    "airflow_provider_dj.engine.execution.batch_cursor": ("BatchKeyError", "BatchSizeError"),
    "airflow_provider_dj.engine.execution.actor_pool": ("PoolResourceError",),
    "airflow_provider_dj.engine.execution.segment_start": ("MissingUpstreamStateError",),
    "airflow_provider_dj.engine.execution.shard_stages": ("ShardTooLargeError",),
    "airflow_provider_dj.engine.execution.watchdog": ("StalledPartitionError",),
    "airflow_provider_dj.engine.storage.global_op_state": ("MissingKeysError",),
    "airflow_provider_dj.engine.runner.local": ("BarrierNotReachedError",),
    "airflow_provider_dj.engine.runner.stop": ("JobStopped",),
    # Ops' own errors (an op's error is a PartitionFailedError's cause).
    "airflow_provider_dj.ops.dj_compat.batches": ("RowCountChangedError",),
    "airflow_provider_dj.ops.kernels.images": ("ImageFieldError", "ImageReadError", "ImageSupportMissingError"),
    "airflow_provider_dj.ops.llm.api_mapper": ("LLMConfigError", "LLMTemplateError"),
    "airflow_provider_dj.ops.llm.client": (
        "ChatConfigError",
        "ChatError",
        "ChatRequestRejected",
        "ChatUnavailableError",
    ),
    "airflow_provider_dj.ops.mappers.embedding": ("EmbeddingModelError",),
    "airflow_provider_dj.ops.mappers.image_blur": ("ImageWriteError",),
    # The export, the review gate, a finished job read back.
    "airflow_provider_dj.engine.output.errors": (
        "AccountingError",
        "ExportMismatchError",
        "MissingFinalCheckpointError",
    ),
    "airflow_provider_dj.engine.output.media": ("MediaManifestError",),
    "airflow_provider_dj.engine.job.review": ("ReviewRejectedError",),
    "airflow_provider_dj.engine.job.summary": ("SummaryStatusError",),
    "airflow_provider_dj.engine.job.status": ("JobNotFoundError",),
    "airflow_provider_dj.engine.job.watch": ("JobFailedError", "WaitTargetError"),
    "airflow_provider_dj.engine.observe.lineage_query": ("RowNotFoundError",),
    "airflow_provider_dj.engine.observe.why": ("RowOutOfRangeError",),
    # Ray clusters and Ray Jobs (the hooks' connections).
    "airflow_provider_dj.hooks.ray_jobs": ("RayDashboardUnreachableError", "RayJobFailedError", "RayJobSubmitError"),
    "airflow_provider_dj.hooks.ray_local_head": ("RayConnectionError",),
}

_EXPORTS = {name: module for module, names in _BY_MODULE.items() for name in names}

__all__ = sorted(["DJError", "RefusedError", *_EXPORTS])

__getattr__ = lazy_exports(__name__, _EXPORTS)


def __dir__() -> list[str]:
    return list(__all__)
