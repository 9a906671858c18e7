"""Repository tasks over the small library in lib/: one misspelt name per task.

Each task's module has one identifier misspelt in one line of a function
body (a character dropped, doubled, or two neighbours swapped): a variable,
parameter, function or method name. The module's hidden tests catch it
(FAIL_TO_PASS = the tests it breaks, PASS_TO_PASS = the module's other
tests). The problem statement is the first failing test's name and the
innermost frame of the traceback its call prints, as a user would paste it:

    test_swap_pairs fails:
      File "/workspace/cipher.py", line 31, in swap_pairs
        return outt
    NameError: name 'outt' is not defined. Did you mean: 'out'?

Only typos whose traceback names the mutated line and suggests the original
name are kept (Python >= 3.10 suggests names; the traceback is printed by
the interpreter's own hook, as a failing `python3 -c` prints it), so every
task is solvable from its statement by reading it exactly -- the file, the
line number, the misspelt name and the meant one -- and by nothing else: a
bug located by its traceback. Train and validation tasks come from disjoint
modules. Seeded and deterministic: the same seed gives byte-identical files.

Writes, under OUT (default work/):
  repos/ID/        the task's repository snapshot (the whole library, one line mutated)
  train.jsonl      repository tasks (agl's task format: id, repo, problem_statement,
  val.jsonl        test_command, test_format, fail_to_pass, pass_to_pass, hidden_files, max_turns)
  sft.jsonl        demonstrations for `agl sft`: the fix with sed, then submit, for the train
                   modules' typos on lines no train task mutates and, with --variants K, for
                   typos of K renamed copies of each train module (made-up module, function
                   and variable names, so that names are copied from the statement, not recalled)
  mutations.jsonl  each task's mutation, the call that shows it, and its solution (the
                   demonstration of its fix, in no sft.jsonl, never given to the harness)
  heldout.jsonl    the val tasks' solutions as conversations, for `agl sft --eval`:
                   how many of their replies the warm start writes exactly

No demonstration shows a val module's code.

usage: python3 gen.py [OUT] [--seed N] [--val-modules K] [--per-module M] [--train-per-module M]
                      [--module-demos M] [--max-turns T] [--modules a,b] [--variants K] [--variant-demos M]
"""
import argparse, ast, concurrent.futures, io, json, keyword, os, random, re, shutil, signal, subprocess, sys, tempfile, tokenize

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402  (the observation format the demonstrations must match)

LIB = os.path.join(HERE, "lib")
RESULT = re.compile(r"^(test_\w+) \(([\w.]+)\) \.\.\. (ok|FAIL|ERROR|skipped.*)$", re.M)
TYPO_ERROR = re.compile(r"^(?:NameError: name '(\w+)' is not defined|AttributeError: .* has no attribute '(\w+)')"
                        r"\. Did you mean: '(\w+)'\?$")
FRAME = re.compile(r'^  File "/workspace/(\w+)\.py", line (\d+), in \w+$', re.M)


def modules():
    return sorted(f[:-3] for f in os.listdir(LIB) if f.endswith(".py") and not f.startswith("test_"))


def typos(word, rng, k):
    """k one-character misspellings of word (a seeded sample): a character
    dropped, doubled, or two different neighbours swapped; never the first."""
    edits = [word[:i] + word[i + 1:] for i in range(1, len(word))]
    edits += [word[:i] + word[i] + word[i:] for i in range(1, len(word))]
    edits += [word[:i] + word[i + 1] + word[i] + word[i + 2:] for i in range(1, len(word) - 1) if word[i] != word[i + 1]]
    edits = sorted(set(e for e in edits if e != word and e.isidentifier() and not keyword.iskeyword(e)))
    return rng.sample(edits, min(k, len(edits)))


def mutants(src, rng, per_name=1):
    """(line index, kind, mutated line, name, typo) for every name of three or
    more characters read in a function body: per_name misspellings each."""
    lines = src.split("\n")
    out, prev = [], None
    toks = list(tokenize.generate_tokens(io.StringIO(src).readline))
    names = {t.string for t in toks if t.type == tokenize.NAME} | RESERVED
    for t in toks:
        row = t.start[0] - 1
        body = lines[row].startswith((" ", "\t")) and not lines[row].lstrip().startswith(("def ", "#", '"""'))
        if t.type == tokenize.NAME and body and len(t.string) >= 3 and not keyword.iskeyword(t.string):
            for w in (w for w in typos(t.string, rng, per_name) if w not in names):
                line = lines[row]
                out.append((row, "attribute" if prev == "." else "name", line[:t.start[1]] + w + line[t.end[1]:], t.string, w))
        if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
            prev = t.string
    return out


