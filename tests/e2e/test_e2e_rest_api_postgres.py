"""The REST API scenarios (tests/e2e/rest_api_scenarios.py) on ``airflow standalone`` with a PostgreSQL
metadata DB: one module per DB, so each DB's server has its own test worker.

Every scenario whose outcome goes through the metadata DB (a triggered run with conf, a schedule, an
Asset event, a cleared task instance) runs here too.  Marking a running partition failed is the
SQLite module's only: what it checks, the task's ``on_kill`` ending its Ray work, does not depend on
the DB, and its slow partition is a minute of CPU on two cores."""

from tests.e2e import rest_api_scenarios as scenarios

pytestmark = scenarios.pytestmark
E2E_DB = "postgres"

# In the scenarios' own order (they share one server; rest_api_scenarios.py says why the order matters).
test_triggered_run_with_conf_overrides_exports_what_a_direct_run_exports = (
    scenarios.test_triggered_run_with_conf_overrides_exports_what_a_direct_run_exports
)
test_recipe_with_a_schedule_runs_on_its_own = scenarios.test_recipe_with_a_schedule_runs_on_its_own
test_scheduled_export_emits_an_asset_event_and_the_consumer_dag_runs_on_it = (
    scenarios.test_scheduled_export_emits_an_asset_event_and_the_consumer_dag_runs_on_it
)
test_failed_partition_cleared_through_the_api_resumes_from_its_checkpoint = (
    scenarios.test_failed_partition_cleared_through_the_api_resumes_from_its_checkpoint
)
