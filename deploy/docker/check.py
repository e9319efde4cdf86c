#!/usr/bin/env python3
"""Checks that the Dockerfile and the Helm chart agree with the Cargo workspace.

No Docker engine is available to build the image here, so this catches the drift that would
break it: a package passed to `cargo build -p` or a binary copied from target/release that no
longer exists, or a chart command that names a binary the image does not install.
Prints "N passed, M failed" last.

Usage: python3 deploy/docker/check.py   (needs cargo on PATH)
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "deploy/docker/Dockerfile").read_text()
TEMPLATES = ROOT / "deploy/helm/buzz-deletion/templates"


def workspace_binaries() -> dict[str, set[str]]:
    """Package name -> names of its bin targets."""
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps", "--offline"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout
    return {
        p["name"]: {t["name"] for t in p["targets"] if "bin" in t["kind"]}
        for p in json.loads(out)["packages"]
    }


def main() -> int:
    bins = workspace_binaries()
    all_bins = set().union(*bins.values())
    built = re.findall(r"-p (\S+)", DOCKERFILE)
    copied = re.findall(r"target/release/(\S+) /out/", DOCKERFILE)
    installed = set(copied)
    chart_commands = set(re.findall(r"/usr/local/bin/([\w-]+)", "".join(
        p.read_text() for p in TEMPLATES.glob("*.yaml"))))
    entrypoint = re.findall(r'ENTRYPOINT \["/usr/local/bin/([\w-]+)"', DOCKERFILE)

    checks = [
        ("dockerfile_builds_existing_packages", built and all(p in bins for p in built), built),
        ("dockerfile_copies_binaries_those_packages_build",
         copied and all(any(b in bins[p] for p in built) for b in copied), copied),
        ("image_ships_the_worker_and_the_cli",
         {"buzz-deletion-worker", "buzz-deletion"} <= installed <= all_bins, installed),
        ("entrypoint_is_the_worker", entrypoint == ["buzz-deletion-worker"], entrypoint),
        ("chart_runs_only_binaries_the_image_installs",
         chart_commands and chart_commands <= installed, chart_commands),
    ]
    failed = 0
    for name, ok, detail in checks:
        print(f"  {'ok  ' if ok else 'FAIL'}  {name}" + ("" if ok else f": {detail}"))
        failed += 0 if ok else 1
    print(f"docker image: {len(checks) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
