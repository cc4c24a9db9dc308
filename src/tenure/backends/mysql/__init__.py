"""``mysql://`` and ``mariadb://``: one row per lock in an InnoDB table created on first use;
acquire is one ``INSERT ... ON DUPLICATE KEY UPDATE`` judged by the server's clock; waiters
back off, bounded by the holder's remaining lease. Driver: PyMySQL (``tenure[mysql]``)."""

# The registry entry (``tenure._registry``): read without importing any driver.
SCHEMES = ("mysql", "mariadb")
EXTRA = "mysql"
