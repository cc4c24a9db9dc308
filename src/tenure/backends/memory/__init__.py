"""``memory://``: one lock store per process, for unit tests and users' own tests."""
