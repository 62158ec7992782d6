"""Runs a test's Python reference script, reusing an earlier run's results
when everything the script reads is the same.

Usage: cached_run.py CACHE DIR SCRIPT [ARGS...]

SCRIPT reads the files in DIR (a test's temp folder) and writes its results
there; the C test compares them with flowgraph's. `make test` runs every
test in the Release build and again under ASan/UBSan: the sanitizer build
exports the same bytes, so the references (PyTorch imports, onnx.checker)
would be computed twice for the same input. The key is the SHA-256 of the
script and the modules of its folder it imports, the arguments (DIR's name replaced, since it
is a fresh temp folder), this Python's version, and the name and bytes of
every file in DIR but *.log (what the test's run writes around the
script). On a hit, the files the first run added or changed are copied
into DIR and the script does not run; on a miss the script runs in this
process (runpy) and, when it exits with 0, what it wrote is stored under
CACHE/<key>. DIR is made when missing. A failed run is never stored: it runs again, with its
messages. An empty CACHE, or FG_TEST_PY_CACHE=0 in the environment, runs
the script without the cache.
"""
import hashlib
import os
import re
import runpy
import shutil
import sys

DIR_MARK = "\0DIR\0"


def files_of(d):
    """{name: bytes} of the regular files directly in d, but *.log."""
    out = {}
    for name in sorted(os.listdir(d)):
        path = os.path.join(d, name)
        if name.endswith(".log") or not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            out[name] = f.read()
    return out


def sources_of(script):
    """The script and the modules of its folder it imports by name (the
    torch references' common.py), sorted: what its results depend on
    besides its input. Not the whole folder: a change to another case
    script must not make a new entry of a large result."""
    sdir = os.path.dirname(os.path.abspath(script))
    with open(script, "rb") as f:
        text = f.read()
    out = [os.path.abspath(script)]
    for name in sorted(os.listdir(sdir)):
        stem = name[:-3].encode()
        if name.endswith(".py") and os.path.join(sdir, name) != out[0] and re.search(
                rb"^\s*(import|from)\s+" + re.escape(stem) + rb"\b", text, re.M):
            out.append(os.path.join(sdir, name))
    return out


def key_of(d, script, args, inputs):
    h = hashlib.sha256()
    h.update(sys.version.encode())
    h.update(os.path.basename(script).encode() + b"\0")
    for path in sources_of(script):
        with open(path, "rb") as f:
            h.update(os.path.basename(path).encode() + b"\0" + f.read() + b"\0")
    for a in args:
        h.update(a.replace(d, DIR_MARK).encode() + b"\0")
    for name, data in inputs.items():
        h.update(name.encode() + b"\0%d\0" % len(data) + data)
    return h.hexdigest()


def store(entry, d, before):
    """Copies what the run added to or changed in d into entry, atomically
    (a rename), so a concurrent reader sees all of it or none."""
    tmp = "%s.tmp%d" % (entry, os.getpid())
    os.makedirs(tmp)
    for name, data in files_of(d).items():
        if before.get(name) != data:
            shutil.copyfile(os.path.join(d, name), os.path.join(tmp, name))
    try:
        os.rename(tmp, entry)
    except OSError:  # another run stored the same key first
        shutil.rmtree(tmp, ignore_errors=True)


def run(script, args):
    sys.argv = [script] + args
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if e.code is None:
            return 0
        if isinstance(e.code, int):
            return e.code
        print(e.code, file=sys.stderr)
        return 1
    return 0


def main():
    cache, d, script, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    if not cache or os.environ.get("FG_TEST_PY_CACHE") == "0":
        return run(script, args)
    os.makedirs(d, exist_ok=True)
    before = files_of(d)
    entry = os.path.join(cache, key_of(d, script, args, before))
    if os.path.isdir(entry):
        for name in os.listdir(entry):
            shutil.copyfile(os.path.join(entry, name), os.path.join(d, name))
        print("%s: results of an earlier run on the same input (%s)"
              % (os.path.basename(script), entry))
        return 0
    rc = run(script, args)
    if rc == 0:
        os.makedirs(cache, exist_ok=True)
        store(entry, d, before)
    return rc


if __name__ == "__main__":
    sys.exit(main())
