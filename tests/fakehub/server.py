#!/usr/bin/env python3
"""fakehub/server.py - a small stand-in for the Hugging Face Hub's HTTP API, for kiln pull's tests
(tests/cli/test_pull.sh). It serves the repositories under ROOT (ROOT/ORG/NAME/... files) on
127.0.0.1 at a random port, written to PORT_FILE once listening:

  GET /api/models/ORG/NAME/revision/REV?blobs=true   the model info: sha, siblings with size,
                                                      blobId and, for LFS files, lfs.sha256
  GET /ORG/NAME/resolve/REV/PATH                      the file; an LFS file (*.gguf, *.safetensors)
                                                      is redirected to /cdn/SHA256 as the Hub
                                                      redirects to its CDN; Range requests get 206

Each repository may hold a _hub.json of behaviours:
  {"token": "T"}         every request without "Authorization: Bearer T" gets 401
  {"gated": true}        403 (a licence not accepted)
  {"drop": ["PATH"]}     the first full GET of PATH sends half the body, then closes the connection
  {"bad_sha": ["PATH"]}  the info lists a wrong sha256 for PATH
  {"revs": {"v1": SHA}}  extra revision names (main and the commit itself always work)
  {"missing": ["PATH"]}  PATH is listed but its download gets 404
  {"huge": ["PATH"]}     the info lists PATH as 1 PiB (more than any test disk holds)
  {"e503": ["PATH"]}     the first download of PATH gets 503 (the client must retry)
  {"slow": ["PATH"]}     a full GET of PATH is sent in 64 KiB pieces 50 ms apart (time for a Ctrl-C)
Every request is appended to LOG as "METHOD PATH RANGE" (one line), so tests can count downloads.
"""
import hashlib
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

ROOT, PORT_FILE, LOG = sys.argv[1], sys.argv[2], sys.argv[3]
LFS_SUFFIXES = (".gguf", ".safetensors")
dropped = set()
lock = threading.Lock()


def repo_files(repo_dir):
    out = []
    for base, dirs, files in os.walk(repo_dir):
        dirs.sort()
        for f in sorted(files):
            p = os.path.join(base, f)
            rel = os.path.relpath(p, repo_dir)
            if rel != "_hub.json":
                out.append(rel)
    return out


def behaviours(repo_dir):
    try:
        with open(os.path.join(repo_dir, "_hub.json")) as f:
            return json.load(f)
    except OSError:
        return {}


