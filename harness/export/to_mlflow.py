"""Groups as MLflow runs on a tracking server: a parent run per sweep or check, a nested run per rung or config.

Params are the settings, metrics the decided figures and the ends of their bands, tags the verdict, claim,
commit and code fingerprint (``harness.*``), through ``MlflowClient.log_batch`` in requests of at most 100 of
each (the server takes 1,000 metrics, 100 params and 100 tags a request). The target is a tracking URI
(``http://HOST:PORT``, or a database such as ``sqlite:///mlflow.db``): MLflow's file store (a ``mlruns/``
folder) is deprecated and refused by recent releases. A group already exported (a run tagged with its id in
the experiment) is left as it is. The optional extra ``.[mlflow]`` installs the client.
"""

from __future__ import annotations

import os
import re
import time

from harness.export.figures import Entry, Group

INSTALL = "pip install mlflow (or: pip install 'training-harness[mlflow]')"
# a tracking server, or a database as SQLAlchemy names it, with or without its driver (mysql+pymysql://)
SCHEMES = re.compile(r"(https?://|(sqlite|postgresql|mysql|mssql)(\+\w+)?://|databricks)")
VALID = "http, https, sqlite, postgresql, mysql, mssql (each database also as NAME+DRIVER), databricks"
BATCH = 100
PARAM_CHARS = 6000  # the longest param value a server keeps
ID_TAG = "harness.id"


def check_uri(uri: str) -> None:
    """ValueError naming ``uri`` unless it is a tracking server's or a database's URI."""
    if not SCHEMES.match(uri):
        raise ValueError(f"--to mlflow {uri!r}: a tracking URI is needed, such as http://127.0.0.1:5000 or "
                         f"sqlite:///mlflow.db (valid schemes: {VALID}); "
                         "MLflow's file store (a mlruns/ folder) is deprecated")


def client_for(uri: str):
    """An ``MlflowClient`` of ``uri`` and MLflow's own error class; ValueError naming the install when MLflow is
    missing."""
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")  # a line per run: the export says its own
    try:
        from mlflow import MlflowClient  # MLflow: only an export to it
        from mlflow.exceptions import MlflowException
    except ImportError as exc:
        raise ValueError(f"export --to mlflow needs the mlflow package ({exc}): {INSTALL}") from None
    return MlflowClient(tracking_uri=uri), MlflowException


def export(groups: list[Group], uri: str, experiment: str = "harness") -> list[str]:
    """Every group as a parent run and its nested runs in ``experiment`` (made if new); one line per group. A server
    that does not answer, or refuses a request, is MLflow's error in one line naming the URI (a ValueError: exit 2),
    not a traceback: the store is untouched and the same command exports it again."""
    check_uri(uri)
    client, mlflow_error = client_for(uri)
    try:
        known = client.get_experiment_by_name(experiment)
        experiment_id = known.experiment_id if known else client.create_experiment(experiment)
        return [export_group(client, uri, experiment, experiment_id, group) for group in groups]
    except mlflow_error as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"--to mlflow {uri!r}: {first}") from None


def export_group(client, uri: str, experiment: str, experiment_id: str, group: Group) -> str:
    """The group's parent run and nested runs, unless a run tagged with its id is there already; the line said.
    The UI's address of the run is given where ``uri`` is the server's (a database URI has no pages)."""
    found = client.search_runs([experiment_id], filter_string=f"tags.`{ID_TAG}` = '{group.id}'", max_results=1)
    if found:
        return (f"{group.kind} {group.id}: already in experiment {experiment!r} as run {found[0].info.run_id}, "
                "left as it is")
    own = Entry(name=group.id, step=0, params=group.params, metrics=group.metrics, tags=group.tags)
    parent = log_run(client, experiment_id, own, {ID_TAG: group.id})
    for entry in group.entries:
        log_run(client, experiment_id, entry, {"mlflow.parentRunId": parent, "harness.parent": group.id})
    page = uri.startswith(("http://", "https://"))
    where = f": {uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{parent}" if page else f" of {uri}"
    return (f"{group.kind} {group.id}: run {parent} with {len(group.entries)} nested run(s) in experiment "
            f"{experiment!r}{where}")


def log_run(client, experiment_id: str, entry: Entry, extra_tags: dict[str, str]) -> str:
    """One finished run with the entry's params, metrics and tags; its run id."""
    from mlflow.entities import Metric, Param  # as client_for: only an export to MLflow

    tags = {f"harness.{k}": v for k, v in entry.tags.items() if v != ""} | extra_tags
    run = client.create_run(experiment_id, run_name=entry.name, tags=tags)
    run_id = run.info.run_id
    now = int(time.time() * 1000)
    metrics = [Metric(_key(k), v, now, entry.step) for k, v in entry.metrics.items()]
    params = [Param(_key(k), str(v)[:PARAM_CHARS]) for k, v in entry.params.items()]
    for i in range(0, max(len(metrics), len(params)), BATCH):
        client.log_batch(run_id, metrics=metrics[i:i + BATCH], params=params[i:i + BATCH])
    client.set_terminated(run_id)
    return run_id


def _key(name: str) -> str:
    """A name MLflow takes as a key: letters, digits, ``_ - . / :`` and spaces."""
    return re.sub(r"[^A-Za-z0-9_\-./: ]", "_", name)
