"""SWE-smith-style repository tasks over the small library in lib/.

One mutation per task, of one line of one module: an operator swapped
(+ for -, < for <=, and for or, ...), an off-by-one (range(n) -> range(n + 1),
len(x) -> len(x) - 1), a wrong integer constant (k -> k + 1), two arguments
of a call swapped, or a dropped condition (the right operand of an and/or
removed, a `not` removed). The module's tests run on every mutant:
FAIL_TO_PASS = the tests it breaks, PASS_TO_PASS = the module's other tests;
a mutant no test catches (or that breaks the test file's import) is dropped.
Train and validation tasks come from disjoint modules. Seeded and
deterministic: the same seed gives byte-identical files.

Writes, under OUT (default work/):
  repos/ID/        the task's repository snapshot (the whole library, one line mutated)
  train.jsonl      repository tasks (agl's task format: id, repo, problem_statement,
  val.jsonl        test_command, test_format, fail_to_pass, pass_to_pass, hidden_files, max_turns)
  sft.jsonl        demonstrations for `agl sft`, one per caught mutant of the train
                   modules that is no task (and, with --variants K, of K renamed copies
                   of each train module: made-up module, function and variable names):
                   reproduce, look at the function, fix the line with sed, reproduce
                   again, submit -- the observations are the real outputs of those
                   commands, shown the way harness.py shows them
  mutations.jsonl  what each task's mutation was, and its solution: the demonstration
                   of its fix, in no sft.jsonl (never given to the harness)
  heldout.jsonl    the val tasks' solutions as conversations, for `agl sft --eval`:
                   how many of their replies the warm start writes exactly

No demonstration shows a task's mutation (nor a val module's code), so the
train tasks ask for fixes the warm start was not shown, like the val tasks.

usage: python3 gen.py [OUT] [--seed N] [--val-modules K] [--per-module M] [--train-per-module M] [--max-turns T] [--modules a,b] [--candidates C] [--variants K] [--variant-demos M]
"""
import argparse, ast, concurrent.futures, functools, io, json, os, random, re, shutil, subprocess, sys, tempfile, tokenize

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402  (the observation format the demonstrations must match)

LIB = os.path.join(HERE, "lib")
OPS = {"+": "-", "-": "+", "*": "//", "//": "*", "%": "//", "<": "<=", "<=": "<", ">": ">=", ">=": ">",
       "==": "!=", "!=": "=="}
BOOL = {"and": "or", "or": "and"}
RESULT = re.compile(r"^(test_\w+) \(([\w.]+)\) \.\.\. (ok|FAIL|ERROR|skipped.*)$", re.M)


def modules():
    return sorted(f[:-3] for f in os.listdir(LIB) if f.endswith(".py") and not f.startswith("test_"))


def tokens(line):
    try:
        return [t for t in tokenize.generate_tokens(io.StringIO(line.strip() + "\n").readline)
                if t.type in (tokenize.OP, tokenize.NAME, tokenize.NUMBER, tokenize.STRING)]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return []


def closing(toks, i):
    """Index of the token closing the bracket at toks[i]."""
    depth = 0
    for j in range(i, len(toks)):
        if toks[j].string in "([{":
            depth += 1
        elif toks[j].string in ")]}":
            depth -= 1
            if depth == 0:
                return j
    return None


