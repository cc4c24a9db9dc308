"""SQLite's clock in SQL, shared by the lock and the semaphore statements."""

__all__ = ["NOW"]

NOW = "((julianday('now') - 2440587.5) * 86400.0)"
"""Unix seconds by SQLite's clock (the host's); one value throughout a statement."""
