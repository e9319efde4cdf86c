#!/usr/bin/env python3
"""Lints and renders the buzz-deletion Helm chart offline, then checks what a cluster would get.

Uses the real Helm v4 engine (Go template + sprig, `helm lint` rules) through the PyPI package
`helm-python-sdk`, which bundles Helm's Go library: `helm` itself is not packaged for Debian 12.
No cluster is contacted. Each check prints ok/FAIL; the last line is "N passed, M failed".

Usage: python3 deploy/helm/check.py      (deploy/local/test installs the two packages it needs)
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import yaml
from helm_python import Chart, HelmError, lint

CHART_DIR = Path(__file__).resolve().parent / "buzz-deletion"
REPO = CHART_DIR.parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "buzz-deletion.json"
CHART_DASHBOARD = CHART_DIR / "dashboards" / "buzz-deletion.json"
ALERTS_TEST = REPO / "deploy" / "prometheus" / "alerts_test.yaml"
OPERATIONS = REPO / "docs" / "operations.md"
METRICS_RS = REPO / "activities" / "src" / "metrics.rs"
SECRET = {
    "secret": {"existingSecret": "buzz-connections"},
    "database": {"ownerSecret": {"name": "buzz-owner"}},
    "receipts": {"signingKeySecret": {"name": "buzz-receipt-key"}},
}
HEARTBEAT_TIMEOUT_SECS = 30  # the CLI's --heartbeat-timeout-secs default


class UniqueKeyLoader(yaml.SafeLoader):
    """A YAML loader that refuses duplicate keys, which Kubernetes would silently collapse."""


def _no_duplicates(loader: UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep)


UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def render(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Renders like `helm template buzz . -n deletion`; returns objects keyed by kind."""
    manifests = Chart.load(CHART_DIR).render(
        values, name="buzz", namespace="deletion", is_install=True
    )
    objects: dict[str, dict[str, Any]] = {}
    for path, text in manifests.items():
        if path.endswith("NOTES.txt"):
            continue
        for doc in yaml.load_all(text, Loader=UniqueKeyLoader):
            if doc is None:
                continue
            key = doc["kind"]
            if key == "Secret" and key in objects:
                # The owner's URL has a Secret of its own (secret.create): keyed by name.
                key = f"Secret/{doc['metadata']['name']}"
            assert key not in objects, f"two {key} objects"
            objects[key] = doc
    return objects