def commit_of(repo):
    return hashlib.sha1(("commit:" + repo).encode()).hexdigest()


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def git_blob_id(path):
    data = open(path, "rb").read()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body=b"", headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def error(self, status, code, message):
        body = json.dumps({"error": message}).encode()
        self.reply(status, body, [("Content-Type", "application/json"), ("X-Error-Code", code),
                                  ("X-Error-Message", message)])

    def repo_checks(self, repo):
        """The repository's directory and behaviours, or None after replying with an error."""
        d = os.path.join(ROOT, repo)
        if "/" not in repo or ".." in repo or not os.path.isdir(d):
            self.error(404, "RepoNotFound", "Repository not found")
            return None
        b = behaviours(d)
        if "token" in b and self.headers.get("Authorization") != "Bearer " + b["token"]:
            self.error(401, "GatedRepo", "Access to model %s is restricted" % repo)
            return None
        if b.get("gated"):
            self.error(403, "GatedRepo", "You have not accepted the licence of %s" % repo)
            return None
        return d, b

    def rev_ok(self, repo, b, rev):
        return rev in ("main", commit_of(repo)) or rev in b.get("revs", {})

    def do_GET(self):
        url = urlsplit(self.path)
        path = unquote(url.path)
        with lock, open(LOG, "a") as f:
            f.write("GET %s %s\n" % (path, self.headers.get("Range", "-")))
        parts = path.strip("/").split("/")
        if len(parts) >= 6 and parts[:2] == ["api", "models"] and parts[4] == "revision":
            return self.info("/".join(parts[2:4]), "/".join(parts[5:]))
        if len(parts) >= 5 and parts[2] == "resolve":
            return self.resolve("/".join(parts[:2]), parts[3], "/".join(parts[4:]))
        if len(parts) == 2 and parts[0] == "cdn":
            q = dict(kv.split("=", 1) for kv in url.query.split("&") if "=" in kv)
            return self.send_file(os.path.join(ROOT, unquote(q.get("repo", "")), unquote(q.get("path", ""))),
                                  unquote(q.get("repo", "")) + "/" + unquote(q.get("path", "")))
        self.error(404, "NotFound", "no such route")

    def info(self, repo, rev):
        r = self.repo_checks(repo)
        if not r:
            return
        d, b = r
        if not self.rev_ok(repo, b, rev):
            return self.error(404, "RevisionNotFound", "Invalid rev id: " + rev)
        sib = []
        for rel in repo_files(d):
            p = os.path.join(d, rel)
            e = {"rfilename": rel, "size": os.path.getsize(p), "blobId": git_blob_id(p)}
            if rel in b.get("huge", []):
                e["size"] = 1 << 50
            if rel.endswith(LFS_SUFFIXES):
                sha = sha256_of(p)
                if rel in b.get("bad_sha", []):
                    sha = hashlib.sha256(b"something else").hexdigest()
                e["lfs"] = {"sha256": sha, "size": e["size"], "pointerSize": 134}
            sib.append(e)
        body = json.dumps({"id": repo, "modelId": repo, "sha": commit_of(repo), "siblings": sib}).encode()
        self.reply(200, body, [("Content-Type", "application/json")])

    def resolve(self, repo, rev, rel):
        r = self.repo_checks(repo)
        if not r:
            return
        d, b = r
        if not self.rev_ok(repo, b, rev):
            return self.error(404, "RevisionNotFound", "Invalid rev id: " + rev)
        p = os.path.join(d, rel)
        if ".." in rel.split("/") or rel == "_hub.json" or not os.path.isfile(p) or rel in b.get("missing", []):
            return self.error(404, "EntryNotFound", "Entry not found")
        with lock:
            busy = rel in b.get("e503", []) and ("503:" + repo + "/" + rel) not in dropped
            if busy:
                dropped.add("503:" + repo + "/" + rel)
        if busy:
            return self.error(503, "ServiceUnavailable", "try again")
        if rel.endswith(LFS_SUFFIXES):  # to the "CDN", as the Hub does
            loc = "/cdn/%s?repo=%s&path=%s" % (sha256_of(p), repo, rel)
            return self.reply(302, b"", [("Location", loc)])
        self.send_file(p, repo + "/" + rel)

    def send_file(self, p, key):
        if not os.path.isfile(p):
            return self.error(404, "EntryNotFound", "Entry not found")
        repo_dir = os.path.join(ROOT, *key.split("/")[:2])
        b = behaviours(repo_dir)
        rel = "/".join(key.split("/")[2:])
        data = open(p, "rb").read()
        rng = self.headers.get("Range")
        start = 0
        if rng and rng.startswith("bytes="):
            a, _, z = rng[6:].partition("-")
            start = int(a)
            end = int(z) if z else len(data) - 1
            if start >= len(data):
                return self.reply(416, b"", [("Content-Range", "bytes */%d" % len(data))])
            end = min(end, len(data) - 1)
            body = data[start:end + 1]
            self.send_response(206)
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end, len(data)))
        else:
            body = data
            self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        with lock:
            drop = not rng and rel in b.get("drop", []) and key not in dropped
            if drop:
                dropped.add(key)
        if drop:  # half the body, then the connection goes away
            self.wfile.write(body[:len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        if rel in b.get("slow", []) and not rng:
            import time
            for i in range(0, len(body), 65536):
                self.wfile.write(body[i:i + 65536])
                self.wfile.flush()
                time.sleep(0.05)
            return
        self.wfile.write(body)


srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
srv.daemon_threads = True
with open(PORT_FILE + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
os.rename(PORT_FILE + ".tmp", PORT_FILE)
srv.serve_forever()