def run_tests(workdir, module, timeout=10):
    """{test id: ok|FAIL|ERROR} of `python3 -m unittest -v test_MODULE` in workdir."""
    try:
        p = subprocess.run([sys.executable, "-S", "-m", "unittest", "-v", "test_" + module], cwd=workdir,
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    return {m.group(2): m.group(3) for m in RESULT.finditer(p.stderr)}


def calls(lib, module):
    """(test name, the first argument of a self.assertEqual) of every
    assertion in lib/test_MODULE.py, in order: the calls a reproduction runs."""
    src = open(os.path.join(lib, "test_%s.py" % module)).read()
    out = []
    for node in ast.parse(src).body:
        for fn in ast.walk(node):
            if isinstance(fn, ast.FunctionDef) and fn.name.startswith("test_"):
                out += [(fn.name, ast.get_source_segment(src, c.value.args[0])) for c in fn.body
                        if isinstance(c, ast.Expr) and isinstance(c.value, ast.Call)
                        and getattr(c.value.func, "attr", "") == "assertEqual"]
    return [(n, e) for n, e in out if "'" not in e]


# Names for the renamed copies: words.txt, the 3287 lowercase identifiers
# of 3 to 10 letters used at least 3 times in CPython 3.11's standard library
# (Lib/, tests, idlelib and lib2to3 left out), none a keyword, builtin,
# standard module or name lib/ uses. Each is given to few copies, so a copy
# reads like real code, as the held-out modules do, and a name must be
# copied from the statement: it cannot be recalled.
WORDS = open(os.path.join(HERE, "words.txt")).read().split()
RESERVED = set(__import__("keyword").kwlist) | set(dir(__import__("builtins"))) | set(sys.stdlib_module_names)


def made_up(rng, taken):
    """A name of WORDS not in taken (then taken)."""
    while True:
        w = rng.choice(WORDS)
        if w not in taken and w not in RESERVED:
            taken.add(w)
            return w


def renamed_names(src):
    """The names a module defines (functions, parameters, variables), minus any
    also used as a keyword argument (renaming those would change calls)."""
    names, kw = set(), set()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.keyword) and node.arg:
            kw.add(node.arg)
    return sorted(n for n in names - kw if not n.startswith("__") and n != "self")


def rename(src, mapping):
    """src with every NAME token in mapping replaced, attributes (x.name) excepted."""
    lines = src.split("\n")
    edits, prev = [], None
    for t in tokenize.generate_tokens(io.StringIO(src).readline):
        if t.type == tokenize.NAME and t.string in mapping and prev != ".":
            edits.append((t.start[0] - 1, t.start[1], t.end[1], mapping[t.string]))
        if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
            prev = t.string
    for row, c0, c1, new in reversed(edits):
        lines[row] = lines[row][:c0] + new + lines[row][c1:]
    return "\n".join(lines)


def variant(mod, rng, taken_modules, dest):
    """Writes under dest a copy of lib/MOD.py and its tests with the module,
    its functions, parameters and variables renamed to other identifiers
    (the same code under other names: demonstrations on it teach copying names
    from what the agent reads, not recalling them). Returns the new module's name."""
    src = open(os.path.join(LIB, mod + ".py")).read()
    test = open(os.path.join(LIB, "test_%s.py" % mod)).read()
    taken = {t.string for t in tokenize.generate_tokens(io.StringIO(src + "\n" + test).readline) if t.type == tokenize.NAME}
    mapping = {}
    for name in renamed_names(src):
        parts = [made_up(rng, taken) for p in name.split("_")]
        new = "_".join(parts)
        mapping[name] = new.upper() if name.isupper() else new
    new_mod = made_up(rng, taken_modules | taken)
    taken_modules.add(new_mod)
    tmap = dict(mapping)
    tmap[mod] = new_mod
    for node in ast.walk(ast.parse(test)):
        if isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            tmap[node.name] = "Test" + new_mod.capitalize()
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_") and node.name[5:] in mapping:
            tmap[node.name] = "test_" + mapping[node.name[5:]]
    os.makedirs(dest)
    with open(os.path.join(dest, new_mod + ".py"), "w") as f:
        f.write(rename(src, mapping))
    with open(os.path.join(dest, "test_%s.py" % new_mod), "w") as f:
        f.write(rename(test, tmap))
    return new_mod


