"""INI-style configuration files."""
