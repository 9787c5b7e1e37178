"""slothqueue: a per-user background job daemon over a durable SQLite lease queue."""

__version__ = "0.1.0"
