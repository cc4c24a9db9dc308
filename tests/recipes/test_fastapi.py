"""The FastAPI recipe: concurrent requests for one order never overlap inside the lock, on the
SQLite default and on real servers."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.recipes import fastapi_app


def test_concurrent_requests_for_one_order_run_one_at_a_time(
    recipe_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TENURE_URL", recipe_url)
    fastapi_app.events.clear()
    requests = 8

    async def scenario() -> list[httpx.Response]:
        app = fastapi_app.app
        # httpx's ASGI transport does not run the lifespan; the server would.
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
                return await asyncio.gather(
                    *(client.post("/orders/42/ship") for _ in range(requests))
                )

    responses = asyncio.run(scenario())
    assert [r.status_code for r in responses] == [200] * requests
    fences = sorted(r.json()["fence"] for r in responses)
    assert len(set(fences)) == requests
    # Every enter is followed by its own exit before the next enter: no overlap.
    assert fastapi_app.events == [(42, "enter"), (42, "exit")] * requests
