"""The deployment files in deploy/ say what docs/operations.md says they do.

Nothing here applies a manifest to a cluster: the checks are the ones a
reader would make by hand and that drift silently otherwise. Every manifest
parses; every flag in a container's args is one agentd knows; every grace
period outlasts its drain; the pool's StatefulSet gives each worker a journal
volume of its own, mounted where `--journal` points, writable by the
non-root user, and kept when an ordinal is scaled away (a deleted claim drops
runs); and every deploy/ file the docs name exists.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any

import pytest
import yaml
from peers import ROOT

from agentd.cli.main import cli

KUBERNETES = ROOT / "deploy" / "kubernetes"
MANIFESTS = sorted(KUBERNETES.glob("*.yaml"))
SYSTEMD = ROOT / "deploy" / "systemd" / "agentd-worker.service"


def _docs(path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _pod_sets() -> list[tuple[str, dict[str, Any]]]:
    """(file name, workload) for every Deployment and StatefulSet in deploy/kubernetes."""
    return [(path.name, doc) for path in MANIFESTS for doc in _docs(path)
            if doc.get("kind") in ("Deployment", "StatefulSet")]


def _agentd(workload: dict[str, Any]) -> dict[str, Any]:
    (container,) = [c for c in workload["spec"]["template"]["spec"]["containers"]
                    if c["name"] == "agentd"]
    return container


def _flags(args: list[str]) -> dict[str, str]:
    out = {}
    for arg in args:
        assert arg.startswith("--") and "=" in arg, f"not --flag=value: {arg!r}"
        name, value = arg.split("=", 1)
        out[name] = value
    return out


def _pool() -> dict[str, Any]:
    (pool,) = [doc for name, doc in _pod_sets() if doc["kind"] == "StatefulSet"]
    return pool


def test_every_manifest_parses():
    assert [p.name for p in MANIFESTS] == ["pool-httproute.yaml", "pool.yaml",
                                           "prometheus-scrape.yaml", "worker.yaml"]
    for path in MANIFESTS:
        docs = _docs(path)
        assert docs, path.name
        for doc in docs:  # a Kubernetes object, or the Prometheus job
            assert "kind" in doc or "scrape_configs" in doc, path.name


@pytest.mark.parametrize("name,workload", _pod_sets(), ids=lambda v: v if isinstance(v, str)
                         else v["metadata"]["name"])
def test_each_container_flag_is_one_agentd_knows(name, workload):
    known = {opt for param in cli.params for opt in param.opts}
    unknown = set(_flags(_agentd(workload)["args"])) - known
    assert not unknown, f"{name}: flags agentd does not know: {sorted(unknown)}"


@pytest.mark.parametrize("name,workload", _pod_sets(), ids=lambda v: v if isinstance(v, str)
                         else v["metadata"]["name"])
def test_the_grace_period_outlasts_the_drain(name, workload):
    grace = workload["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    drain = float(_flags(_agentd(workload)["args"])["--drain-timeout"])
    assert grace > drain, f"{name}: SIGKILL ({grace}s) would cut the drain ({drain}s)"


def test_systemd_stop_timeout_outlasts_the_drain():
    unit = SYSTEMD.read_text()
    stop = int(re.search(r"^TimeoutStopSec=(\d+)$", unit, re.M).group(1))
    drain = float(re.search(r"--drain-timeout (\d+)", unit).group(1))
    assert stop > drain


def test_each_pool_worker_journals_on_a_claim_of_its_own():
    pool = _pool()
    spec = pool["spec"]
    (claim,) = [c for c in spec["volumeClaimTemplates"] if c["metadata"]["name"] == "journal"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert claim["spec"]["resources"]["requests"]["storage"]
    # the journal lives on that claim: --journal is its mount or a directory under it
    journal = PurePosixPath(_flags(_agentd(pool)["args"])["--journal"])
    (mount,) = [m for m in _agentd(pool)["volumeMounts"] if m["name"] == "journal"]
    assert not mount.get("readOnly")
    assert journal == PurePosixPath(mount["mountPath"]) \
        or PurePosixPath(mount["mountPath"]) in journal.parents
    # no pod-level volume shadows the template's claim of the same name
    assert "journal" not in {v["name"] for v in spec["template"]["spec"]["volumes"]}
    # a scale-down or a deleted StatefulSet keeps the journals (deleting one drops runs)
    assert spec["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain",
                                                            "whenScaled": "Retain"}


def test_the_non_root_worker_can_write_its_journal():
    pod = _pool()["spec"]["template"]["spec"]["securityContext"]
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] != 0
    assert pod["fsGroup"] == pod["runAsUser"]


def test_every_deploy_file_the_docs_name_exists():
    named = set()
    for page in (ROOT / "docs").glob("*.md"):
        named |= set(re.findall(r"`(deploy/[\w./-]+)`", page.read_text()))
    assert named, "the docs name no deploy/ file"
    missing = sorted(n for n in named if not (ROOT / n).exists())
    assert not missing, f"docs name deploy files that do not exist: {missing}"
