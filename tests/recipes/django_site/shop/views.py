import time

from django.http import HttpRequest, JsonResponse

import tenure

# One client per process, opened at import: $TENURE_URL, else the per-user SQLite file.
# tenure reopens its connections in a child after fork (gunicorn's preload), so this is safe.
locks = tenure.connect()
# (user id, "enter" | "exit") in the order they happened; the tests read it.
events: list[tuple[int, str]] = []


@locks.locked("cart:{user_id}", ttl=10, timeout=5)
def checkout(request: HttpRequest, user_id: int) -> JsonResponse:
    # One checkout per cart at a time, whichever worker or machine serves the request.
    events.append((user_id, "enter"))
    time.sleep(0.01)  # the work: charge the card, write the order
    events.append((user_id, "exit"))
    return JsonResponse({"user": user_id})