def render_error(values: dict[str, Any]) -> str:
    try:
        render(values)
    except HelmError as err:
        return str(err)
    raise AssertionError("rendering succeeded but must fail")


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def worker_container(objects: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return objects["Deployment"]["spec"]["template"]["spec"]["containers"][0]


def mounted_file(pod: dict[str, Any], container: dict[str, Any], path: str) -> tuple[str, str, str, int]:
    """(kind, name, key, mode) of the Secret/ConfigMap key a file path inside `container` is;
    AssertionError when the path is not exactly one key of a read-only mounted volume."""
    mounts = [m for m in container.get("volumeMounts", [])
              if path.startswith(m["mountPath"].rstrip("/") + "/")]
    assert len(mounts) == 1, f"{path} is inside {len(mounts)} mounts: {container.get('volumeMounts')}"
    mount = mounts[0]
    assert mount.get("readOnly") is True, f"{mount} must be read-only"
    assert "subPath" not in mount, mount  # a subPath mount never sees a rotated Secret
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    volume = volumes[mount["name"]]
    kind = "secret" if "secret" in volume else "configMap"
    source = volume[kind]
    name = source["secretName"] if kind == "secret" else source["name"]
    relative = path[len(mount["mountPath"].rstrip("/")) + 1:]
    items = [i for i in source.get("items", []) if i["path"] == relative]
    assert len(items) == 1, f"{path}: no single item with path {relative!r} in {source}"
    return kind, name, items[0]["key"], source["defaultMode"]


# --- checks: each raises AssertionError with the broken promise ---------------------------


def lint_is_clean_in_strict_mode() -> None:
    everything = merge(PRODUCTION, {"prometheusRule": {"enabled": True},
                                    "grafanaDashboard": {"enabled": True},
                                    "serviceMonitor": {"enabled": True}})
    for name, values in (("legacy", SECRET), ("production", PRODUCTION), ("all on", everything)):
        report = lint(CHART_DIR, values, strict=True)
        problems = [m for m in report["messages"] if m["severity"] >= 2] + report.get("errors", [])
        assert not problems, f"helm lint --strict ({name} values): {problems}"


def default_release_has_worker_pdb_service_account_and_migration_hook() -> None:
    kinds = set(render(SECRET))
    assert kinds == {"Deployment", "Job", "PodDisruptionBudget", "Service", "ServiceAccount"}, kinds


def rendering_without_a_connection_secret_fails_and_says_which_value() -> None:
    values = {"database": SECRET["database"], "receipts": SECRET["receipts"]}
    message = render_error(values)
    assert "database.url.secret" in message and "secret.existingSecret" in message, message


def worker_outlives_its_drain_which_outlives_the_heartbeat_timeout() -> None:
    objects = render(SECRET)
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    drain = int(env_of(pod["containers"][0])["BUZZ_SHUTDOWN_GRACE_SECS"])
    grace = pod["terminationGracePeriodSeconds"]
    assert grace > drain > HEARTBEAT_TIMEOUT_SECS, (grace, drain)


def grace_period_not_longer_than_drain_is_refused() -> None:
    message = render_error(merge(SECRET, {"worker": {"terminationGracePeriodSeconds": 60}}))
    assert "terminationGracePeriodSeconds" in message, message


def drain_not_longer_than_heartbeat_timeout_is_refused() -> None:
    message = render_error(merge(SECRET, {"worker": {"shutdownGraceSeconds": 30}}))
    assert "shutdownGraceSeconds" in message, message


def worker_gets_connections_from_the_secret_and_temporal_from_values() -> None:
    values = merge(
        SECRET,
        {"temporal": {"address": "temporal.example:7233", "namespace": "prod", "taskQueue": "q"}},
    )
    container = worker_container(render(values))
    assert container["envFrom"] == [{"secretRef": {"name": "buzz-connections"}}], container["envFrom"]
    env = env_of(container)
    expected = {"TEMPORAL_ADDRESS": "temporal.example:7233", "TEMPORAL_NAMESPACE": "prod", "BUZZ_TASK_QUEUE": "q"}
    assert {k: env.get(k) for k in expected} == expected, env
    assert container["command"] == ["/usr/local/bin/buzz-deletion-worker"], container["command"]


def worker_names_its_deployment_and_build_id() -> None:
    env = env_of(worker_container(render(SECRET)))
    assert env["BUZZ_WORKER_DEPLOYMENT"] == "buzz-deletion", env
    assert env["BUZZ_WORKER_BUILD_ID"] == "0.1.0", env  # the appVersion, as the image tag
    assert env["BUZZ_WORKER_VERSIONING"] == "off", env
    env = env_of(worker_container(render(merge(SECRET, {"image": {"tag": "1.4.2"}}))))
    assert env["BUZZ_WORKER_BUILD_ID"] == "1.4.2", env
    values = merge(
        SECRET,
        {"worker": {"deployment": {"name": "deletion", "buildId": "git-abc", "versioning": "pinned"}}},
    )
    env = env_of(worker_container(render(values)))
    expected = {
        "BUZZ_WORKER_DEPLOYMENT": "deletion",
        "BUZZ_WORKER_BUILD_ID": "git-abc",
        "BUZZ_WORKER_VERSIONING": "pinned",
    }
    assert {k: env.get(k) for k in expected} == expected, env
    assert "BUZZ_WORKER_BUILD_ID" not in env_of(render(SECRET)["Job"]["spec"]["template"]["spec"]["containers"][0])


def unknown_or_unquoted_versioning_is_refused() -> None:
    for versioning in ("yes", False):
        message = render_error(merge(SECRET, {"worker": {"deployment": {"versioning": versioning}}}))
        assert "worker.deployment.versioning" in message, message


def probes_hit_metrics_on_the_port_the_worker_listens_on() -> None:
    container = worker_container(render(merge(SECRET, {"metrics": {"port": 9999}})))
    assert env_of(container)["BUZZ_METRICS_PORT"] == "9999"
    assert container["ports"] == [{"name": "metrics", "containerPort": 9999, "protocol": "TCP"}]
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/metrics", "port": "metrics"}, container[probe]


def worker_runs_as_non_root_with_resources_set() -> None:
    objects = render(SECRET)
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["resources"]["requests"] and container["resources"]["limits"]


def pdb_and_service_select_exactly_the_worker_pods() -> None:
    objects = render(SECRET)
    pod_labels = objects["Deployment"]["spec"]["template"]["metadata"]["labels"]
    selector = objects["Deployment"]["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()
    assert objects["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"] == selector
    assert objects["Service"]["spec"]["selector"] == selector
    assert objects["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1


def migration_job_runs_migrate_before_install_and_upgrade() -> None:
    job = render(SECRET)["Job"]
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade", annotations
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["/usr/local/bin/buzz-deletion", "migrate"], container["command"]
    assert container["envFrom"] == [{"secretRef": {"name": "buzz-connections"}}]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"


def migration_job_can_be_disabled() -> None:
    assert "Job" not in render(merge(SECRET, {"migrations": {"enabled": False}}))


def only_the_migration_job_connects_as_the_schema_owner() -> None:
    objects = render(merge(SECRET, {"database": {"ownerSecret": {"key": "owner-url"}}}))
    job_pod = objects["Job"]["spec"]["template"]["spec"]
    job = job_pod["containers"][0]
    # As a file from its Secret (mode 0400), never a variable's value or a secretKeyRef.
    assert "BUZZ_OWNER_DATABASE_URL" not in env_of(job), job["env"]
    owner_file = env_of(job)["BUZZ_OWNER_DATABASE_URL_FILE"]
    assert mounted_file(job_pod, job, owner_file) == ("secret", "buzz-owner", "owner-url", 0o400)
    worker = worker_container(objects)
    assert not any(n.startswith("BUZZ_OWNER_DATABASE_URL") for n in env_of(worker)), worker["env"]
    assert worker["envFrom"] == [{"secretRef": {"name": "buzz-connections"}}], worker["envFrom"]


def migrations_without_an_owner_secret_are_refused() -> None:
    values = {"secret": {"existingSecret": "buzz-connections"},
              "receipts": SECRET["receipts"]}
    message = render_error(values)
    assert "database.ownerSecret.name" in message, message
    assert "Job" not in render(merge(values, {"migrations": {"enabled": False}}))


def service_monitor_scrapes_the_metrics_service_when_enabled() -> None:
    objects = render(merge(SECRET, {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}}))
    monitor = objects["ServiceMonitor"]
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= objects["Service"]["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"


def created_secret_is_a_hook_that_precedes_the_migration_job() -> None:
    values = {
        "secret": {
            "create": True,
            "values": {
                "DATABASE_URL": "postgres://worker:p@db/buzz",
                "BUZZ_OWNER_DATABASE_URL": "postgres://owner:p@db/buzz",
                "REDIS_URL": "redis://redis",
                "BUZZ_S3_ENDPOINT": "https://s3",
                "BUZZ_S3_BUCKET": "b",
                "BUZZ_S3_ACCESS_KEY": "a",
                "BUZZ_S3_SECRET_KEY": "s",
            },
        },
        "receipts": SECRET["receipts"],
    }
    objects = render(values)
    secret, job = objects["Secret"], objects["Job"]
    assert secret["stringData"]["DATABASE_URL"] == "postgres://worker:p@db/buzz"
    # The owner's URL never reaches the workers' Secret: it gets one of its own, for the Job.
    assert "BUZZ_OWNER_DATABASE_URL" not in secret["stringData"], secret["stringData"]
    owner = objects["Secret/buzz-buzz-deletion-owner"]
    assert owner["stringData"] == {"BUZZ_OWNER_DATABASE_URL": "postgres://owner:p@db/buzz"}
    job_pod = job["spec"]["template"]["spec"]
    owner_file = env_of(job_pod["containers"][0])["BUZZ_OWNER_DATABASE_URL_FILE"]
    assert mounted_file(job_pod, job_pod["containers"][0], owner_file) == (
        "secret", "buzz-buzz-deletion-owner", "BUZZ_OWNER_DATABASE_URL", 0o400)
    assert "pre-install" in secret["metadata"]["annotations"]["helm.sh/hook"]
    weight = lambda o: int(o["metadata"]["annotations"]["helm.sh/hook-weight"])  # noqa: E731
    assert weight(secret) < weight(job) and weight(owner) < weight(job)
    assert worker_container(objects)["envFrom"][0]["secretRef"]["name"] == secret["metadata"]["name"]


def created_secret_missing_a_key_is_refused() -> None:
    message = render_error({"secret": {"create": True, "values": {"DATABASE_URL": "postgres://x"}}})
    assert "secret.values.REDIS_URL" in message, message


def worker_reads_its_receipt_key_from_a_mounted_secret_file() -> None:
    worker = worker_container(render(SECRET))
    deployment = render(SECRET)["Deployment"]
    env = env_of(worker)
    key_file = env.get("BUZZ_RECEIPT_SIGNING_KEY_FILE", "")
    mounts = {m["name"]: m for m in worker.get("volumeMounts", [])}
    assert "receipt-key" in mounts and mounts["receipt-key"].get("readOnly") is True, mounts
    assert key_file == mounts["receipt-key"]["mountPath"] + "/receipt.key", (key_file, mounts)
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"].get("volumes", [])}
    secret = volumes["receipt-key"]["secret"]
    assert secret["secretName"] == "buzz-receipt-key", secret
    assert secret["defaultMode"] == 0o400, secret
    assert secret["items"] == [{"key": "receipt.key", "path": "receipt.key"}], secret
    # The key is a file, never a variable's value; no archive bucket unless one is set.
    assert not any("PRIVATE KEY" in str(v) for v in env.values()), env
    assert "BUZZ_RECEIPT_ARCHIVE_BUCKET" not in env, env
    archived = env_of(worker_container(render(merge(SECRET, {"receipts": {"archiveBucket": "buzz-receipts"}}))))
    assert archived["BUZZ_RECEIPT_ARCHIVE_BUCKET"] == "buzz-receipts", archived


def rendering_without_a_receipt_key_secret_fails_and_says_which_value() -> None:
    values = merge(SECRET, {"receipts": {"signingKeySecret": {"name": ""}}})
    error = render_error(values)
    assert "receipts.signingKeySecret.name" in error, error


# --- production: every secret as a mounted file ------------------------------------------

IRSA_ROLE = "arn:aws:iam::123456789012:role/buzz-deletion"

# Temporal Cloud-style mTLS + managed Postgres/Redis over verified TLS + S3 with static keys and
# a private CA; every secret in a Secret of its own, every CA bundle in a ConfigMap or Secret.
PRODUCTION: dict[str, Any] = {
    "temporal": {
        "address": "buzz.a1b2c.tmprl.cloud:7233",
        "namespace": "buzz.a1b2c",
        "tls": {
            "serverName": "buzz.a1b2c.tmprl.cloud",
            "serverCA": {"secret": "temporal-ca", "key": "ca.pem"},
            "client": {"secret": "temporal-client"},
        },
    },
    "database": {
        "url": {"secret": "buzz-postgres", "key": "url"},
        "sslMode": "verify-full",
        "ca": {"configMap": "rds-ca"},
        "ownerSecret": {"name": "buzz-owner", "key": "url"},
    },
    "redis": {"url": {"secret": "buzz-redis", "key": "url"}, "ca": {"configMap": "redis-ca"},
              "mode": "cluster"},
    "s3": {
        "endpoint": "https://s3.eu-west-1.amazonaws.com",
        "bucket": "buzz-media",
        "region": "eu-west-1",
        "addressing": "virtual",
        "ca": {"secret": "s3-ca"},
        "credentials": {"secret": "buzz-s3-keys"},
    },
    "receipts": {"signingKeySecret": {"name": "buzz-receipt-key"}},
    "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": IRSA_ROLE}},
}

# Each file variable of the worker, and the (kind, name, key, mode) it must be.
PRODUCTION_WORKER_FILES = {
    "DATABASE_URL_FILE": ("secret", "buzz-postgres", "url", 0o400),
    "PGSSLROOTCERT": ("configMap", "rds-ca", "ca.crt", 0o444),
    "REDIS_URL_FILE": ("secret", "buzz-redis", "url", 0o400),
    "BUZZ_REDIS_CA_FILE": ("configMap", "redis-ca", "ca.crt", 0o444),
    "BUZZ_S3_ACCESS_KEY_FILE": ("secret", "buzz-s3-keys", "BUZZ_S3_ACCESS_KEY", 0o400),
    "BUZZ_S3_SECRET_KEY_FILE": ("secret", "buzz-s3-keys", "BUZZ_S3_SECRET_KEY", 0o400),
    "BUZZ_S3_CA_FILE": ("secret", "s3-ca", "ca.crt", 0o400),
    "TEMPORAL_TLS_SERVER_CA_CERT_PATH": ("secret", "temporal-ca", "ca.pem", 0o400),
    "TEMPORAL_TLS_CLIENT_CERT_PATH": ("secret", "temporal-client", "tls.crt", 0o400),
    "TEMPORAL_TLS_CLIENT_KEY_PATH": ("secret", "temporal-client", "tls.key", 0o400),
    "BUZZ_RECEIPT_SIGNING_KEY_FILE": ("secret", "buzz-receipt-key", "receipt.key", 0o400),
}
PRODUCTION_JOB_FILES = {
    "BUZZ_OWNER_DATABASE_URL_FILE": ("secret", "buzz-owner", "url", 0o400),
    "PGSSLROOTCERT": ("configMap", "rds-ca", "ca.crt", 0o444),
}
# Variables that would carry a secret's value: none may be set in a file-mounted release.
SECRET_VALUE_VARIABLES = {
    "DATABASE_URL", "BUZZ_OWNER_DATABASE_URL", "REDIS_URL", "BUZZ_S3_ACCESS_KEY",
    "BUZZ_S3_SECRET_KEY", "TEMPORAL_API_KEY", "BUZZ_RECEIPT_SIGNING_KEY",
}
FILE_VARIABLE_SUFFIXES = ("_FILE", "_PATH")


def secret_references(node: Any, where: str = "") -> list[str]:
    """Every secretKeyRef / secretRef (env or envFrom) anywhere under `node`."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("secretKeyRef", "secretRef"):
                found.append(f"{where}.{key}={value}")
            found += secret_references(value, f"{where}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += secret_references(value, f"{where}[{i}]")
    return found


def assert_files_only(pod: dict[str, Any], expected: dict[str, tuple[str, str, str, int]]) -> None:
    """The pod gets its secrets only as mounted files: no secretKeyRef/secretRef anywhere, no
    variable that carries a secret's value, every file variable resolves to exactly the expected
    Secret/ConfigMap key, and every Secret volume of the pod is one of those (nothing unused)."""
    assert not secret_references(pod), secret_references(pod)
    container = pod["containers"][0]
    env = env_of(container)
    assert not SECRET_VALUE_VARIABLES & env.keys(), SECRET_VALUE_VARIABLES & env.keys()
    assert all("value" in e for e in container["env"]), container["env"]
    file_vars = {n for n in env if n.endswith(FILE_VARIABLE_SUFFIXES) or n == "PGSSLROOTCERT"}
    assert file_vars == expected.keys(), (sorted(file_vars), sorted(expected))
    for name, want in expected.items():
        got = mounted_file(pod, container, env[name])
        assert got == want, f"{name}={env[name]} is {got}, expected {want}"
    used = {mounted_file(pod, container, env[n])[:2] for n in expected}
    volumes = {(("secret", v["secret"]["secretName"]) if "secret" in v
                else ("configMap", v["configMap"]["name"])) for v in pod["volumes"]}
    assert volumes == used, f"volumes {volumes} vs the ones variables point into {used}"


def production_worker_gets_every_secret_only_as_a_mounted_file() -> None:
    objects = render(PRODUCTION)
    assert_files_only(objects["Deployment"]["spec"]["template"]["spec"], PRODUCTION_WORKER_FILES)


def production_migration_job_gets_only_the_owner_url_and_ca_as_files() -> None:
    objects = render(PRODUCTION)
    assert_files_only(objects["Job"]["spec"]["template"]["spec"], PRODUCTION_JOB_FILES)


def production_plain_settings_are_variables() -> None:
    env = env_of(worker_container(render(PRODUCTION)))
    expected = {
        "TEMPORAL_ADDRESS": "buzz.a1b2c.tmprl.cloud:7233",
        "TEMPORAL_NAMESPACE": "buzz.a1b2c",
        "TEMPORAL_TLS": "true",
        "TEMPORAL_TLS_SERVER_NAME": "buzz.a1b2c.tmprl.cloud",
        "PGSSLMODE": "verify-full",
        "BUZZ_S3_ENDPOINT": "https://s3.eu-west-1.amazonaws.com",
        "BUZZ_S3_BUCKET": "buzz-media",
        "BUZZ_S3_REGION": "eu-west-1",
        "BUZZ_S3_ADDRESSING": "virtual",
        "BUZZ_REDIS_MODE": "cluster",
    }
    assert {k: env.get(k) for k in expected} == expected, env
    job_env = env_of(render(PRODUCTION)["Job"]["spec"]["template"]["spec"]["containers"][0])
    assert job_env.get("PGSSLMODE") == "verify-full", job_env
    assert not any(k.startswith("TEMPORAL_TLS") for k in job_env), job_env


def irsa_release_has_the_role_annotation_and_no_s3_key_at_all() -> None:
    values = merge(PRODUCTION, {"s3": {"credentials": {"secret": ""}}})
    objects = render(values)
    account = objects["ServiceAccount"]
    assert account["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": IRSA_ROLE}, account
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    expected = {k: v for k, v in PRODUCTION_WORKER_FILES.items() if "S3_ACCESS" not in k and "S3_SECRET" not in k}
    assert_files_only(pod, expected)
    assert not [k for k in env_of(pod["containers"][0]) if "S3_ACCESS_KEY" in k or "S3_SECRET_KEY" in k]


def api_key_alone_implies_tls_and_is_a_file() -> None:
    values = merge(PRODUCTION, {"temporal": {"tls": {"serverName": "", "serverCA": {"secret": ""},
                                                     "client": {"secret": ""}},
                                             "apiKey": {"secret": "temporal-api-key", "key": "key"}}})
    pod = render(values)["Deployment"]["spec"]["template"]["spec"]
    expected = {k: v for k, v in PRODUCTION_WORKER_FILES.items() if not k.startswith("TEMPORAL_")}
    expected["TEMPORAL_API_KEY_FILE"] = ("secret", "temporal-api-key", "key", 0o400)
    assert_files_only(pod, expected)
    assert env_of(pod["containers"][0])["TEMPORAL_TLS"] == "true"


def plaintext_temporal_sets_no_tls_variable() -> None:
    values = merge(PRODUCTION, {"temporal": {"tls": {"serverName": "", "serverCA": {"secret": ""},
                                                     "client": {"secret": ""}}}})
    env = env_of(worker_container(render(values)))
    assert not [k for k in env if k.startswith("TEMPORAL_TLS") or k.startswith("TEMPORAL_API")], env
    tls_only = env_of(worker_container(render(merge(values, {"temporal": {"tls": {"enabled": True}}}))))
    assert tls_only["TEMPORAL_TLS"] == "true", tls_only


# libpq variables the Postgres driver (sqlx) reads itself when the URL leaves them out.
DRIVER_VARIABLES = {"PGSSLMODE", "PGSSLROOTCERT"}


def variables_read_by_the_binaries() -> set[str]:
    """Every quoted UPPER_CASE name in the Rust sources of the crates the image ships."""
    names: set[str] = set()
    for crate in ("activities", "stack-config", "serving", "worker", "starter"):
        for source in (REPO / crate / "src").rglob("*.rs"):
            names.update(re.findall(r'"([A-Z][A-Z0-9_]{2,})"', source.read_text()))
    return names


def every_variable_the_chart_sets_is_one_the_binaries_read() -> None:
    """A misspelt variable would be ignored in silence (a CA not trusted, TLS left off)."""
    known = variables_read_by_the_binaries() | DRIVER_VARIABLES
    for values in (PRODUCTION, merge(PRODUCTION, {"temporal": {"apiKey": {"secret": "k", "key": "key"},
                                                               "tls": {"client": {"secret": ""}}}})):
        objects = render(values)
        for kind in ("Deployment", "Job"):
            for container in objects[kind]["spec"]["template"]["spec"]["containers"]:
                for name in env_of(container):
                    base = name.removesuffix("_FILE")
                    assert name in known or base in known, f"{kind} sets {name}, which no binary reads"


def bad_secret_combinations_fail_the_render_naming_the_value() -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"temporal": {"tls": {"client": {"keyKey": ""}}}}, "temporal.tls.client.keyKey"),
        ({"temporal": {"tls": {"client": {"certKey": ""}}}}, "temporal.tls.client.certKey"),
        ({"temporal": {"tls": {"serverCA": {"configMap": "also"}}}}, "temporal.tls.serverCA: set secret or configMap, not both"),
        ({"database": {"ca": {"secret": "also"}}}, "database.ca: set secret or configMap, not both"),
        ({"redis": {"ca": {"key": ""}}}, "redis.ca.key"),
        ({"s3": {"credentials": {"secretKeyKey": ""}}}, "s3.credentials.secretKeyKey"),
        ({"secret": {"existingSecret": "legacy"}}, "cannot be combined"),
        ({"redis": {"url": {"secret": ""}}}, "redis.url.secret"),
        ({"s3": {"bucket": ""}}, "s3.bucket"),
        ({"database": {"sslMode": "verify_full"}}, "database.sslMode"),
        ({"s3": {"addressing": "vhost"}}, "s3.addressing"),
        ({"redis": {"mode": "sentinel"}}, "redis.mode"),
    ]
    for override, wanted in cases:
        message = render_error(merge(PRODUCTION, override))
        assert wanted in message, f"{override}: {message}"


# --- alerts and dashboard ----------------------------------------------------------------

# The Temporal SDK's worker metrics the alerts and the dashboard may name, as a running worker
# serves them (scraped from buzz-deletion-worker's /metrics with temporalio-sdk 1.1.1).
SDK_METRICS = {
    "temporal_num_pollers", "temporal_worker_task_slots_available",
    "temporal_worker_task_slots_used", "temporal_activity_execution_failed_total",
    "temporal_activity_execution_latency_seconds",
    "temporal_activity_schedule_to_start_latency_seconds",
    "temporal_workflow_completed_total", "temporal_workflow_endtoend_latency_seconds",
    "temporal_workflow_task_queue_poll_succeed_total",
}
HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum")
RULES = merge(SECRET, {"prometheusRule": {"enabled": True}})


def exported_metrics() -> set[str]:
    """`activities::metrics::EXPORTED`, read from the source (a worker test checks that list
    against what the endpoint really serves), constants resolved."""
    source = METRICS_RS.read_text()
    constants = dict(re.findall(r'pub const ([A-Z_]+): &str = "([a-z_]+)";', source))
    block = re.search(r"pub const EXPORTED: \[&str; \d+\] = \[(.*?)\];", source, re.S)
    assert block, f"no EXPORTED list in {METRICS_RS}"
    names = set()
    for entry in re.findall(r'"[a-z_]+"|[A-Z_]+', block.group(1)):
        names.add(entry.strip('"') if entry.startswith('"') else constants[entry])
    assert len(names) >= 9, names
    return names


def metric_names(expr: str) -> set[str]:
    """The buzz_deletion_/temporal_ metric names an expression reads, histogram suffixes off."""
    names = set()
    for name in re.findall(r"\b((?:buzz_deletion|temporal)_[a-z_]+)\b", expr):
        for suffix in HISTOGRAM_SUFFIXES:
            if name.endswith(suffix) and name[: -len(suffix)].endswith("_seconds"):
                name = name[: -len(suffix)]
        names.add(name)
    return names


def assert_known_metrics(where: str, expr: str) -> None:
    names = metric_names(expr)
    assert names, f"{where}: names no worker metric: {expr}"
    unknown = names - exported_metrics() - SDK_METRICS
    assert not unknown, f"{where}: {sorted(unknown)} is not a metric the worker exports: {expr}"


def promtool() -> str:
    path = shutil.which("promtool")
    assert path, ("promtool not found: install Debian's prometheus package without starting it "
                  "(deploy/local/test, deploy_checks, does)")
    return path


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file."""
    anchors = set()
    for heading in re.findall(r"^#+ (.+)$", markdown, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


def rendered_rules() -> dict[str, Any]:
    return render(RULES)["PrometheusRule"]


def prometheus_rule_has_every_alert_with_its_runbook() -> None:
    rule = rendered_rules()
    labels = render(merge(RULES, {"prometheusRule": {"labels": {"release": "prom"}}}))[
        "PrometheusRule"]["metadata"]["labels"]
    assert labels["release"] == "prom", labels
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert set(alerts) == {
        "BuzzDeletionBlocked", "BuzzDeletionNoWorkerPolling", "BuzzDeletionActivityFailureRate",
        "BuzzDeletionStalled", "BuzzDeletionMetricsSampleFailing",
        "BuzzDeletionServingLeasesNotReaped",
    }, set(alerts)
    anchors = github_anchors(OPERATIONS.read_text())
    for name, alert in alerts.items():
        assert alert["labels"]["severity"] in ("warning", "critical"), alert
        annotations = alert["annotations"]
        assert {"summary", "description", "runbook_url"} <= annotations.keys(), annotations
        base, _, anchor = annotations["runbook_url"].partition("#")
        assert base == "docs/operations.md" and anchor in anchors, (
            f"{name}: runbook {annotations['runbook_url']} has no heading in docs/operations.md")
        assert_known_metrics(name, alert["expr"])
        # Scoped to this release's workers, never every worker Prometheus scrapes.
        assert 'job="buzz-buzz-deletion-metrics"' in alert["expr"], alert["expr"]
    assert 'task_queue="buzz-deletion"' in alerts["BuzzDeletionNoWorkerPolling"]["expr"]
    thresholds = render(merge(RULES, {"prometheusRule": {"blocked": {"seconds": 600}}}))
    blocked = thresholds["PrometheusRule"]["spec"]["groups"][0]["rules"][0]
    assert blocked["expr"].rstrip().endswith("> 600"), blocked["expr"]
    assert "PrometheusRule" not in render(SECRET), "disabled by default"


def alert_rules_parse_and_pass_their_unit_tests_in_promtool() -> None:
    tool = promtool()
    rule = rendered_rules()
    with tempfile.TemporaryDirectory() as tmp:
        rules = Path(tmp) / "alerts.rules.yaml"
        rules.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
        checked = subprocess.run([tool, "check", "rules", str(rules)], capture_output=True, text=True)
        assert checked.returncode == 0, f"promtool check rules:\n{checked.stdout}{checked.stderr}"
        test = Path(tmp) / ALERTS_TEST.name
        shutil.copy(ALERTS_TEST, test)
        tested = subprocess.run([tool, "test", "rules", str(test)], capture_output=True, text=True)
        assert tested.returncode == 0, f"promtool test rules:\n{tested.stdout}{tested.stderr}"


def dashboard_panels_query_only_exported_metrics_in_valid_promql() -> None:
    text = DASHBOARD.read_text()
    dashboard = json.loads(text)
    assert CHART_DASHBOARD.read_text() == text, (
        f"{CHART_DASHBOARD} differs from {DASHBOARD}: copy it again (Helm cannot read outside the chart)")
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len(panels) >= 10, len(panels)
    records = []
    for panel in panels:
        assert panel["targets"], f"panel {panel['title']!r} has no query"
        for target in panel["targets"]:
            expr = target["expr"]
            assert_known_metrics(f"panel {panel['title']!r}", expr)
            assert 'namespace="$namespace"' in expr, f"panel {panel['title']!r} ignores $namespace"
            # Grafana's variables replaced by what a dashboard would send, then parsed by promtool.
            concrete = (expr.replace("$__rate_interval", "5m").replace("$__range", "6h")
                        .replace("$namespace", "deletion").replace("$job", ".+")
                        .replace("$task_queue", ".+"))
            records.append({"record": f"dashboard:panel{panel['id']}:{target['refId']}", "expr": concrete})
    covered = set().union(*(metric_names(t["expr"]) for p in panels for t in p["targets"]))
    wanted = exported_metrics() | {"temporal_num_pollers", "temporal_worker_task_slots_available"}
    assert wanted <= covered, f"no panel shows {sorted(wanted - covered)}"
    with tempfile.TemporaryDirectory() as tmp:
        rules = Path(tmp) / "dashboard.rules.yaml"
        rules.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": records}]}))
        checked = subprocess.run([promtool(), "check", "rules", str(rules)], capture_output=True, text=True)
        assert checked.returncode == 0, f"dashboard PromQL:\n{checked.stdout}{checked.stderr}"


def grafana_dashboard_configmap_embeds_the_dashboard() -> None:
    objects = render(merge(SECRET, {"grafanaDashboard": {"enabled": True}}))
    configmap = objects["ConfigMap"]
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1", configmap["metadata"]
    embedded = configmap["data"]["buzz-deletion.json"]
    assert json.loads(embedded) == json.loads(DASHBOARD.read_text())
    assert "ConfigMap" not in render(SECRET), "disabled by default"


CHECKS: list[Callable[[], None]] = [
    every_variable_the_chart_sets_is_one_the_binaries_read,
    prometheus_rule_has_every_alert_with_its_runbook,
    alert_rules_parse_and_pass_their_unit_tests_in_promtool,
    dashboard_panels_query_only_exported_metrics_in_valid_promql,
    grafana_dashboard_configmap_embeds_the_dashboard,
    production_worker_gets_every_secret_only_as_a_mounted_file,
    production_migration_job_gets_only_the_owner_url_and_ca_as_files,
    production_plain_settings_are_variables,
    irsa_release_has_the_role_annotation_and_no_s3_key_at_all,
    api_key_alone_implies_tls_and_is_a_file,
    plaintext_temporal_sets_no_tls_variable,
    bad_secret_combinations_fail_the_render_naming_the_value,
    worker_reads_its_receipt_key_from_a_mounted_secret_file,
    rendering_without_a_receipt_key_secret_fails_and_says_which_value,
    lint_is_clean_in_strict_mode,
    default_release_has_worker_pdb_service_account_and_migration_hook,
    rendering_without_a_connection_secret_fails_and_says_which_value,
    worker_outlives_its_drain_which_outlives_the_heartbeat_timeout,
    grace_period_not_longer_than_drain_is_refused,
    drain_not_longer_than_heartbeat_timeout_is_refused,
    worker_gets_connections_from_the_secret_and_temporal_from_values,
    worker_names_its_deployment_and_build_id,
    unknown_or_unquoted_versioning_is_refused,
    probes_hit_metrics_on_the_port_the_worker_listens_on,
    worker_runs_as_non_root_with_resources_set,
    pdb_and_service_select_exactly_the_worker_pods,
    migration_job_runs_migrate_before_install_and_upgrade,
    migration_job_can_be_disabled,
    only_the_migration_job_connects_as_the_schema_owner,
    migrations_without_an_owner_secret_are_refused,
    service_monitor_scrapes_the_metrics_service_when_enabled,
    created_secret_is_a_hook_that_precedes_the_migration_job,
    created_secret_missing_a_key_is_refused,
]


def main() -> int:
    failed = 0
    for check in CHECKS:
        try:
            check()
            print(f"  ok    {check.__name__}")
        except (AssertionError, HelmError, KeyError, yaml.YAMLError, ValueError, OSError) as err:
            failed += 1
            print(f"  FAIL  {check.__name__}: {type(err).__name__}: {err}")
    print(f"helm chart: {len(CHECKS) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
