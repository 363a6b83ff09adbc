"""An ``airflow standalone`` with the job view plugin and one crash-prone recipe, for the job view's e2e tests.

The plugin reaches the server the way a user's install does: through the
package's ``airflow.plugins`` entry point when the test venv's installed
metadata has it; otherwise (an editable install made before the entry point
existed) through a one-line file in the server's ``$AIRFLOW_HOME/plugins``
importing the same class, never both (Airflow reports a plugin loaded twice
as an import error).

Users (SimpleAuthManager): ``admin`` (admin), ``viewer`` (viewer: may read
every DAG) and ``nobody`` (no role: may read nothing), so the API tests get a
real 403 from the real auth manager.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from importlib.metadata import entry_points

import httpx

from tests.e2e.airflow_server import REPO_ROOT, AirflowServer
from tests.e2e.rest_client import AirflowRestClient
from tests.helpers_job_view import view_recipe, write_view_input

VIEW_DAG = "e2e_view"
VIEW_PARTS = 4
VIEW_ROWS = 400
#: A recipe with a review gate (docs/review_gate.md) whose bound every run crosses: the filter and the
#: null texts remove far more than 5 % of the rows.
REVIEW_DAG = "e2e_review"
REVIEW_OPS = "process:\n  - words_num_filter:\n      min_num: 12\n"
REVIEW_SECTION = "review:\n  max_removed_fraction: 0.05\n  sample_rows: 3\n"
#: The same gate with a deadline nobody meets: Airflow's scheduler answers with the recipe's default
#: (reject) once ``timeout_s`` has passed.
REVIEW_TIMEOUT_DAG = "e2e_review_timeout"
REVIEW_TIMEOUT_S = 30
REVIEW_TIMEOUT_SECTION = REVIEW_SECTION + f"  timeout_s: {REVIEW_TIMEOUT_S}\n  on_timeout: reject\n"
#: The shipped image-text demo (dags/recipes/demo_images.yaml), its rows and images read in place: the page's
#: "why" of a removed image row shows the row's thumbnail.
IMAGES_DAG = "e2e_view_images"
PLUGIN_SHIM = "from airflow_provider_dj.plugins.job_view_plugin import DataJuicerJobViewPlugin  # noqa: F401\n"


def entry_point_installed() -> bool:
    return any(ep.name == "data_juicer_job_view" for ep in entry_points(group="airflow.plugins"))


@dataclass
class ViewServer:
    server: AirflowServer
    client: AirflowRestClient
    root: str
    work: str
    data: str
    nulls: list[int]

    @property
    def base_url(self) -> str:
        return self.server.base_url

    def job_dir(self, job_id: str) -> str:
        return os.path.join(self.work, job_id)

    def token(self, user: str) -> str:
        resp = httpx.post(
            f"{self.base_url}/auth/token", json={"username": user, "password": self.password(user)}, timeout=30
        )
        resp.raise_for_status()
        return resp.json()["access_token"]

    def password(self, user: str) -> str:
        with open(os.path.join(self.server.home, "simple_auth_manager_passwords.json.generated")) as fh:
            return json.load(fh)[user]

    def stop(self) -> None:
        self.server.stop()


def start_view_server(root: str) -> ViewServer:
    recipes, work, exports = (os.path.join(root, d) for d in ("recipes", "work", "exports"))
    for d in (recipes, work, exports):
        os.makedirs(d, exist_ok=True)
    data, nulls = write_view_input(os.path.join(root, "data", "view.jsonl"), VIEW_ROWS)
    with open(os.path.join(recipes, f"{VIEW_DAG}.yaml"), "w") as fh:
        fh.write(view_recipe(VIEW_DAG, data, os.path.join(exports, f"{VIEW_DAG}.jsonl"), work, VIEW_PARTS))
    with open(os.path.join(recipes, f"{REVIEW_DAG}.yaml"), "w") as fh:
        export = os.path.join(exports, f"{REVIEW_DAG}.jsonl")
        fh.write(view_recipe(REVIEW_DAG, data, export, work, 2, ops=REVIEW_OPS) + REVIEW_SECTION)
    with open(os.path.join(recipes, f"{REVIEW_TIMEOUT_DAG}.yaml"), "w") as fh:
        export = os.path.join(exports, f"{REVIEW_TIMEOUT_DAG}.jsonl")
        fh.write(view_recipe(REVIEW_TIMEOUT_DAG, data, export, work, 2, ops=REVIEW_OPS) + REVIEW_TIMEOUT_SECTION)
    with open(os.path.join(recipes, f"{IMAGES_DAG}.yaml"), "w") as fh:
        fh.write(images_recipe(os.path.join(exports, f"{IMAGES_DAG}.jsonl"), work))
    home = os.path.join(root, "airflow")
    plugins = os.path.join(home, "plugins")
    os.makedirs(plugins, exist_ok=True)
    shim = not entry_point_installed()
    if shim:
        with open(os.path.join(plugins, "dj_job_view.py"), "w") as fh:
            fh.write(PLUGIN_SHIM)
    # The shim needs this checkout on the server's path.  With the entry point installed it must not be
    # there: Airflow walks every distribution, and the checkout's own airflow_provider_dj.egg-info (left by
    # the editable install) would register the plugin a second time ("already registered").
    extra_path = [REPO_ROOT] if shim else []
    server = AirflowServer(
        home=home,
        sql_alchemy_conn=f"sqlite:///{os.path.join(home, 'airflow.db')}",
        recipes_dir=recipes,
        extra_env={
            "AIRFLOW__CORE__PLUGINS_FOLDER": plugins,
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,viewer:viewer,nobody:",
            # The job view's fallback look-up (no XCom yet) and the jobs list search here too.
            "DJ_WORK_DIR": work,
            "DJ_STATE_DIR": os.path.join(root, "state"),
            # The scheduler's sweep of review deadlines (and deferral timeouts) every 3 s, not 15.
            "AIRFLOW__SCHEDULER__TRIGGER_TIMEOUT_CHECK_INTERVAL": "3",
            # This checkout's code in every server process (their cwd is AIRFLOW_HOME, so a relative
            # PYTHONPATH such as "." would point there), the plugin shim included.
            "PYTHONPATH": os.pathsep.join(
                [
                    *extra_path,
                    *(
                        os.path.abspath(p)
                        for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                        if p and os.path.abspath(p) != REPO_ROOT
                    ),
                ]
            ),
        },
    )
    client = server.start()
    try:
        client.wait_dag(VIEW_DAG)
        client.wait_dag(REVIEW_DAG)
        client.wait_dag(REVIEW_TIMEOUT_DAG)
        client.wait_dag(IMAGES_DAG)
    except BaseException:
        server.stop()
        raise
    return ViewServer(server=server, client=client, root=root, work=work, data=data, nulls=nulls)


def images_recipe(export: str, work: str) -> str:
    """The image demo recipe with its own DAG id, its export and work dir here, its data where it ships."""
    demo_dir = os.path.join(REPO_ROOT, "dags", "recipes")
    with open(os.path.join(demo_dir, "demo_images.yaml"), encoding="utf-8") as fh:
        text = fh.read()
    replaced = {
        "project_name: dj_demo_images": f"project_name: {IMAGES_DAG}",
        "dataset_path: data/demo_images.jsonl": f"dataset_path: {os.path.join(demo_dir, 'data', 'demo_images.jsonl')}",
        "export_path: ../../demo_output/demo_images_clean.jsonl": f"export_path: {export}",
        "work_dir: ../../demo_output/jobs": f"work_dir: {work}",
    }
    for old, new in replaced.items():
        assert old in text, f"dags/recipes/demo_images.yaml no longer has {old!r}: update this helper"
        text = text.replace(old, new)
    return text
