#!/usr/bin/env python3
"""soak.py - a soak test of `kiln serve` over loopback, bounded in time.

Starts one server (prefix cache and SSD tier on, engine isolation as given), warms it up, then runs
CLIENTS concurrent clients for SECONDS, each looping over a random mix of what real and hostile
clients do:
  chat       a chat completion, not streamed (a few shared system prompts: prefix-cache hits)
  stream     the same, streamed to its [DONE]
  complete   /v1/completions, not streamed
  drop       a stream the client closes after a few events
  dropwait   a request not streamed whose client goes away before the answer
  slow       a stream read a few bytes at a time, with pauses (a slow reader)
  big        a body over --max-body-mb (declared length: 413 at once)
  badjson    malformed JSON (400)
  slowloris  request headers sent a byte at a time and never finished (the server closes)
and one more task asks GET /health every 200 ms and records how long each answer takes.

Pass criteria (each printed as a PASS/FAIL line, the test names prefixed with soak_):
  0 crashes (the processes are alive, no engine restart), 0 unexpected answers (a 5xx, a status the
  kind does not expect, a cut or unparsable body of a request the client waited for), every
  accepted request completed or cancelled (the engine's active and queued rows go back to 0), the
  resident memory after the run at most RSS_TOL above the memory after the warm-up (the server and
  its engine child together, each measured after SETTLE_S idle; less is no leak; the warm-up takes
  the caches and the KV block pool, whose memory is made on first need and kept, to their caps), the open descriptors of both back to their count after the warm-up.
  /health latency (max, p99) is reported; it is asserted (< 100 ms) only with --assert-health, since
  on a loaded machine wall-clock assertions fail for reasons outside the server.

Standard library only. Usage:
  soak.py --kiln build/kiln --model M [--clients 64] [--seconds 600] [--isolation|--no-isolation]
          [--ssd-dir DIR] [--json OUT] [--assert-health] [--seed N] [--series SEC] [--malloc-info] [--leak-check]
          [--env NAME=VALUE] [--log FILE]

The memory is reported per process (the server, then its engine child), and with --series every SEC
seconds of the run: RSS, threads, mappings and the resident kB of glibc's main heap, its other
arenas, the threads' stacks, other anonymous memory and mapped files (from /proc/PID/smaps); with
--malloc-info also what glibc says its arenas hold and how much of it the program uses (a leak grows
"in use", fragmentation grows "free").
"""
import argparse
import asyncio
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

KINDS = ["chat", "stream", "complete", "drop", "dropwait", "slow", "big", "badjson", "slowloris"]
WEIGHTS = [24, 24, 8, 10, 8, 8, 6, 8, 4]
SYSTEMS = [
    "You are a storyteller. Tell short stories about animals in the forest.",
    "You are a helpful assistant who answers in one short sentence, always politely.",
    "Write about a little girl named Lily who likes to play in the park with her dog.",
    "Once upon a time there was a boy who found a shiny red ball under a big tree.",
]
WORDS = "cat dog sun tree ball park happy sad big small red blue play run jump sing".split()
RSS_TOL = 0.05
SETTLE_S = 1.6  # idle time before memory is measured: the engine child trims its heap after 1 s idle


def proc_children(pid):
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
            if int(st[st.rindex(")") + 2:].split()[1]) == pid:
                out.append(int(d))
        except (OSError, ValueError, IndexError):
            pass
    return out


def rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def status_field(pid, name):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(name + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


ARENA = 64 << 20  # glibc's thread arenas are reserved 64 MiB at a time, aligned to their size


def smaps_kb(pid):
    """Resident kB of one process by kind of mapping, from /proc/PID/smaps: heap (glibc's main arena,
    [heap]), arenas (the other arenas: anonymous rw mappings that start 64 MiB-aligned), stacks
    (anonymous rw mappings right after a no-access guard page: the threads' stacks), anon (other
    anonymous memory: large blocks malloc mmaps on their own, the model's buffers), file (mapped
    files: the program, its libraries, the model), and maps (the number of mappings)."""
    out = {"heap": 0, "arenas": 0, "stacks": 0, "anon": 0, "file": 0, "maps": 0}
    try:
        with open(f"/proc/{pid}/smaps") as f:
            text = f.read()
    except OSError:
        return out
    prev_end, prev_none, cur = -1, False, None
    for line in text.splitlines():
        head = re.match(r"([0-9a-f]+)-([0-9a-f]+) (\S{4}) \S+ \S+ (\d+)\s*(.*)$", line)
        if head:
            lo, hi = int(head.group(1), 16), int(head.group(2), 16)
            perms, inode, name = head.group(3), int(head.group(4)), head.group(5).strip()
            if name == "[heap]":
                cur = "heap"
            elif inode != 0 or name.startswith("/"):
                cur = "file"
            elif perms.startswith("rw") and lo % ARENA == 0:
                cur = "arenas"
            elif perms.startswith("rw") and prev_none and prev_end == lo:
                cur = "stacks"
            else:
                cur = "anon"
            prev_end, prev_none = hi, perms.startswith("---")
            out["maps"] += 1
        elif line.startswith("Rss:") and cur:
            out[cur] += int(line.split()[1])
    return out


def malloc_info(pid, path):
    """glibc's own account of a process's heap, by calling malloc_info in it under gdb (attached for
    a moment; None when gdb or the call fails): arenas (their number), system (kB the arenas hold
    from the kernel), free (kB free inside them: fragmentation and glibc's caches), in_use (system -
    free: what the program holds), mmapped (kB of blocks malloc mapped on their own)."""
    if not shutil.which("gdb"):
        return None
    try:
        os.unlink(path)
    except OSError:
        pass
    cmd = ["gdb", "-p", str(pid), "-batch", "-nx", "-ex", f'set $f = (void *)fopen("{path}", "w")',
           "-ex", "call (int)malloc_info(0, $f)", "-ex", "call (int)fclose($f)"]
    try:
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
        import xml.etree.ElementTree as ET
        root = ET.parse(path).getroot()
    except Exception:  # noqa: BLE001 (gdb, the call or the XML failed: no figure)
        return None
    heaps = root.findall("heap")
    system = sum(int(h.find("system[@type='current']").get("size")) for h in heaps)
    free = sum(int(t.get("size")) for h in heaps for t in h.findall("total") if t.get("type") in ("fast", "rest"))
    mm = root.find("total[@type='mmap']")
    return {"arenas": len(heaps), "system": system >> 10, "free": free >> 10, "in_use": (system - free) >> 10,
            "mmapped": (int(mm.get("size")) if mm is not None else 0) >> 10}


def nfds(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


class Http:
    """One HTTP/1.1 exchange on a fresh connection (raw asyncio streams)."""

    def __init__(self, port):
        self.port = port

    async def open(self):
        return await asyncio.open_connection("127.0.0.1", self.port)

    @staticmethod
    def request(method, path, body=None, extra=""):
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        head += "Connection: close\r\n\r\n"
        return head.encode() + (body or b"")

    @staticmethod
    async def read_head(r):
        raw = await r.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        m = re.match(r"HTTP/1\.[01] (\d{3})", lines[0])
        if not m:
            raise ValueError("bad status line " + lines[0][:80])
        h = {}
        for ln in lines[1:]:
            if ":" in ln:
                k, v = ln.split(":", 1)
                h[k.strip().lower()] = v.strip()
        return int(m.group(1)), h

    @staticmethod
    async def read_body(r, h, on_chunk=None):
        """The whole body (chunked, Content-Length or to the close); on_chunk(bytes) sees each
        piece as it comes and may return False to stop reading."""
        if h.get("transfer-encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int((await r.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
                if size == 0:
                    await r.readuntil(b"\r\n")
                    return out
                piece = await r.readexactly(size)
                await r.readexactly(2)
                out += piece
                if on_chunk and on_chunk(piece) is False:
                    return None
        if "content-length" in h:
            return await r.readexactly(int(h["content-length"]))
        return await r.read()


def chat_body(rng, stream, max_tokens=None):
    msgs = [
        {"role": "system", "content": rng.choice(SYSTEMS)},
        {"role": "user", "content": " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 12)))},
    ]
    b = {"messages": msgs, "max_tokens": max_tokens or rng.randint(4, 40), "stream": stream}
    if rng.random() < 0.5:
        b["temperature"] = 0
    return json.dumps(b).encode()


class Soak:
    def __init__(self, a):
        self.a = a
        self.rng = random.Random(a.seed)
        self.counts = {k: {"ok": 0, "bad": 0} for k in KINDS}
        self.bad = []  # (kind, what) of unexpected answers, the first few
        self.health = []  # seconds of each /health answer
        self.health_bad = 0
        self.health_why = []  # the first few failures of /health
        self.stop_at = 0.0

    def note_bad(self, kind, what):
        self.counts[kind]["bad"] += 1
        if len(self.bad) < 20:
            self.bad.append(f"{kind}: {what}")

    async def one(self, kind, rng):
        http = Http(self.port)
        r, w = await http.open()
        try:
            if kind in ("chat", "stream", "drop", "slow", "dropwait"):
                stream = kind in ("stream", "drop", "slow")
                w.write(Http.request("POST", "/v1/chat/completions", chat_body(rng, stream,
                                                                               48 if kind == "dropwait" else None)))
                await w.drain()
                if kind == "dropwait":
                    await asyncio.sleep(rng.uniform(0.0, 0.05))
                    return True
                st, h = await Http.read_head(r)
                if st != 200:
                    return f"status {st}"
                if not stream:
                    body = json.loads(await Http.read_body(r, h))
                    if body["choices"][0]["finish_reason"] not in ("stop", "length"):
                        return "finish_reason " + str(body["choices"][0]["finish_reason"])
                    return True
                if kind == "drop":
                    left = [rng.randint(1, 4)]

                    def cut(piece):
                        left[0] -= piece.count(b"data: ")
                        return left[0] > 0

                    await Http.read_body(r, h, cut)
                    return True
                if kind == "slow":
                    body = b""
                    while True:
                        piece = await r.read(64)
                        if not piece:
                            break
                        body += piece
                        await asyncio.sleep(0.02)
                else:
                    body = await Http.read_body(r, h)
                if b"data: [DONE]" not in body:
                    return "stream without [DONE]: " + body[-120:].decode("utf-8", "replace")
                if b'"error"' in body:
                    return "error event: " + body[-200:].decode("utf-8", "replace")
                return True
            if kind == "complete":
                b = json.dumps({"prompt": rng.choice(SYSTEMS), "max_tokens": rng.randint(4, 24)}).encode()
                w.write(Http.request("POST", "/v1/completions", b))
                await w.drain()
                st, h = await Http.read_head(r)
                if st != 200:
                    return f"status {st}"
                json.loads(await Http.read_body(r, h))
                return True
            if kind == "big":
                n = (self.a.max_body_mb << 20) + 1024
                head = ("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                        f"Content-Length: {n}\r\nConnection: close\r\n\r\n").encode()
                w.write(head + b"{" + b" " * 4096)
                await w.drain()
                st, h = await Http.read_head(r)
                if st != 413:
                    return f"status {st}"
                await Http.read_body(r, h)
                return True
            if kind == "badjson":
                bad = rng.choice([b'{"messages": [', b'{"messages": 7}', b"\xff\xfe{", b'{"a":1,"a":2}', b"[]"])
                w.write(Http.request("POST", "/v1/chat/completions", bad))
                await w.drain()
                st, h = await Http.read_head(r)
                if st != 400:
                    return f"status {st}"
                json.loads(await Http.read_body(r, h))
                return True
            if kind == "slowloris":
                # part of the headers, a few bytes at a time, then nothing: the server must close
                # the connection after its --timeout (a 408 or a bare close)
                head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
                for k in range(0, len(head), 8):
                    w.write(head[k:k + 8])
                    await w.drain()
                    await asyncio.sleep(0.1)
                try:
                    got = await asyncio.wait_for(r.read(), self.a.timeout + 10)
                except ConnectionResetError:
                    return True  # closed with a reset: as good as a close
                except asyncio.TimeoutError:
                    return "a stalled connection was kept open"
                if got and not re.match(rb"HTTP/1\.[01] 408", got):
                    return "answered " + got[:40].decode("latin-1")
                return True
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, KeyError,
                IndexError, TypeError) as e:
            return f"{type(e).__name__}: {e}"
        finally:
            w.close()
            try:
                await w.wait_closed()
            except (ConnectionError, OSError):
                pass
        return "unknown kind"

    async def client(self, i):
        rng = random.Random(self.a.seed * 1000 + i)
        while time.monotonic() < self.stop_at:
            kind = rng.choices(KINDS, WEIGHTS)[0]
            try:
                res = await asyncio.wait_for(self.one(kind, rng), 120)
            except asyncio.TimeoutError:
                res = "no answer within 120 s"
            if res is True:
                self.counts[kind]["ok"] += 1
            else:
                self.note_bad(kind, res)

    async def get(self, path):
        r, w = await Http(self.port).open()
        try:
            w.write(Http.request("GET", path))
            await w.drain()
            st, h = await Http.read_head(r)
            return st, await Http.read_body(r, h)
        finally:
            w.close()

    async def health_probe(self):
        while time.monotonic() < self.stop_at:
            t0 = time.monotonic()
            try:
                st, _ = await asyncio.wait_for(self.get("/health"), 30)
                if st != 200:
                    self.health_bad += 1
                    self.health_why.append(f"status {st}")
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as e:
                self.health_bad += 1
                self.health_why.append(f"{type(e).__name__}: {e}")
            self.health.append(time.monotonic() - t0)
            await asyncio.sleep(0.2)

    async def stats(self):
        st, b = await self.get("/stats")
        return json.loads(b) if st == 200 else {}

    async def quiesce(self):
        """Waits (up to 30 s) until the engine has no row and no queued request and the server
        holds only the probe's connection; returns the last /stats."""
        s = {}
        for _ in range(300):
            s = await self.stats()
            eng = s.get("engine", s)
            if eng.get("active", 1) == 0 and eng.get("queued", 1) == 0 and s.get("connections", 1) <= 1:
                break
            await asyncio.sleep(0.1)
        return s

    def cpu_seconds(self):
        """User + system CPU seconds the server and its engine child have used so far."""
        tot = 0
        for p in self.pids():
            try:
                with open(f"/proc/{p}/stat") as f:
                    st = f.read()
                v = st[st.rindex(")") + 2:].split()
                tot += int(v[11]) + int(v[12])
            except (OSError, ValueError, IndexError):
                pass
        return round(tot / os.sysconf("SC_CLK_TCK"), 1)

    def pids(self):
        return [self.proc.pid] + proc_children(self.proc.pid)

    def memory(self):
        return sum(rss_kb(p) for p in self.pids()), {p: nfds(p) for p in self.pids()}

    def sample(self, t0):
        """One point of the series: seconds since the run's start, then per process (the server
        first, then its engine child) its RSS, threads and smaps_kb breakdown."""
        procs = []
        for p in self.pids():
            m = smaps_kb(p)
            m.update(pid=p, rss=rss_kb(p), threads=status_field(p, "Threads"))
            if self.a.malloc_info:
                m["malloc"] = malloc_info(p, os.path.join(self.a.tmp, f"malloc-{p}.xml"))
            procs.append(m)
        return {"t": round(time.monotonic() - t0, 1), "procs": procs}

    @staticmethod
    def sample_line(smp):
        def one(m):
            t = "pid %d rss %d kB (heap %d, arenas %d, stacks %d, anon %d, file %d; %d maps, %d threads)" % (
                m["pid"], m["rss"], m["heap"], m["arenas"], m["stacks"], m["anon"], m["file"], m["maps"], m["threads"])
            mi = m.get("malloc")
            if mi:
                t += " malloc: %d arenas, %d kB from the system, %d free, %d in use, %d mmapped" % (
                    mi["arenas"], mi["system"], mi["free"], mi["in_use"], mi["mmapped"])
            return t

        return f"# soak t={smp['t']:.0f}s " + "; ".join(one(m) for m in smp["procs"])

    async def series(self, t0):
        """Samples the memory every --series seconds while the run lasts (printed and kept)."""
        while time.monotonic() < self.stop_at:
            await asyncio.sleep(min(self.a.series, max(0.0, self.stop_at - time.monotonic())))
            if time.monotonic() >= self.stop_at:
                break
            # in a thread: gdb (--malloc-info) takes seconds, which must not stall the clients
            smp = await asyncio.get_running_loop().run_in_executor(None, self.sample, t0)
            self.points.append(smp)
            print(self.sample_line(smp), flush=True)

    async def fill_rows(self, rng, rows):
        """ROWS streams that may fill their rows (max_tokens near the context), sent at once: all
        of them admitted together, each reserving its row's worst case of KV blocks; read to their
        end (their long texts then fill the prompt cache)."""
        conns = []
        try:
            for _ in range(rows):
                r, w = await Http(self.port).open()
                conns.append((r, w))
                w.write(Http.request("POST", "/v1/chat/completions", chat_body(rng, True, self.a.ctx - 64)))
                await w.drain()

            async def to_end(r):
                st, h = await Http.read_head(r)
                await Http.read_body(r, h)

            await asyncio.wait_for(asyncio.gather(*(to_end(r) for r, _ in conns)), 60)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.TimeoutError, ValueError):
            pass
        finally:
            for _, w in conns:
                w.close()

    @staticmethod
    def kv_pool(s):
        """(bytes of KV blocks made, bytes of the pool's cap) from /stats; (0, 0) without a pool."""
        eng = s.get("engine", s)
        pool = eng.get("kv_pool", {})
        cap = pool.get("blocks_total", 0) * pool.get("block_bytes", 0)
        return (eng.get("kv_bytes", 0), cap) if cap else (0, 0)

    async def warm(self):
        rng = random.Random(self.a.seed + 7)
        # each kind a few times, then a concurrent burst like the run's, twice: the caches fill,
        # the allocator's arenas grow to their working size
        for _ in range(2):
            for kind in KINDS:
                if kind != "slowloris":
                    await self.one(kind, rng)
            self.stop_at = time.monotonic() + self.a.warm_seconds
            await asyncio.gather(*(self.client(i) for i in range(self.a.clients)))
        # the KV block pool makes each block's memory on first need and keeps it, up to its cap (the
        # rows' worst case plus the prompt cache's budget): its high-water mark would creep up through
        # the run as rarer peaks of rows and cache come. A batch of long requests running together,
        # twice (the second while the first's texts fill the cache), takes the pool to its cap now.
        s = await self.stats()
        for _ in range(2):
            await self.fill_rows(rng, s.get("engine", s).get("batch_rows", 8))
        for k in KINDS:
            self.counts[k] = {"ok": 0, "bad": 0}
        self.bad.clear()
        await self.quiesce()
        await asyncio.sleep(SETTLE_S)

    def start(self):
        a = self.a
        cmd = [a.kiln, "serve", "-m", a.model, "--port", "0", "--no-open", "--ssd-cache", a.ssd_dir,
               "--ssd-demote-idle", "0", "--timeout", str(a.timeout), "--max-body-mb", str(a.max_body_mb),
               "--prompt-cache", str(a.prompt_cache_gb), "--ssd-cache-max", str(a.ssd_max_gb), "--batch", "8", "--max-queue", "256", "-c", str(a.ctx)]
        if not a.isolation:
            cmd.append("--no-isolation")
        self.err = open(os.path.join(a.tmp, "server.err"), "w+")
        env = dict(os.environ)
        for kv in a.env:
            k, _, v = kv.partition("=")
            env[k] = v
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.err, env=env)
        for _ in range(400):
            self.err.seek(0)
            m = re.search(r"listening on http://[^ ]*:(\d+) ", self.err.read())
            if m:
                self.port = int(m.group(1))
                return True
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        return False

    async def run(self):
        a = self.a
        res = {}
        await self.warm()
        rss0, fds0 = self.memory()
        s0 = await self.stats()
        self.stop_at = time.monotonic() + a.seconds
        t0 = time.monotonic()
        self.points = [self.sample(t0)]
        if a.series:
            print(self.sample_line(self.points[0]), flush=True)
        extra = [self.series(t0)] if a.series else []
        await asyncio.gather(self.health_probe(), *extra, *(self.client(i) for i in range(a.clients)))
        res["seconds"] = round(time.monotonic() - t0, 1)
        alive = self.proc.poll() is None and all(os.path.exists(f"/proc/{p}") for p in fds0)
        s1 = await self.quiesce() if alive else {}
        await asyncio.sleep(SETTLE_S)
        rss1, fds1 = self.memory()
        self.points.append(self.sample(t0))
        if a.series:
            print(self.sample_line(self.points[-1]), flush=True)
        per0 = [m["rss"] for m in self.points[0]["procs"]]
        per1 = [m["rss"] for m in self.points[-1]["procs"]]
        kv0, kv1 = self.kv_pool(s0), self.kv_pool(s1)
        res.update(kv_pool_warm_bytes=kv0[0], kv_pool_after_bytes=kv1[0], kv_pool_cap_bytes=kv0[1])
        res.update(rss_warm_per_process_kb=per0, rss_after_per_process_kb=per1, series=self.points,
                   cpu_s=self.cpu_seconds())
        res.update(rss_warm_kb=rss0, rss_after_kb=rss1, fds_warm=fds0, fds_after=fds1,
                   counts=self.counts, unexpected=self.bad, stats_after=s1)
        h = sorted(self.health)
        res["health"] = {"n": len(h), "failed": self.health_bad, "why": self.health_why[:10],
                         "over_100ms": sum(1 for x in h if x >= 0.1), "max_ms": round(1000 * h[-1], 1) if h else None,
                         "p99_ms": round(1000 * h[int(0.99 * (len(h) - 1))], 1) if h else None}
        self.err.seek(0)
        log = self.err.read()
        restarts = s1.get("engine_restarts", 0) - s0.get("engine_restarts", 0)
        eng = s1.get("engine", s1)
        checks = [
            ("soak_no_crash", alive and restarts == 0 and "the engine stopped" not in log,
             f"alive {alive}, restarts {restarts}, log: {log[-400:]}"),
            ("soak_no_unexpected_answer", not self.bad, "; ".join(self.bad[:6])),
            ("soak_requests_complete_or_cancelled", alive and eng.get("active") == 0 and eng.get("queued") == 0,
             f"active {eng.get('active')}, queued {eng.get('queued')}"),
            (f"soak_rss_within_{round(a.rss_tol * 100)}pct", rss0 > 0 and rss1 <= (1 + a.rss_tol) * rss0,
             f"{rss0} kB after warm-up, {rss1} kB after the run"),
            ("soak_no_fd_leak", list(fds0.values()) == list(fds1.values()), f"{fds0} -> {fds1}"),
            ("soak_health_answered", self.health_bad == 0 and len(h) > 0,
             f"{self.health_bad} failed: {'; '.join(self.health_why[:3])}"),
        ]
        if a.assert_health:
            checks.append(("soak_health_under_100ms", h and h[-1] < 0.1, f"max {res['health']['max_ms']} ms"))
        res["checks"] = {n: bool(ok) for n, ok, _ in checks}
        total = sum(c["ok"] + c["bad"] for c in self.counts.values())
        mix = ", ".join("%s %d" % (k, v["ok"]) for k, v in self.counts.items())
        for n, ok, why in checks:
            print(f"PASS {n}" if ok else f"FAIL {n}: {why}")
        print(f"# soak: {a.clients} clients, {res['seconds']} s, {total} requests "
              f"({mix}); "
              f"/health max {res['health']['max_ms']} ms, p99 {res['health']['p99_ms']} ms over {len(h)}; "
              f"RSS {rss0} -> {rss1} kB (server, engine: {per0} -> {per1}); "
              f"KV blocks {kv0[0] >> 10} -> {kv1[0] >> 10} kB of {kv0[1] >> 10}; CPU {res['cpu_s']} s (user + sys of server and engine); fds {list(fds0.values())} -> {list(fds1.values())}")
        return res


def leak_report(s):
    """Stops the server (SIGTERM: it exits, and LeakSanitizer checks at the exit) and reads the
    report on its stderr; prints the check's line and returns whether it passed."""
    s.proc.send_signal(signal.SIGTERM)
    try:
        s.proc.wait(60)
    except subprocess.TimeoutExpired:
        pass
    s.err.seek(0)
    log = s.err.read()
    bad = [ln for ln in log.splitlines() if "LeakSanitizer" in ln and ("ERROR" in ln or "fatal" in ln)]
    bad += [ln for ln in log.splitlines() if ln.startswith("SUMMARY:") and "leak" in ln]
    print("PASS soak_no_leak" if not bad else "FAIL soak_no_leak: " + "; ".join(bad[:4]))
    return not bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("--model", required=True)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--warm-seconds", type=float, default=5)
    ap.add_argument("--no-isolation", dest="isolation", action="store_false")
    ap.add_argument("--ssd-dir")
    ap.add_argument("--timeout", type=int, default=2)
    ap.add_argument("--max-body-mb", type=int, default=1)
    ap.add_argument("--prompt-cache-gb", type=float, default=0.002)
    # small enough for the SSD tier to evict during the warm-up: its in-memory list of files (the
    # tokens of each) is then at its working size, as the RAM tier's entries are
    ap.add_argument("--ssd-max-gb", type=float, default=0.02)
    ap.add_argument("--ctx", type=int, default=256, help="the server's context (-c)")
    ap.add_argument("--json")
    ap.add_argument("--log", help="keep the server's stderr (both processes) in this file")
    ap.add_argument("--assert-health", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--series", type=float, default=0,
                    help="print the memory of each process every SERIES seconds of the run (0: only before/after)")
    ap.add_argument("--malloc-info", action="store_true",
                    help="with each memory sample, glibc's malloc_info of each process (needs gdb; stops it briefly)")
    ap.add_argument("--leak-check", action="store_true",
                    help="a kiln built with LeakSanitizer (or ASan): its report when the server exits must name no leak; "
                    "implies --no-isolation (the engine child ends with _exit, which runs no check)")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                    help="set in the server's environment (e.g. MALLOC_ARENA_MAX=2); repeatable")
    ap.add_argument("--rss-tol", type=float, default=RSS_TOL, help="RSS growth allowed (0.05: 5%%)")
    a = ap.parse_args()
    if a.leak_check:
        a.isolation = False
    a.tmp = tempfile.mkdtemp(prefix="kiln-soak-")
    if not a.ssd_dir:
        a.ssd_dir = os.path.join(a.tmp, "ssd")
    s = Soak(a)
    try:
        if not s.start():
            s.err.seek(0)
            print("FAIL soak_server_starts: " + s.err.read()[-400:])
            return 1
        res = asyncio.run(s.run())
        if a.leak_check:
            res["checks"]["soak_no_leak"] = leak_report(s)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(res, f, indent=1)
        return 0 if all(res["checks"].values()) else 1
    finally:
        if getattr(s, "proc", None) and s.proc.poll() is None:
            s.proc.send_signal(signal.SIGTERM)
            try:
                s.proc.wait(20)
            except subprocess.TimeoutExpired:
                s.proc.kill()
                s.proc.wait()
        if a.log and getattr(s, "err", None):
            s.err.flush()
            shutil.copy(os.path.join(a.tmp, "server.err"), a.log)
        shutil.rmtree(a.tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
