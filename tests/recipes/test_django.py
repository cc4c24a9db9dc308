"""The Django recipe (docs/recipes/django.md): a view decorated with a lock per request, and a
management command run under `tenure run`, on the SQLite default and on real servers."""

from __future__ import annotations

import importlib
import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import threading

import pytest

import tenure

SITE = pathlib.Path(__file__).parent / "django_site"
COMMAND_LINE = (pathlib.Path(__file__).parent / "django-command.txt").read_text().strip()


def test_concurrent_checkouts_of_one_cart_never_overlap(
    recipe_url: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    monkeypatch.setenv("TENURE_URL", recipe_url)
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "site_settings")
    monkeypatch.syspath_prepend(str(SITE))
    import django
    from django.test import Client

    django.setup()
    # The views module opens its client at import, from $TENURE_URL: import it afresh for
    # this backend (and drop the URL resolver's references to an earlier import's views).
    from django.urls import clear_url_caches

    for module in ("shop.urls", "shop.views"):
        sys.modules.pop(module, None)
    clear_url_caches()
    views = importlib.import_module("shop.views")

    request.addfinalizer(views.locks.close)
    statuses: list[int] = []

    def checkout() -> None:
        statuses.append(Client().post("/cart/7/checkout").status_code)

    threads = [threading.Thread(target=checkout) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert statuses == [200] * 8
    assert views.events == [(7, "enter"), (7, "exit")] * 8


def run_command_line(workdir: pathlib.Path, url: str) -> subprocess.CompletedProcess[str]:
    argv = shlex.split(COMMAND_LINE)
    assert argv[0] == "tenure" and argv[argv.index("--") + 1] == "python"
    argv[0] = str(pathlib.Path(sys.executable).parent / "tenure")
    argv[argv.index("--") + 1] = sys.executable
    environment = {**os.environ, "TENURE_URL": url}
    return subprocess.run(
        argv, check=False, cwd=workdir, env=environment, capture_output=True, text=True,
        timeout=60,
    )


def test_management_command_under_tenure_run_is_skipped_silently_while_busy(
    tmp_path: pathlib.Path, recipe_url: str
) -> None:
    site = tmp_path / "site"
    shutil.copytree(SITE, site)
    url = recipe_url
    log = site / "rebuild_index.log"

    free = run_command_line(site, url)
    assert free.returncode == 0, free.stderr
    assert log.read_text().splitlines() == ["ran"]

    client = tenure.connect(url)
    try:
        with client.lock("rebuild-index", ttl=30):
            busy = run_command_line(site, url)
    finally:
        client.close()
    assert busy.returncode == 0, busy.stderr
    assert (busy.stdout, busy.stderr) == ("", "")
    assert log.read_text().splitlines() == ["ran"]
