"""A job's lifecycle, above the layers that do the work: setup (a new job or a proven resume,
``setup``), the resume proof (``resume``), the export step (``export``), the summary a job leaves
(``summary``), its status (``status``), waiting on it (``watch``) and retention of old jobs (``gc``).
Each of these uses most of the engine, so they sit at its top, below only the runner."""
