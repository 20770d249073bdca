"""In-memory caches."""
