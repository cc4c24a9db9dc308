"""A FastAPI app that takes a tenure lock per request (docs/recipes/fastapi.md)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, HTTPException, Request

import tenure


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    # One client for the app's life: $TENURE_URL, else the per-user SQLite file.
    async with tenure.connect_async() as locks:
        app.state.locks = locks
        yield


app = FastAPI(lifespan=lifespan)
# (order id, "enter" | "exit") in the order they happened; the tests read it.
events: list[tuple[int, str]] = []


@app.post("/orders/{order_id}/ship")
async def ship(order_id: int, request: Request) -> dict[str, int]:
    locks: tenure.AsyncLocks = request.app.state.locks
    try:
        async with locks.lock(f"orders:{order_id}", ttl=30, timeout=10) as lock:
            events.append((order_id, "enter"))
            await asyncio.sleep(0.01)  # the work: call the carrier, write the order
            events.append((order_id, "exit"))
            return {"order": order_id, "fence": lock.fence}
    except tenure.LockTimeout as exc:
        raise HTTPException(status_code=409, detail="order is being shipped") from exc
