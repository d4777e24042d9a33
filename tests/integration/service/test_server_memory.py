"""What the server process gives back to the system (issue 42, reproduced 8: a 12 MB Markdown upload cost up to
+103 MB of the server's memory, some of it freed but kept resident by malloc)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

KEPT = """
import sys
from lcrag.service.http.server import large_blocks_apart

def resident_mb():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20

if sys.argv[1] == "apart":
    assert large_blocks_apart()
before = resident_mb()
text = bytearray(12 << 20)  # one large file's copy, freed: malloc's threshold rises to its size
del text
text = bytearray(12 << 20)  # the next one's: carved from the heap, unless mapped apart
held = [bytearray(1000) for _ in range(100)]  # what the server allocates meanwhile, above it
del text
print(resident_mb() - before)
"""


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's malloc")
def test_a_large_block_freed_goes_back_to_the_system():
    def kept(how: str) -> float:
        return float(subprocess.run([sys.executable, "-c", KEPT, how], capture_output=True, text=True,
                                    check=True).stdout)

    assert kept("heap") > 8  # the default: 12 MB freed, and kept
    assert kept("apart") < 4
