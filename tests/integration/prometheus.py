"""A real Prometheus (Debian's binary) on loopback, scraping one target, for integration tests."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from tests import realparts
from tests.integration.harness import free_port


def fast_rules(source: Path, target: Path) -> Path:
    """Copy a rule file with every group's own ``interval`` removed.

    The groups then run at the global ``evaluation_interval`` (one second here)
    instead of, say, the 5-minute baseline group waiting up to five minutes for
    its first evaluation. Expressions are not touched.
    """
    data = yaml.safe_load(source.read_text(encoding="utf-8"))
    for group in data["groups"]:
        group.pop("interval", None)
    target.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return target


class PrometheusProcess:
    """``prometheus`` scraping ``target`` as ``job`` every second, with the given rule files.

    Storage, configuration and log live in ``workdir``. Use as a context
    manager, or ``start()``/``stop()``; ``stop`` is safe to call twice.
    """

    def __init__(
        self, workdir: Path, *, target: str, rule_files: Sequence[Path], job: str = "sidecar"
    ) -> None:
        self.binary = realparts.tool("prometheus")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "prometheus.log"
        self.config_path = workdir / "prometheus.yml"
        self.storage = workdir / "tsdb"
        config = {
            "global": {
                "scrape_interval": "1s",
                "scrape_timeout": "1s",
                "evaluation_interval": "1s",
            },
            "rule_files": [str(p) for p in rule_files],
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [target]}]}],
        }
        self.config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> PrometheusProcess:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    self.binary,
                    f"--config.file={self.config_path}",
                    f"--storage.tsdb.path={self.storage}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited {self.proc.returncode}:\n{self.log()}")
            if self._get("/-/ready")[0] == 200:
                return self
            time.sleep(0.1)  # polling a starting server
        raise RuntimeError(f"prometheus not ready in {timeout}s:\n{self.log()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def __enter__(self) -> PrometheusProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]

    def _get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"{self.url}{path}", timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except OSError:
            return 0, ""

    def query(self, expr: str) -> dict[str, Any]:
        """Instant query via ``/api/v1/query``; the decoded body, errors (HTTP 4xx) included."""
        data = urllib.parse.urlencode({"query": expr}).encode()
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/query", data=data, timeout=10) as r:
                body: dict[str, Any] = json.load(r)
        except urllib.error.HTTPError as exc:
            body = json.load(exc)
        return body

    def scalar(self, expr: str) -> float | None:
        """The value of a query that yields one sample (e.g. a ``sum``); None when empty."""
        body = self.query(expr)
        if body["status"] != "success":
            raise AssertionError(f"{expr}: {body.get('error')}")
        result = body["data"]["result"]
        return float(result[0]["value"][1]) if result else None

    def rule_groups(self) -> list[dict[str, Any]]:
        status, text = self._get("/api/v1/rules")
        assert status == 200, text
        groups: list[dict[str, Any]] = json.loads(text)["data"]["groups"]
        return groups

    def rules_evaluated_since(self, when: float) -> bool:
        """True once every rule group has finished an evaluation after ``when`` (Unix time)."""
        groups = self.rule_groups()
        return bool(groups) and all(
            datetime.fromisoformat(g["lastEvaluation"]).timestamp() > when for g in groups
        )
