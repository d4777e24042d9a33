from lcrag.readers import CompletionCache


# -- defect 7: a damaged cache is derived data (set aside, rebuilt, one warning); a run's cache is user data ---------
import subprocess  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402


WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from lcrag.readers import Completion, CompletionCache
    path, name, go = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    while not go.exists():
        time.sleep(0.01)
    cache = CompletionCache(path)
    for i in range(300):
        cache.put(f"{name}-{i}", Completion("m", i, 1, text=f"{name} {i}"))
        cache.put(f"shared-{i}", Completion("m", i, 1, text=f"shared {i}"))
        assert cache.get(f"shared-{i}").text == f"shared {i}"
    cache.close()
""")


def test_two_processes_write_one_cache_at_once(tmp_path):
    path, go = tmp_path / "completions.sqlite", tmp_path / "go"
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), name, str(go)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name in ("a", "b")]
    go.touch()  # both open a new file and write at the same moment
    results = [w.communicate(timeout=300) for w in writers]
    assert [w.returncode for w in writers] == [0, 0], [err for _, err in results]
    assert len(CompletionCache(path)) == 900
