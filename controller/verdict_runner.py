# The agl verdict runner for unittest tasks (docs/concepts/verdict.md).
#
# The controller runs it as `python3 -I RUNNER [-v] ID...` in place of
# `python3 -m unittest` from a read-only directory, with one JSON line on
# stdin: {"key": hex, "report": path, "hidden": dir}. It imports all it
# relies on before the workspace is on sys.path, loads the hidden test
# modules from the read-only copy, runs the ids, re-checks that nothing it
# relies on was replaced, and writes a report authenticated with the key
# (HMAC-SHA256) that the code under test never sees on its way in. Its
# exit status is 0 exactly when every test passed.
import atexit
import builtins
import hashlib
import hmac
import importlib
import importlib.machinery
import importlib.util
import json
import json.decoder
import json.encoder
import os
import sys
import types
import unittest
import unittest.case
import unittest.loader
import unittest.result
import unittest.runner
import unittest.suite
import unittest.util


def main():
    # What the verdict is made with, captured before any workspace code
    # runs: later calls use these, whatever a module attribute holds then.
    exit_, os_open, os_write, os_close, dumps, hmac_new, sha256 = os._exit, os.open, os.write, os.close, json.dumps, hmac.new, hashlib.sha256
    refused = []

    # Audit hooks and tracers run their code inside every later call, the
    # report's included: none may be added after this hook.
    def audit(event, args):
        if event in ("sys.addaudithook", "sys.settrace", "sys.setprofile"):
            refused.append(event)
            raise RuntimeError("agl verdict runner: " + event + " is refused")

    sys.addaudithook(audit)
    isolated = sys.flags.isolated and sys.flags.no_user_site and sys.flags.ignore_environment
    try:
        secret = json.loads(sys.stdin.buffer.readline())
        key = bytes.fromhex(secret["key"])
        report_path, hidden = secret["report"], secret["hidden"]
        del secret
    except Exception as e:  # no report can be written without the key
        print("agl verdict runner: bad secret on stdin:", e, file=sys.stderr)
        exit_(3)
    # Nothing later reads what followed the secret.
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdin = open(os.devnull)
    ids = [a for a in sys.argv[1:] if not a.startswith("-")]
    cwd = os.getcwd()

    protected = Snapshot()
    for m in (builtins, os, sys, atexit, json, json.decoder, json.encoder, hmac, hashlib, types,
              importlib, importlib.util, importlib.machinery, unittest, unittest.case, unittest.loader,
              unittest.result, unittest.runner, unittest.suite, unittest.util):
        protected.module(m)
    for c in (unittest.TestCase, unittest.TestResult, unittest.TextTestResult, unittest.TestLoader,
              unittest.TextTestRunner, unittest.TestSuite, unittest.suite.BaseTestSuite, unittest.case._Outcome,
              json.JSONEncoder, hmac.HMAC, Result, HiddenFinder, HiddenLoader, Snapshot):
        protected.cls(c)
    protected.functions(globals())
    changed, changed_code = Snapshot.changed, Snapshot.changed.__code__

    finder = HiddenFinder(hidden, cwd)
    sys.meta_path.insert(0, finder)
    # The workspace goes on the import path only now, ahead of the rest as
    # with `python3 -m unittest`.
    sys.path[0:1] = [cwd]
    importlib.invalidate_caches()

    result = Result(unittest.runner._WritelnDecorator(sys.stderr), True, 2)
    suite = unittest.TestLoader().loadTestsFromNames(ids)
    unittest.TextTestRunner(stream=sys.stderr, verbosity=2, resultclass=lambda *a, **k: result).run(suite)

    tamper = ["%s was called" % e for e in refused]
    if not isolated:
        tamper.append("the runner was not started isolated (python3 -I)")
    if changed.__code__ is not changed_code:
        tamper.append("the runner's check was replaced")
    tamper += changed(protected) + changed(finder.snap) + finder.foreign()
    if sys.meta_path[0] is not finder:
        tamper.append("sys.meta_path: the hidden-test finder is not first")
    statuses = result.statuses
    success = not tamper and all(statuses.get(i) == "passed" for i in ids)
    body = dumps({"tests": statuses, "success": success, "tamper": tamper[:20], "loaded": sorted(finder.loaded)},
                 sort_keys=True).encode()
    mac = hmac_new(key, body, sha256).hexdigest().encode()
    try:
        fd = os_open(report_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        os_write(fd, body + b"\n" + mac + b"\n")
        os_close(fd)
    except OSError as e:
        print("agl verdict runner: write the report:", e, file=sys.stderr)
        exit_(3)
    for t in tamper:
        print("agl verdict runner: tampered:", t, file=sys.stderr)
    sys.stderr.flush()
    exit_(0 if success else 1)


class Snapshot:
    """The objects the verdict relies on, as they were before any workspace
    code ran: attributes by identity, functions with their code."""

    def __init__(self):
        self.attrs = []  # (owner, owner name, attribute, value)
        self.codes = []  # (function, name, __code__, __defaults__, __kwdefaults__)

    def module(self, m):
        for k, v in list(vars(m).items()):
            if callable(v) or isinstance(v, types.ModuleType):
                self.attrs.append((m, m.__name__, k, v))
                self.function(v, m.__name__ + "." + k)

    def cls(self, c):
        for k, v in list(vars(c).items()):
            self.attrs.append((c, c.__qualname__, k, v))
            self.function(v, c.__qualname__ + "." + k)

    def functions(self, g):
        for k, v in list(g.items()):
            if isinstance(v, (types.FunctionType, type)):
                self.attrs.append((g, "__main__", k, v))
                self.function(v, k)

    def function(self, f, name):
        f = getattr(f, "__func__", f)
        if isinstance(f, types.FunctionType):
            self.codes.append((f, name, f.__code__, f.__defaults__, f.__kwdefaults__))

    def changed(self):
        out = []
        missing = object()
        for owner, oname, k, v in self.attrs:
            if (owner if isinstance(owner, dict) else vars(owner)).get(k, missing) is not v:
                out.append(f"{oname}.{k} was replaced")
        for f, name, code, defaults, kwdefaults in self.codes:
            if f.__code__ is not code or f.__defaults__ is not defaults or f.__kwdefaults__ is not kwdefaults:
                out.append(f"{name}: its code was replaced")
        return out


class HiddenLoader(importlib.machinery.SourceFileLoader):
    """Loads a hidden test module from the read-only copy and snapshots its
    globals and classes as they were when it finished loading."""

    def exec_module(self, module):
        super().exec_module(module)
        self.finder.snap.functions(vars(module))
        for k, v in list(vars(module).items()):
            self.finder.snap.attrs.append((vars(module), module.__name__, k, v))
            if isinstance(v, type) and v.__module__ == module.__name__:
                self.finder.snap.cls(v)
        self.finder.loaded.add(module.__name__)


class HiddenFinder:
    """First on sys.meta_path: a module whose source is a hidden file comes
    from the read-only copy, whatever the workspace holds under its name
    (a package, a compiled module, bytecode)."""

    def __init__(self, hidden, cwd):
        self.hidden, self.cwd = hidden, cwd
        self.snap = Snapshot()
        self.loaded = set()

    def find_spec(self, name, path=None, target=None):
        rel = name.replace(".", "/")
        base = os.path.join(self.hidden, rel)
        for origin, search in ((base + ".py", None), (os.path.join(base, "__init__.py"), [base, os.path.join(self.cwd, rel)])):
            if os.path.isfile(origin):
                loader = HiddenLoader(name, origin)
                loader.finder = self
                return importlib.util.spec_from_file_location(name, origin, loader=loader, submodule_search_locations=search)
        return None

    def foreign(self):
        out = []
        for name in sorted(self.loaded):
            m = sys.modules.get(name)
            origin = getattr(getattr(m, "__spec__", None), "origin", "") or ""
            if not origin.startswith(self.hidden + "/"):
                out.append(f"{name}: not the hidden test module")
        return out


class Result(unittest.TextTestResult):
    """Records each test's status by id; a test reported twice keeps its
    worst status."""

    RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}

    def __init__(self, *a):
        super().__init__(*a)
        self.statuses = {}
        self.ran = 0

    def _set(self, test, status):
        tid = unittest.TestCase.id(test) if isinstance(test, unittest.TestCase) else str(test)
        old = self.statuses.get(tid)
        if old is None or self.RANK[status] > self.RANK[old]:
            self.statuses[tid] = status

    def startTest(self, test):
        self.ran += 1
        super().startTest(test)

    def addSuccess(self, test):
        super().addSuccess(test)
        self._set(test, "passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._set(test, "failed")

    def addError(self, test, err):
        super().addError(test, err)
        self._set(test, "error")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._set(test, "skipped")

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._set(test, "passed")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._set(test, "failed")

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            self._set(test, "failed" if issubclass(err[0], test.failureException) else "error")


main()
