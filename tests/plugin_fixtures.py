"""The example plugin in tests/plugins/lcrag-example-plugin, installed apart by the README's test command, put on the
path for the plugin tests of the unit tier (in this process) and the integration tier (in fresh interpreters too)."""

import importlib
import sys
from importlib import metadata
from pathlib import Path

import pytest

from lcrag.core.registry import METRICS, RETRIEVERS, STRATEGIES, installed_entry_points

PLUGIN = "lcrag-example-plugin"
TEXT = "alpha one two three four. beta five six seven eight. gamma nine ten eleven twelve. omega the end is here."


SITE = Path(sys.prefix) / "lcrag-plugins"  # where the README's test command installs the example plugin
INSTALL = f"pip install --upgrade --target {SITE} ./tests/plugins/{PLUGIN}"


@pytest.fixture(scope="module")
def example_plugin_installed():
    """The example plugin's installation on the path (and its entry points seen) for these tests only."""
    sys.path.insert(0, str(SITE))
    importlib.invalidate_caches()
    installed_entry_points.cache_clear()
    try:
        try:
            metadata.distribution(PLUGIN)
            installed = True
        except metadata.PackageNotFoundError:
            installed = False
        if not installed:
            pytest.fail(f"the example plugin is not installed in {SITE}: {INSTALL} (the README's test command does it)",
                        pytrace=False)
        yield
    finally:
        sys.path.remove(str(SITE))
        installed_entry_points.cache_clear()
        RETRIEVERS.remove("keyword-overlap")
        STRATEGIES.remove("first-chunk")
        METRICS._failed.discard("broken")
        for module in [m for m in sys.modules if m.startswith("lcrag_example_plugin")]:
            del sys.modules[module]