def mutants(line):
    """Every (kind, mutated line) of one source line."""
    indent = line[:len(line) - len(line.lstrip())]
    body = line.strip()
    if not body or body.startswith(("def ", '"""', "#", "import ", "from ")):
        return []
    toks = tokens(line)
    out = []

    def at(c0, c1, text):  # replace body[c0:c1]
        out_line = indent + body[:c0] + text + body[c1:]
        return out_line

    for i, t in enumerate(toks):
        c0, c1 = t.start[1], t.end[1]
        prev = toks[i - 1].string if i > 0 else None
        if t.type == tokenize.OP and t.string in OPS:
            unary = t.string in "+-*" and (prev is None or (toks[i - 1].type == tokenize.OP and prev not in ")]}"))
            if not unary:
                out.append(("operator", at(c0, c1, OPS[t.string])))
        if t.type == tokenize.NAME and t.string in BOOL:
            out.append(("operator", at(c0, c1, BOOL[t.string])))
        if t.type == tokenize.NUMBER and t.string.isdigit():
            out.append(("wrong_constant", at(c0, c1, str(int(t.string) + 1))))
        if t.type == tokenize.NAME and i + 1 < len(toks) and toks[i + 1].string == "(":
            j = closing(toks, i + 1)
            if j is None:
                continue
            if t.string == "range":
                e = toks[j].start[1]
                out.append(("off_by_one", at(e, e, " + 1")))
            if t.string == "len":
                e = toks[j].end[1]
                out.append(("off_by_one", at(e, e, " - 1")))
            # two simple arguments: swap them
            depth, commas = 0, []
            for k in range(i + 2, j):
                s = toks[k].string
                depth += s in "([{"
                depth -= s in ")]}"
                if s == "," and depth == 0:
                    commas.append(k)
            if len(commas) == 1 and t.string not in ("range", "print"):
                a = body[toks[i + 2].start[1]:toks[commas[0]].start[1]].strip()
                b = body[toks[commas[0]].end[1]:toks[j].start[1]].strip()
                if a and b and a != b:
                    out.append(("swapped_args", at(toks[i + 2].start[1], toks[j].start[1], b + ", " + a)))
        if t.type == tokenize.NAME and t.string == "not" and i + 1 < len(toks) and toks[i + 1].string != "in":
            out.append(("dropped_condition", at(c0, toks[i + 1].start[1], "")))
    if body.startswith(("if ", "elif ", "while ", "return ")) and body.endswith((":",)) or body.startswith("return "):
        depth = 0
        for i, t in enumerate(toks):
            depth += t.string in "([{"
            depth -= t.string in ")]}"
            if depth == 0 and t.string in BOOL:
                end = len(body) - 1 if body.endswith(":") else len(body)
                out.append(("dropped_condition", at(t.start[1] - 1, end, "")))
                break
    seen, uniq = set(), []
    for kind, m in out:
        if m != line and m not in seen:
            seen.add(m)
            uniq.append((kind, m))
    return uniq


def run_tests(workdir, module, timeout=10):
    """{test id: ok|FAIL|ERROR} of `python3 -m unittest -v test_MODULE` in workdir, and the log."""
    try:
        p = subprocess.run([sys.executable, "-S", "-m", "unittest", "-v", "test_" + module], cwd=workdir,
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, ""
    return {m.group(2): m.group(3) for m in RESULT.finditer(p.stderr)}, p.stderr


def failure_message(log, test_id):
    """The last line of the failure report of test_id (e.g. 'AssertionError: 12 != 4')."""
    name = test_id.rsplit(".", 1)[1]
    m = re.search(r"^(?:FAIL|ERROR): %s \(%s\)\n-+\n(.*?)(?=\n\n|\n=+\n|\n-+\n|\Z)" % (name, re.escape(test_id)), log, re.S | re.M)
    if not m:
        return ""
    lines = [l for l in m.group(1).splitlines() if l.strip()]
    return lines[-1].strip() if lines else ""


def assertions(lib, module, test_name):
    """The first argument of each self.assertEqual in test_name, as source."""
    src = open(os.path.join(lib, "test_%s.py" % module)).read()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.FunctionDef) and node.name == test_name:
            return [ast.get_source_segment(src, c.value.args[0]) for c in node.body
                    if isinstance(c, ast.Expr) and isinstance(c.value, ast.Call) and c.value.func.attr == "assertEqual"]
    return []


def sh(workdir, cmd):
    """Status and output of cmd run in workdir, as if workdir were the
    sandbox's /workspace (tracebacks name files by absolute path)."""
    p = subprocess.run(["bash", "-c", cmd], cwd=workdir, capture_output=True, timeout=20)
    return p.returncode, (p.stdout + p.stderr).decode("utf-8", "replace").replace(os.path.realpath(workdir), "/workspace")


@functools.lru_cache(maxsize=None)
def sh_cached(workdir, cmd):
    """sh on a directory nothing changes (the unmutated library)."""
    return sh(workdir, cmd)


def sed_escape(s, replacement=False):
    if "|" in s or "'" in s or "\n" in s:
        return None
    special = "\\&" if replacement else "\\.*[]^$"
    return "".join("\\" + c if c in special else c for c in s)


