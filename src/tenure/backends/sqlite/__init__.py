"""``sqlite:///path``: the embedded default. One table in WAL mode; every operation is one
write transaction; processes of one host coordinate through the file."""

# The registry entry (``tenure._registry``): read without importing any driver.
SCHEMES = ("sqlite",)
EXTRA = None
