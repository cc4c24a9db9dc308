"""``postgresql://`` (and ``postgres://``): one row per lock in a table created on first use;
acquire is one ``INSERT ... ON CONFLICT DO UPDATE ... WHERE`` judged by the server's clock;
releases wake waiters through ``LISTEN/NOTIFY``. Driver: psycopg 3 (``tenure[postgresql]``)."""

# The registry entry (``tenure._registry``): read without importing any driver.
SCHEMES = ("postgresql", "postgres")
EXTRA = "postgresql"
