"""Routing between strategies: Self-Route's composition (a first strategy, a condition, a second), the cascade,
cache-aware routing, the learned router with its run-time share control, and adapting a shipped router to a reader."""