def fragment(orig, mut):
    """(old, new): the smallest span of mut, widened to whole words and until
    unique in the line, that differs from orig, and what it was."""
    p = 0
    while p < min(len(orig), len(mut)) and orig[p] == mut[p]:
        p += 1
    s = 0
    while s < min(len(orig), len(mut)) - p and orig[-1 - s] == mut[-1 - s]:
        s += 1
    a, b = p, len(mut) - s  # mut[a:b] replaces orig[a:len(orig)-s]
    word = lambda c: c.isalnum() or c == "_"
    while a > 0 and word(mut[a - 1]):
        a -= 1
    while b < len(mut) and word(mut[b]):
        b += 1
    while True:
        old = mut[a:b]
        if old.strip() and mut.count(old) == 1 and not old.startswith(" ") and not old.endswith(" "):
            break
        if a == 0 and b == len(mut):
            break
        a, b = max(0, a - 1), min(len(mut), b + 1)
    tail = len(mut) - b
    return mut[a:b], orig[a:len(orig) - tail]


def enclosing_function(lines, idx):
    for i in range(idx, -1, -1):
        m = re.match(r"def (\w+)\(", lines[i])
        if m:
            return m.group(1)
    return None


SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
RESERVED = set(__import__("keyword").kwlist) | set(dir(__import__("builtins"))) | set(sys.stdlib_module_names)


