"""Connections and sessions held for free (issue 34, items 7 and 8), measured at the issue's scale against real
processes.

    flock /tmp/lcrag-bench.lock python benchmarks/bench_connections.py --out benchmarks/results/connections.md
    python benchmarks/bench_connections.py --connections 200 --sessions 100 --seconds 12 --ramp 2   # a smoke run

Slow connections (item 7): ``--connections`` (21,000) slow connections, each sending a request line and then one
header line every 10 s and never the end of its headers, opened over ``--ramp`` seconds by ``--workers`` client
processes (each raises its own open-file limit to the hard one: 21,000 sockets do not fit one process here; each runs
at nice 10, as the attacker's CPU is not the server's when it attacks from elsewhere), against a real `lcrag serve`
with its default flags, and against `lcrag mcp --transport http`. A connection the server closes is opened again at
the attacker's next 10-s round, as the slowloris tool does. Two phases per server: every connection from 127.0.0.1
(the per-client cap), then spread over 127.0.0.2-127.0.0.255 (the connection cap). Meanwhile a new client asks
`GET /healthz` (`/mcp` for the MCP server: any answer counts) four times a second, from 127.0.0.1 like the attacker;
the table gives its latency, the longest any slow connection was held, the server's open descriptors at the most
(next to their budget) and the lines its log grew by.

Idle MCP sessions (item 8): ``--sessions`` (10,000) `initialize` requests never followed up, 32 at a time, against
`lcrag mcp --transport http` with its default flags, first from one address, then from 254; the server's resident
memory before, at its peak and after, and then whether (and how fast) a new client is served (initialize,
initialized, tools/list).

The reader is never called (`--llm openai:audit --base-url` a closed port): this is about connections. The report
gives numbers, not a verdict: what the service must do with such clients (close them at the header timeout, refuse
over the caps, serve a new client) is asserted by tests/integration/service/test_hostile_connections.py and
test_hostile_mcp.py at a small scale; this script measures what it costs at the issue's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import resource
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from common import Processes, free_port, log, machine, md_table, stop_group

LCRAG = str(Path(sys.executable).with_name("lcrag"))
TRICKLE_EVERY = 10.0
IP_BIND_ADDRESS_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)
HEADER_TIMEOUT = 10.0  # lcrag's default --header-timeout
FD_BUDGET = 1024 + 2 * 1024 + 256  # --max-connections, twice the backlog, the server's own (lcrag.service.http.server)
HELLO = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "audit", "version": "0"}}}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def raise_file_limit() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


# -- the servers ----------------------------------------------------------------------------------------------------
@dataclass
class Server:
    name: str
    url: str
    probe_path: str
    process: subprocess.Popen
    log_file: Path
    args: list[str]

    def rss_mb(self, key: str = "VmRSS") -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
        return 0.0

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def fds(self) -> int:
        try:
            return len(os.listdir(f"/proc/{self.process.pid}/fd"))
        except OSError:
            return 0

    def log_lines(self) -> int:
        return len(self.log_file.read_text(errors="replace").splitlines())

    def stop(self) -> None:
        stop_group(self.process)


def start(work: Path, command: str, processes: Processes) -> Server:
    """`lcrag serve` (or `lcrag mcp --transport http`) with its default flags, started through ``processes`` (so
    stopped with it whatever happens), once it answers; one that exits or does not answer within 120 s is stopped
    and a RuntimeError with the end of its log."""
    port = free_port()
    cache = work / f"cache-{command}"
    args = [LCRAG, command, *(["--transport", "http"] if command == "mcp" else []), "--port", str(port),
            "--cache-dir", str(cache), "--llm", "openai:audit", "--base-url", "http://127.0.0.1:9/v1",
            "--context-window", "8192"]
    log_file = work / f"{command}.log"
    log(f"starting {shlex.join(args[1:])}")
    with log_file.open("w") as err:
        process = processes.popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    probe = "/healthz" if command == "serve" else "/mcp"
    server = Server(command, f"http://127.0.0.1:{port}", probe, process, log_file, args)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        try:
            httpx.get(server.url + probe, timeout=2)
            return server
        except httpx.TransportError:
            time.sleep(0.2)
    processes.stop(process)
    raise RuntimeError(f"lcrag {command} did not start (exit {process.returncode}): {log_file.read_text()[-2000:]}")


# -- slowloris ------------------------------------------------------------------------------------------------------
def attacker(port: int, count: int, sources: list[str], ramp: float, seconds: float, out) -> None:
    """One client process: ``count`` slow connections for ``seconds``; sends its tallies to ``out``. It runs at
    nice 10: on this one machine the attacker would otherwise take the server's CPU, which an attacker elsewhere
    does not."""
    raise_file_limit()
    os.nice(10)
    stats = {"opened": 0, "refused": 0, "closed_by_server": 0, "longest": 0.0, "held_at_end": 0, "answers": {}}

    async def slow(index: int, deadline: float) -> None:
        await asyncio.sleep(random.uniform(0, ramp))
        source = sources[index % len(sources)]
        while time.monotonic() < deadline:
            try:
                sock = socket.socket()
                sock.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)  # the port is picked at connect()
                sock.bind((source, 0))
                sock.setblocking(False)
                await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
                reader, writer = await asyncio.open_connection(sock=sock)
            except OSError:
                sock.close()
                stats["refused"] += 1
                await asyncio.sleep(TRICKLE_EVERY)
                continue
            stats["opened"] += 1
            opened = time.monotonic()
            closed = False
            try:
                writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                while time.monotonic() < deadline:
                    try:
                        data = await asyncio.wait_for(reader.read(4096), min(TRICKLE_EVERY, deadline - time.monotonic()))
                    except asyncio.TimeoutError:
                        writer.write(b"X-Slow: 1\r\n")
                        await writer.drain()
                        continue
                    if not data:
                        closed = True
                        break
                    status = data.split(b" ", 2)[1].decode(errors="replace") if data.startswith(b"HTTP/") else "?"
                    stats["answers"][status] = stats["answers"].get(status, 0) + 1
            except OSError:
                closed = True
            held = time.monotonic() - opened
            if closed:
                stats["closed_by_server"] += 1
                stats["longest"] = max(stats["longest"], held)
            else:
                stats["held_at_end"] += 1
            writer.close()
            if closed:  # the attacker finds it dead at its next round, and opens another
                await asyncio.sleep(max(0.0, TRICKLE_EVERY - held % TRICKLE_EVERY))

    async def run() -> None:
        deadline = time.monotonic() + seconds
        await asyncio.gather(*(slow(i, deadline) for i in range(count)))

    asyncio.run(run())
    out.put(stats)


def probe(url: str, path: str, stop: threading.Event, timings: list[float], failures: list[str]) -> None:
    host, port = url.removeprefix("http://").split(":")
    request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode()
    while not stop.is_set():
        started = time.perf_counter()
        try:
            with socket.create_connection((host, int(port)), timeout=5) as sock:
                sock.sendall(request)
                got = sock.recv(4096)
            if not got.startswith(b"HTTP/1.1 "):
                raise OSError(f"answered {got[:40]!r}")
            timings.append(time.perf_counter() - started)
        except OSError as exc:
            failures.append(str(exc)[:80])
        stop.wait(0.25)


def end_attackers(processes: list[multiprocessing.Process]) -> None:
    """Stop the attacking processes still running (a failure or an interruption before their end)."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        if process.pid is not None:
            process.join(5)
            if process.is_alive():
                process.kill()
                process.join()


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def slowloris(server: Server, connections: int, workers: int, spread: bool, ramp: float, seconds: float) -> dict:
    sources = [f"127.0.0.{i}" for i in range(2, 256)] if spread else ["127.0.0.1"]
    port = int(server.url.rsplit(":", 1)[1])
    lines_before = server.log_lines()
    queue = multiprocessing.Queue()
    share = [connections // workers + (1 if i < connections % workers else 0) for i in range(workers)]
    # daemon: ended by multiprocessing if this process exits first, and by the finally below on any failure
    processes = [multiprocessing.Process(target=attacker, args=(port, n, sources, ramp, seconds, queue), daemon=True)
                 for n in share]
    stop, timings, failures = threading.Event(), [], []
    prober = threading.Thread(target=probe, args=(server.url, server.probe_path, stop, timings, failures))
    max_fds, max_rss = 0, 0.0
    cpu_before, machine_before = server.cpu_seconds(), os.times().elapsed
    try:
        for process in processes:
            process.start()
        prober.start()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            max_fds, max_rss = max(max_fds, server.fds()), max(max_rss, server.rss_mb())
            time.sleep(0.5)
        server_cpu = (server.cpu_seconds() - cpu_before) / (os.times().elapsed - machine_before)
        tallies = [queue.get(timeout=120) for _ in processes]
        for process in processes:
            process.join(60)
    finally:
        stop.set()
        if prober.is_alive():
            prober.join()
        end_attackers(processes)
    answers: dict[str, int] = {}
    for tally in tallies:
        for status, n in tally["answers"].items():
            answers[status] = answers.get(status, 0) + n
    return {
        "server": f"lcrag {server.name}", "from": "127.0.0.2-255" if spread else "127.0.0.1",
        "connections": connections, "opened": sum(t["opened"] for t in tallies),
        "connect_failed": sum(t["refused"] for t in tallies),
        "closed_by_server": sum(t["closed_by_server"] for t in tallies),
        "longest_held_s": max(t["longest"] for t in tallies), "held_at_end": sum(t["held_at_end"] for t in tallies),
        "answers": answers, "probes": len(timings), "probe_failures": len(failures),
        "probe_failure_sample": failures[:3], "p50_ms": percentile(timings, 50) * 1000,
        "p99_ms": percentile(timings, 99) * 1000, "max_ms": max(timings, default=float("nan")) * 1000,
        "max_fds": max_fds, "max_rss_mb": max_rss, "log_lines": server.log_lines() - lines_before,
        "server_alive": server.process.poll() is None, "server_cpu": server_cpu,
    }


# -- idle MCP sessions --------------------------------------------------------------------------------------------
async def initializations(url: str, count: int, spread: bool, concurrency: int = 32) -> dict:
    sources = [f"127.0.0.{i}" for i in range(2, 256)] if spread else ["127.0.0.1"]
    clients = [httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(local_address=s), timeout=30) for s in sources]
    statuses: dict[int, int] = {}
    queue: asyncio.Queue = asyncio.Queue()
    for i in range(count):
        queue.put_nowait(i)

    async def work() -> None:
        while not queue.empty():
            i = queue.get_nowait()
            try:
                reply = await clients[i % len(clients)].post(url, json=HELLO, headers=ACCEPT)
                statuses[reply.status_code] = statuses.get(reply.status_code, 0) + 1
            except httpx.HTTPError as exc:
                statuses[type(exc).__name__] = statuses.get(type(exc).__name__, 0) + 1

    started = time.monotonic()
    await asyncio.gather(*(work() for _ in range(concurrency)))
    took = time.monotonic() - started
    for client in clients:
        await client.aclose()
    return {"statuses": statuses, "seconds": took}


