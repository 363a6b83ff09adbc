"""The REST API scenarios (tests/e2e/rest_api_scenarios.py) on ``airflow standalone`` with a PostgreSQL
metadata DB: one module per DB, so each DB's server has its own test worker."""

from tests.e2e.rest_api_scenarios import *  # noqa: F403 - the scenarios are collected in this module

E2E_DB = "postgres"
