"""Loading a project: discover files, render templates, parse YAML and SQL, resolve and validate."""