def new_client_served(url: str) -> tuple[bool, float, str]:
    started = time.monotonic()
    try:
        opened = httpx.post(url, json=HELLO, headers=ACCEPT, timeout=30)
        if opened.status_code != 200:
            return False, time.monotonic() - started, f"initialize: {opened.status_code} {opened.text[:100]}"
        headers = ACCEPT | {"Mcp-Session-Id": opened.headers["mcp-session-id"], "Mcp-Protocol-Version": "2025-06-18"}
        httpx.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers, timeout=30)
        listed = httpx.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=headers,
                            timeout=30)
        text = listed.text
        if "data:" in text:
            text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
        tools = sorted(t["name"] for t in json.loads(text)["result"]["tools"])
        httpx.delete(url, headers=headers, timeout=30)
        return tools == ["ask", "list_collections", "search"], time.monotonic() - started, ", ".join(tools)
    except (httpx.HTTPError, ValueError, KeyError, StopIteration) as exc:
        return False, time.monotonic() - started, f"{type(exc).__name__}: {exc}"[:120]


def idle_sessions(server: Server, count: int, spread: bool) -> dict:
    url = server.url + "/mcp"
    new_client_served(url)  # warm: the first session's imports and caches are not what is measured
    time.sleep(1)
    before = server.rss_mb()
    peak = {"rss": before}
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak["rss"] = max(peak["rss"], server.rss_mb())
            stop.wait(0.2)

    watcher = threading.Thread(target=watch)
    watcher.start()
    lines_before = server.log_lines()
    sent = asyncio.run(initializations(url, count, spread))
    served, took, detail = new_client_served(url)
    time.sleep(12)  # past the init timeout (10 s): the sessions never initialized are gone
    stop.set()
    watcher.join()
    return {"from": "127.0.0.2-255" if spread else "127.0.0.1", "initializations": count,
            "statuses": sent["statuses"], "rate": count / sent["seconds"], "rss_before": before,
            "rss_peak": peak["rss"], "rss_after": server.rss_mb(), "served": served, "served_s": took,
            "served_detail": detail, "log_lines": server.log_lines() - lines_before}


