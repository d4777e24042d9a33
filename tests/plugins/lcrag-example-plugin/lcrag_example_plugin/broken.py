"""A plugin that cannot load (its dependency is missing): lcrag must report it in one line and keep working."""

raise ImportError("lcrag_example_plugin.broken needs the package 'not-installed-anywhere'")
