"""The Prometheus example of docs/observability.md runs as written: the page's code block,
with its port swapped for a free loopback one, serves tenure's metrics on /metrics after one
acquisition. In a subprocess: a process sets its global MeterProvider once."""

from __future__ import annotations

import pathlib
import re
import socket
import subprocess
import sys
import textwrap

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "observability.md"
DOCUMENTED_SERVER = "start_http_server(9464)"


def documented_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.DOTALL)
    (example,) = [block for block in blocks if "PrometheusMetricReader" in block]
    return example


def test_the_documented_prometheus_example_serves_tenures_metrics(
    tmp_path: pathlib.Path,
) -> None:
    example = documented_example()
    assert example.count(DOCUMENTED_SERVER) == 1
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    script = example.replace(DOCUMENTED_SERVER, f"start_http_server({port}, addr='127.0.0.1')")
    script += textwrap.dedent(f"""
        import urllib.request
        import tenure

        with tenure.connect("sqlite:///{tmp_path / 'locks.db'}") as locks:
            with locks.lock("orders:42", ttl=10):
                pass
        with urllib.request.urlopen("http://127.0.0.1:{port}/metrics", timeout=30) as page:
            print(page.read().decode())
    """)
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=120
    )
    assert result.returncode == 0, result.stderr
    acquisitions = [
        line for line in result.stdout.splitlines()
        if line.startswith("tenure_acquisitions_total{")
    ]
    assert len(acquisitions) == 1, result.stdout
    (line,) = acquisitions
    assert 'outcome="acquired"' in line
    assert 'tenure_backend="sqlite"' in line and 'tenure_name_prefix="orders"' in line
    assert line.rsplit(" ", 1)[1] in ("1", "1.0"), line
    # The wait-time histogram: one observation (exporters add the unit to the name).
    assert re.search(r"^tenure_wait(_seconds)?_count\{[^}]*\} 1(\.0)?$", result.stdout, re.M), (
        result.stdout
    )
