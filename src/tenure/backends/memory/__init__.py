"""``memory://``: one lock store per process, for unit tests and users' own tests."""

# The registry entry (``tenure._registry``): read without importing any driver.
SCHEMES = ("memory",)
EXTRA = None
