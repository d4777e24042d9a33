"""An example lcrag plugin: each module registers one part when lcrag imports it through its entry point."""
