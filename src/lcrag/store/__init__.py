"""Collections kept for the service: the store interface, the embedded store (SQLite and files) and the PostgreSQL
store shared by replicas (schema, pool, job queue), and the caches derived from a collection's files."""