# -- the report -----------------------------------------------------------------------------------------------------
def render(loris: list[dict], sessions: list[dict], command: str, elapsed: float, load_at_start: float) -> str:
    out = ["# Connections and sessions held for free (issue 34, items 7 and 8)", "",
           f"Command: `{command}`", "", f"Machine: {machine()}; `ulimit -n` {resource.getrlimit(resource.RLIMIT_NOFILE)}"
           " (soft, hard) for the client processes, which raise their soft limit to the hard one. Run time "
           f"{elapsed:.0f} s. Load average (1 min) at start and end: {load_at_start:.1f}, {os.getloadavg()[0]:.1f} (the "
           "machine is shared: other jobs ran meanwhile).", "",
           "Servers: `lcrag serve` and `lcrag mcp --transport http` with their default flags (`--max-connections "
           "1024 --max-client-connections 128 --header-timeout 10 --body-timeout 30 --keep-alive 5`; for MCP also "
           "`--max-sessions 1000 --max-client-sessions 32 --session-init-timeout 10`).", "",
           "## Slow connections (item 7)", "",
           "Each connection sends `GET / HTTP/1.1` and a header line every 10 s, never the blank line; a closed one "
           "is opened again at its next 10-s round. The probe is a new connection from 127.0.0.1 asking "
           "`/healthz` (`/mcp` on the MCP server) four times a second.", ""]
    out.append(md_table(
        ["server", "slow connections from", "connections opened", "closed by the server",
         f"longest held (s; header timeout {HEADER_TIMEOUT:.0f})",
         "server answers to them", "probe p50 / p99 / max (ms)", "probe failures", f"server fds at most (budget {FD_BUDGET:,})",
         "server RSS at most (MB)", "log lines added"],
        [[r["server"], f"{r['connections']:,} from {r['from']}", f"{r['opened']:,}", f"{r['closed_by_server']:,}",
          f"{r['longest_held_s']:.1f}", ", ".join(f"{n:,}× {s}" for s, n in sorted(r["answers"].items())) or "-",
          f"{r['p50_ms']:.1f} / {r['p99_ms']:.1f} / {r['max_ms']:.1f}", f"{r['probe_failures']} of "
          f"{r['probes'] + r['probe_failures']}", f"{r['max_fds']:,}", f"{r['max_rss_mb']:.0f}", r["log_lines"]]
         for r in loris]))
    out += ["", "## Idle MCP sessions (item 8)", "",
            "`initialize` requests never followed up, 32 at a time; then a new client: initialize, "
            "notifications/initialized, tools/list.", ""]
    out.append(md_table(
        ["initializations from", "answers", "rate (/s)", "RSS before / peak / after 12 s (MB)", "growth at peak (MB)",
         "new client served", "log lines added"],
        [[f"{s['initializations']:,} from {s['from']}", ", ".join(f"{n:,}× {k}" for k, n in sorted(
            s["statuses"].items(), key=str)), f"{s['rate']:.0f}",
          f"{s['rss_before']:.0f} / {s['rss_peak']:.0f} / {s['rss_after']:.0f}",
          f"{s['rss_peak'] - s['rss_before']:.0f}", f"{'yes' if s['served'] else 'NO'} ({s['served_s'] * 1000:.0f} ms: "
          f"{s['served_detail']})", s["log_lines"]] for s in sessions]))
    out.append("")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="write the Markdown report here")
    parser.add_argument("--connections", type=int, default=21_000)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=2, help="client processes for the slow connections")
    parser.add_argument("--ramp", type=float, default=20.0, help="seconds over which the slow connections open")
    parser.add_argument("--seconds", type=float, default=45.0, help="length of each slow-connection phase")
    parser.add_argument("--skip", default="", help="comma-separated: serve, mcp, sessions")
    args = parser.parse_args()
    load_at_start = os.getloadavg()[0]
    hard = raise_file_limit()
    if args.connections / args.workers > hard - 200:
        raise SystemExit(f"{args.connections:,} connections over {args.workers} processes do not fit the open-file "
                         f"limit of {hard:,} a process: raise --workers")
    skip = set(filter(None, args.skip.split(",")))
    started = time.monotonic()
    loris, sessions = [], []
    with tempfile.TemporaryDirectory(prefix="lcrag-connections-") as tmp, Processes() as running:
        work = Path(tmp)
        for command in ("serve", "mcp"):
            if command in skip:
                continue
            server = start(work, command, running)
            try:
                for spread in (False, True):
                    log(f"lcrag {command}: {args.connections:,} slow connections from "
                        f"{'254 addresses' if spread else 'one address'} for {args.seconds:.0f} s")
                    loris.append(slowloris(server, args.connections, args.workers, spread, args.ramp, args.seconds))
                    log(json.dumps(loris[-1]))
                    time.sleep(HEADER_TIMEOUT + 2)  # let the last ones time out
            finally:
                server.stop()
        if "sessions" not in skip:
            server = start(work, "mcp", running)
            try:
                for spread in (False, True):
                    log(f"lcrag mcp: {args.sessions:,} idle initializations from "
                        f"{'254 addresses' if spread else 'one address'}")
                    sessions.append(idle_sessions(server, args.sessions, spread))
                    log(json.dumps(sessions[-1]))
            finally:
                server.stop()
    command = f"cd {Path.cwd().name} && python {shlex.join(sys.argv)}"  # as run
    report = render(loris, sessions, command, time.monotonic() - started, load_at_start)
    print(report)
    if args.out:
        args.out.write_text(report, encoding="utf-8")


if __name__ == "__main__":
    main()
