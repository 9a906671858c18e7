"""Re-checks a run's held-out resolve rate outside the agent's reach.

For every validation rollout in DATA_DIR's store (SQLite, read-only), the
final workspace the controller kept (controller.sandbox.keep_workspaces:
DIR/ROLLOUT-ATTEMPT, the rollout's last attempt) is re-tested: only the
files of the task's repository snapshot are taken from it (whatever the
agent added is left out), the snapshot's pristine hidden tests are put
back, and the task's FAIL_TO_PASS and PASS_TO_PASS tests run with
/usr/bin/python3 in a fresh bubblewrap sandbox (no network, read-only
/usr, nothing else of the host). Resolved means every one of them printed
"ok". Prints, per validation (the trainer step it ran at), the resolve rate
the store recorded and the rechecked one, and each rollout the two disagree on.

usage: python3 recheck.py DATA_DIR KEPT_DIR [--base DIR]   (--base: what the tasks' repo paths are relative to)
"""
import argparse, collections, json, os, re, shutil, sqlite3, subprocess, tempfile

RESULT = re.compile(r"^(test_\w+) \(([\w.]+)\) \.\.\. (\S+)", re.M)


def retest(task, kept, base):
    """True when the task's tests all pass on the files of kept that its snapshot has."""
    snap = os.path.join(base, task["repo"])
    work = tempfile.mkdtemp(prefix="swe-recheck-")
    try:
        for root, _, files in os.walk(snap):
            for f in files:
                rel = os.path.relpath(os.path.join(root, f), snap)
                src = os.path.join(snap if rel in task["hidden_files"] else kept, rel)
                if os.path.isfile(src) and not os.path.islink(src):
                    os.makedirs(os.path.dirname(os.path.join(work, rel)), exist_ok=True)
                    shutil.copyfile(src, os.path.join(work, rel))
        tests = task["fail_to_pass"] + task["pass_to_pass"]
        cmd = ["bwrap", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
               "--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
               "--bind", work, "/workspace", "--chdir", "/workspace", "--unshare-all", "--die-with-parent",
               "--new-session", "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp",
               "--setenv", "PYTHONDONTWRITEBYTECODE", "1", "/usr/bin/python3", "-m", "unittest", "-v"] + tests
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            return False
        status = {m.group(2): m.group(3) for m in RESULT.finditer(p.stderr)}
        return all(status.get(t) == "ok" for t in tests)
    finally:
        shutil.rmtree(work)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data_dir")
    ap.add_argument("kept")
    ap.add_argument("--base", default=os.path.dirname(os.path.abspath(__file__)))
    a = ap.parse_args()
    db = sqlite3.connect("file:%s?mode=ro" % os.path.join(a.data_dir, "agl.db"), uri=True)
    rows = db.execute("SELECT id, task, step, reward FROM rollouts WHERE mode = 'val' ORDER BY seq").fetchall()
    if not rows:
        raise SystemExit("recheck: no validation rollouts in %s" % a.data_dir)
    by_step = collections.defaultdict(lambda: [0, 0, 0])
    for rid, task, step, reward in rows:
        task = json.loads(task)
        last = db.execute("SELECT id FROM attempts WHERE rollout_id = ? ORDER BY number DESC LIMIT 1", (rid,)).fetchone()
        ws = os.path.join(a.kept, "%s-%s" % (rid, last[0])) if last else ""
        ok = os.path.isdir(ws) and retest(task, ws, a.base)
        s = by_step[step]
        s[0] += 1
        s[1] += (reward or 0) >= 1
        s[2] += ok
        if ok != ((reward or 0) >= 1):
            print("recheck: %s (%s, step %s): stored reward %s, rechecked %s" % (rid, task["id"], step, reward, "pass" if ok else "fail"))
    for step in sorted(by_step, key=lambda s: -1 if s is None else s):
        n, stored, ok = by_step[step]
        print("validation at step %s: %d tasks, resolved %d (%.1f%%) by the stored rewards, %d (%.1f%%) rechecked"
              % (step, n, stored, 100.0 * stored / n, ok, 100.0 * ok / n))


if __name__ == "__main__":
    main()