def made_up(rng, length, taken):
    """A pronounceable made-up identifier of about `length` characters, not in taken."""
    while True:
        if length <= 1:
            w = rng.choice("abcdefghjkmnpqrstuvwxyz")
        else:
            w = "".join(rng.choice(SYLLABLES) for _ in range(max(1, min(4, (length + 1) // 2))))
            w = w[:max(2, length + rng.choice((-1, 0, 1)))]
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
    its functions, parameters and variables renamed to made-up identifiers
    (the same code under other names: demonstrations on it teach copying names
    from what the agent reads, not recalling them). Returns the new module's name."""
    src = open(os.path.join(LIB, mod + ".py")).read()
    test = open(os.path.join(LIB, "test_%s.py" % mod)).read()
    taken = {t.string for t in tokenize.generate_tokens(io.StringIO(src + "\n" + test).readline) if t.type == tokenize.NAME}
    mapping = {}
    for name in renamed_names(src):
        parts = [made_up(rng, len(p), taken) for p in name.split("_")]
        new = "_".join(parts)
        mapping[name] = new.upper() if name.isupper() else new
    new_mod = made_up(rng, 7, taken_modules)
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?", default=os.path.join(HERE, "work"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--val-modules", type=int, default=3)
    ap.add_argument("--per-module", type=int, default=12, help="tasks per val module (at most)")
    ap.add_argument("--train-per-module", type=int, default=6,
                    help="tasks per train module (at most; the module's other mutants are demonstrated)")
    ap.add_argument("--max-turns", type=int, default=8)
    ap.add_argument("--base", default=HERE, help="repo paths in the tasks are relative to this (controller.dir)")
    ap.add_argument("--candidates", type=int, default=0, help="mutants tried per module (a seeded sample; default 0: all)")
    ap.add_argument("--modules", default="", help="comma-separated subset of lib/'s modules (default: all)")
    ap.add_argument("--variants", type=int, default=0,
                    help="renamed copies of each train module whose mutants give more demonstrations (no tasks)")
    ap.add_argument("--variant-demos", type=int, default=0,
                    help="demonstrations per variant (a seeded sample of its mutants; default 0: all)")
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

    # The sources: (library dir, module, split, lib/'s module it is a copy of).
    scratch = tempfile.mkdtemp(prefix="swe-gen-")
    sources = [(LIB, mod, "val" if mod in val_mods else "train", mod) for mod in mods]

    def source_jobs(source):
        """Every mutant of a source, in source order. Its key (lib/'s module,
        line, rank among the line's mutants) is the same in a module and its
        renamed variants: renaming changes no mutant but its names."""
        lib, mod, _, origin = source
        lines = open(os.path.join(lib, mod + ".py")).read().split("\n")
        return [(lib, mod, idx, kind, new, (origin, idx, j)) for idx, line in enumerate(lines)
                for j, (kind, new) in enumerate(mutants(line))]

    def check(job):
        lib, mod, idx, kind, new, _ = job
        d = tempfile.mkdtemp(dir=scratch)
        shutil.copy(os.path.join(lib, "test_%s.py" % mod), d)
        lines = open(os.path.join(lib, mod + ".py")).read().split("\n")
        lines[idx] = new
        with open(os.path.join(d, mod + ".py"), "w") as f:
            f.write("\n".join(lines))
        res, log = run_tests(d, mod)
        shutil.rmtree(d)
        return res, log

    def caught_mutants(srcs, jobs):
        """{(lib, module): [(job, failed, passed, log)]}: the jobs some test caught."""
        with concurrent.futures.ThreadPoolExecutor(4) as ex:
            # a variant whose own tests do not all pass unmutated is dropped
            intact = list(ex.map(lambda s: run_tests(s[0], s[1])[0], srcs))
            results = list(ex.map(check, jobs))
        broken = {s[:2] for s, res in zip(srcs, intact) if not res or any(r != "ok" for r in res.values())}
        if any(s[2] != "variant" for s in srcs if s[:2] in broken):
            raise SystemExit("gen: lib/'s own tests fail: %s" % sorted(m for _, m in broken))
        caught = {s[:2]: [] for s in srcs if s[:2] not in broken}
        for job, (res, log) in zip(jobs, results):
            if not res or job[:2] in broken:  # hung, or the tests did not even load
                continue
            failed = sorted(t for t, r in res.items() if r in ("FAIL", "ERROR"))
            if failed and not any(t.startswith("unittest.") for t in res):
                caught[job[:2]].append((job, failed, sorted(t for t in res if t not in failed), log))
        return caught

    jobs = []
    for src in sources:
        mjobs = source_jobs(src)
        if a.candidates > 0:  # a seeded sample, in source order
            keep = list(range(len(mjobs)))
            random.Random("%d-candidates-%s" % (a.seed, src[1])).shuffle(keep)
            mjobs = [mjobs[i] for i in sorted(keep[:a.candidates])]
        jobs += mjobs
    caught = caught_mutants(sources, jobs)

    # The tasks: a seeded sample of each module's caught mutants. No
    # demonstration shows a task's mutation, in lib/ or in a variant: RL on
    # the train tasks must find fixes it was not shown.
    task_keys = set()
    for lib, mod, split, _ in sources:
        picked = list(range(len(caught[(lib, mod)])))
        random.Random("%d-%s" % (a.seed, mod)).shuffle(picked)
        k = a.per_module if split == "val" else a.train_per_module
        task_keys |= {caught[(lib, mod)][n][0][5] for n in picked[:k]}

    # Variants: renamed copies of the train modules (never of a val module),
    # each demonstrating --variant-demos of the module's other caught mutants
    # (a seeded sample; 0: all), so a made-up name is seen in few demonstrations.
    variants, vjobs = [], []
    taken_modules = set(modules())
    demo_keys = {mod: [c[0][5] for c in caught[(lib, mod)] if c[0][5] not in task_keys]
                 for lib, mod, split, _ in sources if split == "train"}
    for v in range(a.variants):
        for mod, keys in demo_keys.items():
            rng = random.Random("%d-variant-%d-%s" % (a.seed, v, mod))
            d = os.path.join(scratch, "variant-%d-%s" % (v, mod))
            src = (d, variant(mod, rng, taken_modules, d), "variant", mod)
            if a.variant_demos > 0:
                keys = rng.sample(keys, min(a.variant_demos, len(keys)))
            variants.append(src)
            vjobs += [j for j in source_jobs(src) if j[5] in keys]
    caught.update(caught_mutants(variants, vjobs))
    sources += [s for s in variants if s[:2] in caught]

    if os.path.isdir(os.path.join(out, "repos")):
        shutil.rmtree(os.path.join(out, "repos"))
    os.makedirs(os.path.join(out, "repos"))
    work = []  # (split, is a task, demonstrated, make's arguments)
    for lib, mod, split, _ in sources:
        for n, (job, failed, passed, log) in enumerate(caught[(lib, mod)]):
            is_task = split != "variant" and job[5] in task_keys
            demo = split != "val" and job[5] not in task_keys
            if is_task or demo:
                work.append((split, is_task, demo, (out, a, lib, mod, n, job, failed, passed, log, is_task)))
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        made = list(ex.map(lambda w: make(*w[3]), work))
    shutil.rmtree(scratch)

    files = {name: open(os.path.join(out, name), "w") for name in ("train.jsonl", "val.jsonl", "sft.jsonl", "mutations.jsonl", "heldout.jsonl")}
    counts = {"train": 0, "val": 0, "sft": 0, "variant": 0,
              "dropped": len(jobs) - sum(len(caught[s[:2]]) for s in sources if s[2] != "variant")}
    for (split, is_task, demonstrated, _), m in zip(work, made):
        if m is None:
            continue
        task, demo, info = m
        if is_task:
            info["solution"] = demo  # the demonstration of its fix, in no sft.jsonl
            files[split + ".jsonl"].write(json.dumps(task) + "\n")
            files["mutations.jsonl"].write(json.dumps(info) + "\n")
            if split == "val" and demo is not None:
                files["heldout.jsonl"].write(json.dumps(demo) + "\n")
            counts[split] += 1
        if demonstrated and demo is not None:
            files["sft.jsonl"].write(json.dumps(demo) + "\n")
            counts["sft"] += 1
            counts["variant"] += split == "variant"
    for f in files.values():
        f.close()
    print("gen: %d train tasks (%d modules), %d val tasks (%d modules: %s), %d demonstrations (%d on %d renamed variants), "
          "%d mutants dropped (no test caught them)"
          % (counts["train"], len(mods) - len(val_mods), counts["val"], len(val_mods), ", ".join(sorted(val_mods)),
             counts["sft"], counts["variant"], sum(s[2] == "variant" for s in sources), counts["dropped"]))


def make(out, a, lib, mod, n, job, failed, passed, log, keep_repo):
    """The task, its demonstration and its mutation record, or None when no
    reproducing one-liner or sed fix can be written for it."""
    _, _, idx, kind, new, _ = job
    src = open(os.path.join(lib, mod + ".py")).read()
    lines = src.split("\n")
    orig = lines[idx]
    tid = "%s-%d" % (mod, n)
    first = failed[0]
    test_name = first.rsplit(".", 1)[1]
    msg = failure_message(log, first)

    work = tempfile.mkdtemp(prefix="swe-demo-")
    try:
        for f in os.listdir(lib):
            if f.endswith(".py"):
                shutil.copy(os.path.join(lib, f), work)
        mutated = lines[:idx] + [new] + lines[idx + 1:]
        with open(os.path.join(work, mod + ".py"), "w") as f:
            f.write("\n".join(mutated))
        # The assertion that fails, as a one-liner the agent can run (the tests are hidden).
        repro = want = None
        for expr in assertions(lib, mod, test_name):
            if "'" in expr:
                continue
            cmd = "python3 -c 'from %s import *; print(%s)'" % (mod, expr)
            mut_run, orig_run = sh(work, cmd), sh_cached(lib, cmd)
            if mut_run[1] != orig_run[1]:
                repro, want = cmd, orig_run[1].strip()
                break
        if repro is None:
            return None
        if keep_repo:
            shutil.copytree(work, os.path.join(out, "repos", tid), ignore=shutil.ignore_patterns("__pycache__"))
        old, fixed = fragment(orig, new)
        eo, en = sed_escape(old), sed_escape(fixed, True)
        statement = "%s fails in %s.py:\n%s\nReproduce: %s\nExpected output: %s" % (test_name, mod, msg, repro, want)
        task = {"id": tid, "repo": os.path.relpath(os.path.join(out, "repos", tid), a.base),
                "problem_statement": statement, "test_command": "python3 -m unittest -v {tests}",
                "test_format": "unittest", "fail_to_pass": failed, "pass_to_pass": passed,
                "hidden_files": ["test_%s.py" % mod], "max_turns": a.max_turns}
        info = {"id": tid, "file": mod + ".py", "line": idx + 1, "kind": kind, "original": orig, "mutated": new}
        demo = None
        func = enclosing_function(lines, idx)
        if eo is not None and en is not None and func:
            os.remove(os.path.join(work, "test_%s.py" % mod))  # as the agent sees it
            cmds = [repro, "awk '/def %s\\(/,/^$/ {print NR\": \"$0}' %s.py" % (func, mod),
                    "sed -i '%ds|%s|%s|' %s.py" % (idx + 1, eo, en, mod), repro]
            msgs = [{"role": "system", "content": harness.SYSTEM}, {"role": "user", "content": statement}]
            for i, cmd in enumerate(cmds):
                # the reproduction's runs before and after the fix are the ones made above
                status, output = mut_run if i == 0 else orig_run if i == 3 else sh(work, cmd)
                msgs.append({"role": "assistant", "content": harness.reply_text(cmd)})
                msgs.append({"role": "user", "content": harness.observation(status, output)})
            msgs.append({"role": "assistant", "content": harness.reply_text("submit")})
            if open(os.path.join(work, mod + ".py")).read() == src:  # the fix restores the module exactly
                demo = {"messages": msgs}
        return task, demo, info
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