def probe_main():
    """`python3 -S gen.py --probe` (stdin: {"lib", "mod", "work", "cands": [[line index, mutated line, typo]], "calls"}):
    for each candidate, [the index of the first call (the mutated function's
    own first) that raises the typo's NameError or AttributeError from the
    mutated line, or -1; the traceback Python prints for it]. One process for
    all of a module's candidates: each mutant is written to WORK/MOD.py and run
    in a fresh namespace, and its exception printed by the interpreter's own
    hook (`sys.__excepthook__`, which adds "Did you mean" as a failing
    `python3 -c` would; the traceback module of Python 3.11 does not)."""
    job = json.load(sys.stdin)
    signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(TimeoutError("the call loops")))
    lines = open(os.path.join(job["lib"], job["mod"] + ".py")).read().split("\n")
    path = os.path.join(job["work"], job["mod"] + ".py")
    sys.path.insert(0, job["work"])
    sys.path.insert(1, job["lib"])
    hits = []
    for idx, new, wrong in job["cands"]:
        func = next(re.match(r"def (\w+)", l).group(1) for l in reversed(lines[:idx]) if l.startswith("def "))
        order = sorted(range(len(job["calls"])), key=lambda i: func + "(" not in job["calls"][i])
        src = "\n".join(lines[:idx] + [new] + lines[idx + 1:])
        with open(path, "w") as f:
            f.write(src)
        ns = {"__name__": job["mod"]}
        hit = [-1, ""]
        try:
            exec(compile(src, path, "exec"), ns)
        except Exception:
            order = []
        for i in order:
            signal.setitimer(signal.ITIMER_REAL, 0.5)  # a mutant that loops is no task
            try:
                eval(job["calls"][i], ns)
            except (NameError, AttributeError) as e:
                tb = e.__traceback__
                while tb.tb_next:
                    tb = tb.tb_next
                if e.name == wrong and tb.tb_frame.f_code.co_filename == path and tb.tb_lineno == idx + 1:
                    buf, err = io.StringIO(), sys.stderr
                    sys.stderr = buf
                    try:
                        sys.__excepthook__(type(e), e, e.__traceback__)
                    finally:
                        sys.stderr = err
                    hit = [i, buf.getvalue().replace(os.path.realpath(job["work"]), "/workspace").replace(job["work"], "/workspace")]
                    break
            except Exception:
                pass
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        hits.append(hit)
    json.dump(hits, sys.stdout)


def check(lib, mod, cands, want):
    """The first `want` of cands (mutants of lib/MOD.py, tried in order) whose
    traceback names the mutated line and suggests the original name, and
    whose sed fix touches only the typo: [(mutant, test name, traceback, the call)]."""
    lines = open(os.path.join(lib, mod + ".py")).read().split("\n")
    cands = [m for m in cands if m[2].replace(m[4], m[3], 1) == lines[m[0]]]  # sed fixes the typo, not another occurrence
    tests = calls(lib, mod)
    work = tempfile.mkdtemp(prefix="swe-gen-")
    try:
        p = subprocess.run([sys.executable, "-S", os.path.abspath(__file__), "--probe"], capture_output=True, text=True,
                           timeout=300, input=json.dumps({"lib": lib, "mod": mod, "work": work, "calls": [e for _, e in tests],
                                                          "cands": [[m[0], m[2], m[4]] for m in cands]}))
    finally:
        shutil.rmtree(work)
    if p.returncode != 0:
        raise SystemExit("gen: probing %s: %s" % (mod, p.stderr[-2000:]))
    found = []
    for m, (hit, out) in zip(cands, json.loads(p.stdout)):
        if len(found) >= want:
            break
        e, frames = TYPO_ERROR.match(out.rstrip("\n").split("\n")[-1]), FRAME.findall(out)
        if hit < 0 or not e or (e.group(1) or e.group(2)) != m[4] or e.group(3) != m[3]:
            continue  # Python suggests another name, or none
        if frames and frames[-1] == (mod, str(m[0] + 1)):
            found.append((m, tests[hit][0], out, tests[hit][1]))
    return found


