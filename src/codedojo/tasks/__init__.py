"""Harbor task directories: the task.toml schema, loading, validation, writing, and bundled tasks."""