def fix_command(mod, m):
    idx, _, _, name, wrong = m
    return "sed -i '%ds/%s/%s/' %s.py" % (idx + 1, wrong, name, mod)


def conversation(mod, m, test_name, out):
    """The statement (the failing test and the innermost frames of its call's
    traceback), and the demonstration of the fix: sed, then submit."""
    tb = out.rstrip("\n").split("\n")
    first = max(i for i, l in enumerate(tb) if l.startswith('  File "/workspace/'))
    statement = "%s fails:\n%s" % (test_name, "\n".join(l for l in tb[first:] if not l.startswith("    ")))
    msgs = [{"role": "system", "content": harness.SYSTEM}, {"role": "user", "content": statement},
            {"role": "assistant", "content": harness.reply_text(fix_command(mod, m))},
            {"role": "user", "content": harness.observation(0, "")},
            {"role": "assistant", "content": harness.reply_text("submit")}]
    return statement, {"messages": msgs}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?", default=os.path.join(HERE, "work"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--val-modules", type=int, default=3)
    ap.add_argument("--per-module", type=int, default=12, help="tasks per val module (at most)")
    ap.add_argument("--train-per-module", type=int, default=8,
                    help="tasks per train module (at most; the module's other typos are demonstrated)")
    ap.add_argument("--module-demos", type=int, default=0, help="demonstrations per train module (default 0: all)")
    ap.add_argument("--max-turns", type=int, default=5)
    ap.add_argument("--base", default=HERE, help="repo paths in the tasks are relative to this (controller.dir)")
    ap.add_argument("--modules", default="", help="comma-separated subset of lib/'s modules (default: all)")
    ap.add_argument("--variants", type=int, default=0,
                    help="renamed copies of each train module whose typos give more demonstrations (no tasks)")
    ap.add_argument("--variant-demos", type=int, default=3, help="demonstrations per variant")
    a = ap.parse_args()
    out = os.path.abspath(a.out)
    mods = modules()
    if a.modules:
        unknown = sorted(set(a.modules.split(",")) - set(mods))
        if unknown:
            raise SystemExit("gen: unknown modules %s (lib/ has %s)" % (", ".join(unknown), ", ".join(mods)))
        mods = sorted(set(a.modules.split(",")))
    order = list(mods)
    random.Random(a.seed).shuffle(order)
    val_mods = set(order[:a.val_modules])
    train_mods = [m for m in mods if m not in val_mods]
    for mod in mods:
        if any(r != "ok" for r in (run_tests(LIB, mod) or {"": "hung"}).values()):
            raise SystemExit("gen: lib/'s own tests fail for %s" % mod)

    # Every typo of every module, in a seeded order; the first valid ones are
    # the module's tasks, the train modules' others its demonstrations.
    pool = concurrent.futures.ThreadPoolExecutor(4)
    cands = {}
    for mod in mods:
        rng = random.Random("%d-%s" % (a.seed, mod))
        ms = mutants(open(os.path.join(LIB, mod + ".py")).read(), rng, 3)
        rng.shuffle(ms)
        cands[mod] = ms
    valid = dict(zip(mods, pool.map(lambda mod: check(LIB, mod, cands[mod], len(cands[mod])), mods)))

    def task_of(mod, v):
        m, test_name, rout, call = v
        idx, kind, new = m[0], m[1], m[2]
        tid = "%s-%d" % (mod, idx + 1) + "-" + m[4]
        work = os.path.join(out, "repos", tid)
        shutil.copytree(LIB, work, ignore=shutil.ignore_patterns("__pycache__"))
        lines = open(os.path.join(LIB, mod + ".py")).read().split("\n")
        with open(os.path.join(work, mod + ".py"), "w") as f:
            f.write("\n".join(lines[:idx] + [new] + lines[idx + 1:]))
        res = run_tests(work, mod)
        failed = sorted(t for t, r in (res or {}).items() if r in ("FAIL", "ERROR"))
        if not res or not any(t.endswith("." + test_name) for t in failed):
            shutil.rmtree(work)
            return None
        statement, demo = conversation(mod, m, test_name, rout)
        task = {"id": tid, "repo": os.path.relpath(work, a.base), "problem_statement": statement,
                "test_command": "python3 -m unittest -v {tests}", "test_format": "unittest",
                "fail_to_pass": failed, "pass_to_pass": sorted(t for t in res if t not in failed),
                "hidden_files": ["test_%s.py" % mod], "max_turns": a.max_turns}
        info = {"id": tid, "file": mod + ".py", "line": idx + 1, "kind": kind, "original": lines[idx], "mutated": new,
                "call": call, "solution": demo}
        return task, info

    if os.path.isdir(os.path.join(out, "repos")):
        shutil.rmtree(os.path.join(out, "repos"))
    os.makedirs(os.path.join(out, "repos"))
    # One train task a line (a line no demonstration on lib/'s module shows),
    # one val task a misspelt name.
    tasks, task_lines = {}, set()
    for mod in mods:
        k = a.per_module if mod in val_mods else a.train_per_module
        tasks[mod], used = [], set()
        for v in valid[mod]:
            if len(tasks[mod]) >= k:
                break
            place = v[0][0] if mod in train_mods else v[0][:2] + (v[0][3],)
            if place in used:
                continue
            t = task_of(mod, v)
            if t:
                tasks[mod].append(t)
                used.add(place)
                task_lines.add((v[0][0], mod))

    # Demonstrations: the train modules' typos on lines no task mutates, and
    # --variant-demos typos of each renamed copy (other names, other typos).
    demos = []
    for mod in train_mods:
        rest = [v for v in valid[mod] if (v[0][0], mod) not in task_lines]
        if a.module_demos > 0:
            rest = rest[:a.module_demos]
        demos += [conversation(mod, *v[:3])[1] for v in rest]
    scratch = tempfile.mkdtemp(prefix="swe-variants-")
    taken_modules = set(modules())
    jobs, variant_demos = [], 0
    for vi in range(a.variants):
        for mod in train_mods:
            rng = random.Random("%d-variant-%d-%s" % (a.seed, vi, mod))
            d = os.path.join(scratch, "variant-%d-%s" % (vi, mod))
            vmod = variant(mod, rng, taken_modules, d)
            ms = mutants(open(os.path.join(d, vmod + ".py")).read(), rng)
            rng.shuffle(ms)
            jobs.append((d, vmod, ms))
    def variant_typos(job):
        """The job's demonstrable typos; none when the copy's own tests fail."""
        d, vmod, ms = job
        if any(r != "ok" for r in (run_tests(d, vmod) or {"": "hung"}).values()):
            return []
        return check(d, vmod, ms, a.variant_demos)

    for n, ((_, vmod, _), found) in enumerate(zip(jobs, pool.map(variant_typos, jobs))):
        if (n + 1) % 50 == 0 or n + 1 == len(jobs):
            print("gen: %d/%d renamed variants checked" % (n + 1, len(jobs)), file=sys.stderr, flush=True)
        demos += [conversation(vmod, *v[:3])[1] for v in found]
        variant_demos += len(found)
    shutil.rmtree(scratch)

    files = {name: open(os.path.join(out, name), "w") for name in ("train.jsonl", "val.jsonl", "sft.jsonl", "mutations.jsonl", "heldout.jsonl")}
    for mod in mods:
        split = "val" if mod in val_mods else "train"
        for task, info in tasks[mod]:
            files[split + ".jsonl"].write(json.dumps(task) + "\n")
            files["mutations.jsonl"].write(json.dumps(info) + "\n")
            if split == "val":
                files["heldout.jsonl"].write(json.dumps(info["solution"]) + "\n")
    for d in demos:
        files["sft.jsonl"].write(json.dumps(d) + "\n")
    for f in files.values():
        f.close()
    print("gen: %d train tasks (%d modules), %d val tasks (%d modules: %s), %d demonstrations (%d on %d renamed variants)"
          % (sum(len(tasks[m]) for m in train_mods), len(train_mods), sum(len(tasks[m]) for m in val_mods), len(val_mods),
             ", ".join(sorted(val_mods)), len(demos), variant_demos, a.variants * len(train_mods)))


if __name__ == "__main__":
    probe_main() if sys.argv[1:] == ["--probe"] else main()
