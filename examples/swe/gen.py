"""Repository tasks over the small library in lib/: one wrong operator per task.

Each task's module has the operator of one line of a function body swapped
for its neighbour (< and <=, > and >=, == and !=, + and -) on a line that
has no other of these operators, and the module's hidden tests catch it
(FAIL_TO_PASS = the tests it breaks, PASS_TO_PASS = the module's other
tests). The problem statement names the first failing test and the line,
as a fault-localisation tool would:

    test_uncaesar fails. The bug is on line 15 of cipher.py.

The fix is to read the line, see its operator and write the one the tests
accept: `sed -n '15p' cipher.py` (`return caesar(s, 26 + k % 26)`), then
`sed -i '15s/+/-/' cipher.py`, then `submit`. Which operator is meant is
not in the statement or the line: the swap of the operator seen (< for
<=, + for -, ...) is what the tests accept, and that is what RL has to
learn from their verdicts.

The demonstrations teach the procedure, not the answer: a teacher that
knows which line is wrong but not what its operator should be. For every
operator site of lib/ off the validation lines (and of renamed copies of
every module, whose other names and shifted line numbers make the model
copy the line and file from what it reads), one demonstration per other
operator of the same kind (comparisons: < <= > >= == !=; arithmetic:
+ - *): look at the line, replace its operator, submit. They are not
checked against the tests; one in 5 (a comparison) or 2 (arithmetic) is
right.

Train and validation tasks are on disjoint lines (the validation lines
spread over the operators and the modules, each module keeping a line off
them); no demonstration is on a validation line, of lib/ or of a copy.
Seeded and deterministic: the same seed gives byte-identical files.

Writes, under OUT (default work/):
  repos/ID/        the task's repository snapshot (the whole library, one line mutated)
  train.jsonl      repository tasks (agl's task format: id, repo, problem_statement,
  val.jsonl        test_command, test_format, fail_to_pass, pass_to_pass, hidden_files, max_turns)
  sft.jsonl        demonstrations for `agl sft` (see above)
  mutations.jsonl  each task's mutation and its solution (the demonstration of the right
                   fix, in no sft.jsonl, never given to the harness)
  heldout.jsonl    the val tasks' solutions as conversations, for `agl sft --eval`:
                   how many of their replies the warm start writes exactly

usage: python3 gen.py [OUT] [--seed N] [--val N] [--sites K] [--max-turns T] [--modules a,b]
"""
import argparse, ast, concurrent.futures, io, json, keyword, os, random, re, shutil, subprocess, sys, tokenize

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402  (the observation format the demonstrations must match)

LIB = os.path.join(HERE, "lib")
RESULT = re.compile(r"^(test_\w+) \(([\w.]+)\) \.\.\. (ok|FAIL|ERROR|skipped.*)$", re.M)
SWAP = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "==", "+": "-", "-": "+"}
KINDS = [["<", "<=", ">", ">=", "==", "!="], ["+", "-", "*"]]


def modules():
    return sorted(f[:-3] for f in os.listdir(LIB) if f.endswith(".py") and not f.startswith("test_"))


def candidates(op):
    """The teacher's replacements of op: the other operators of its kind."""
    return [o for k in KINDS if op in k for o in k if o != op]


def sites(src):
    """(line index, mutated line, operator it shows, original operator) for
    every line of a function body with exactly one of SWAP's operators, whose
    swap `sed -i 'Ns/SHOWN/ORIGINAL/'` undoes."""
    lines = src.split("\n")
    ops = {}
    for t in tokenize.generate_tokens(io.StringIO(src).readline):
        if t.type == tokenize.OP and t.string in SWAP:
            ops.setdefault(t.start[0] - 1, []).append(t)
    out = []
    for row, ts in sorted(ops.items()):
        line = lines[row]
        if len(ts) != 1 or not line.startswith((" ", "\t")) or line.lstrip().startswith(("def ", "#", '"""')):
            continue
        t = ts[0]
        new = line[:t.start[1]] + SWAP[t.string] + line[t.end[1]:]
        if new.replace(SWAP[t.string], t.string, 1) == line:
            out.append((row, new, SWAP[t.string], t.string))
    return out


def run_tests(workdir, module, timeout=10):
    """{test id: ok|FAIL|ERROR} of `python3 -m unittest -v test_MODULE` in workdir."""
    try:
        p = subprocess.run([sys.executable, "-S", "-m", "unittest", "-v", "test_" + module], cwd=workdir,
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    return {m.group(2): m.group(3) for m in RESULT.finditer(p.stderr)}


def conversation(statement, file, line_no, shown_line, shown, fix):
    """The statement, then: look at the line, replace its operator, submit."""
    msgs = [{"role": "system", "content": harness.SYSTEM}, {"role": "user", "content": statement},
            {"role": "assistant", "content": harness.reply_text("sed -n '%dp' %s" % (line_no, file))},
            {"role": "user", "content": harness.observation(0, shown_line + "\n")},
            {"role": "assistant", "content": harness.reply_text("sed -i '%ds/%s/%s/' %s" % (line_no, shown, fix, file))},
            {"role": "user", "content": harness.observation(0, "")},
            {"role": "assistant", "content": harness.reply_text("submit")}]
    return {"messages": msgs}


def statement(test, file, line_no):
    return "%s fails. The bug is on line %d of %s." % (test, line_no, file)


def test_for(src, row, tests):
    """The test named for the function holding line row (a module's tests are
    test_FUNCTION), else the module's first test."""
    func = next((re.match(r"def (\w+)", l).group(1) for l in reversed(src.split("\n")[:row]) if l.startswith("def ")), "")
    return next((t for t in tests if t == "test_" + func), tests[0])


def test_names(test_src):
    return [n.name for n in ast.walk(ast.parse(test_src)) if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]


# Names for the renamed copies: words.txt, the 3287 lowercase identifiers
# of 3 to 10 letters used at least 3 times in CPython 3.11's standard library
# (Lib/, tests, idlelib and lib2to3 left out), none a keyword, builtin,
# standard module or name lib/ uses.
WORDS = open(os.path.join(HERE, "words.txt")).read().split()
RESERVED = set(keyword.kwlist) | set(dir(__import__("builtins"))) | set(sys.stdlib_module_names)


def renamed(src, test_src, rng):
    """src and its test names with the names the module defines (functions,
    parameters, variables; attributes and keyword arguments kept) replaced by
    others of WORDS, and 0-40 comment lines on top: the same code at other
    lines and under other names."""
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
    taken = {t.string for t in tokenize.generate_tokens(io.StringIO(src).readline) if t.type == tokenize.NAME} | RESERVED
    mapping = {}
    for name in sorted(n for n in names - kw if not n.startswith("__") and n != "self"):
        parts = []
        for _ in name.split("_"):
            w = rng.choice(WORDS)
            while w in taken:
                w = rng.choice(WORDS)
            taken.add(w)
            parts.append(w)
        mapping[name] = "_".join(parts).upper() if name.isupper() else "_".join(parts)
    lines = src.split("\n")
    edits, prev = [], None
    for t in tokenize.generate_tokens(io.StringIO(src).readline):
        if t.type == tokenize.NAME and t.string in mapping and prev != ".":
            edits.append((t.start[0] - 1, t.start[1], t.end[1], mapping[t.string]))
        if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
            prev = t.string
    for row, c0, c1, new in reversed(edits):
        lines[row] = lines[row][:c0] + new + lines[row][c1:]
    shift = rng.choice([0, rng.randint(1, 40)])  # lib/'s first lines are one digit: keep them, half the time
    head = ["# " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 8))) for _ in range(shift)]
    tests = [("test_" + mapping[n[5:]]) if n[5:] in mapping else n for n in test_names(test_src)]
    return "\n".join(head + lines), tests, len(head)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?", default=os.path.join(HERE, "work"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--val", type=int, default=30, help="validation tasks (spread over modules and operators)")
    ap.add_argument("--sites", type=int, default=150,
                    help="operator sites to demonstrate on per module (on as many renamed copies as that takes)")
    ap.add_argument("--max-turns", type=int, default=5)
    ap.add_argument("--base", default=HERE, help="repo paths in the tasks are relative to this (controller.dir)")
    ap.add_argument("--modules", default="", help="comma-separated subset of lib/'s modules (default: all)")
    a = ap.parse_args()
    out = os.path.abspath(a.out)
    mods = modules()
    if a.modules:
        unknown = sorted(set(a.modules.split(",")) - set(mods))
        if unknown:
            raise SystemExit("gen: unknown modules %s (lib/ has %s)" % (", ".join(unknown), ", ".join(mods)))
        mods = sorted(set(a.modules.split(",")))
    for mod in mods:
        if any(r != "ok" for r in (run_tests(LIB, mod) or {"": "hung"}).values()):
            raise SystemExit("gen: lib/'s own tests fail for %s" % mod)
    srcs = {m: open(os.path.join(LIB, m + ".py")).read() for m in mods}
    test_srcs = {m: open(os.path.join(LIB, "test_%s.py" % m)).read() for m in mods}
    tests = {m: test_names(test_srcs[m]) for m in mods}

    if os.path.isdir(os.path.join(out, "repos")):
        shutil.rmtree(os.path.join(out, "repos"))
    os.makedirs(os.path.join(out, "repos"))

    def task_of(job):
        """The task of one site, or None when the module's tests miss it."""
        mod, (row, new, shown, orig) = job
        tid = "%s-%d" % (mod, row + 1)
        work = os.path.join(out, "repos", tid)
        shutil.copytree(LIB, work, ignore=shutil.ignore_patterns("__pycache__"))
        lines = srcs[mod].split("\n")
        with open(os.path.join(work, mod + ".py"), "w") as f:
            f.write("\n".join(lines[:row] + [new] + lines[row + 1:]))
        res = run_tests(work, mod)
        failed = sorted(t for t, r in (res or {}).items() if r in ("FAIL", "ERROR"))
        if not failed:
            shutil.rmtree(work)
            return None
        file, first = mod + ".py", failed[0].rsplit(".", 1)[1]
        task = {"id": tid, "repo": os.path.relpath(work, a.base), "problem_statement": statement(first, file, row + 1),
                "test_command": "python3 -m unittest -v {tests}", "test_format": "unittest",
                "fail_to_pass": failed, "pass_to_pass": sorted(t for t in res if t not in failed),
                "hidden_files": ["test_%s.py" % mod], "max_turns": a.max_turns}
        solution = conversation(task["problem_statement"], file, row + 1, new, shown, orig)
        info = {"id": tid, "file": file, "line": row + 1, "shown": shown, "original_op": orig,
                "original": lines[row], "mutated": new, "solution": solution}
        return mod, row, shown, task, info

    lib_sites = {m: sites(srcs[m]) for m in mods}
    pool = concurrent.futures.ThreadPoolExecutor(4)
    found = [t for t in pool.map(task_of, [(m, s) for m in mods for s in lib_sites[m]]) if t]
    # Validation: a.val of the tasks, spread evenly over the operators shown
    # (and, shuffled by the seed within an operator, over the modules).
    rng = random.Random(a.seed)
    rng.shuffle(found)
    found.sort(key=lambda t: t[2])
    # Each module keeps a site off the validation lines, for demonstrations:
    # without them the model never writes the module's file name.
    n, k = len(found), min(a.val, len(found) * 3 // 5)
    left = {m: len(lib_sites[m]) for m in mods}
    val = []
    for i, t in enumerate(found):
        if (i + 1) * k // n > len(val) and left[t[0]] > 1:
            val.append(t)
            left[t[0]] -= 1
    for t in found:  # those a full module held back
        if len(val) < k and t not in val and left[t[0]] > 1:
            val.append(t)
            left[t[0]] -= 1
    val_lines = {(t[0], t[1]) for t in val}
    train = [t for t in found if (t[0], t[1]) not in val_lines]

    # Demonstrations: every other operator of its kind at every site of lib/
    # off the validation lines, and at a.sites sites of renamed copies of
    # each module (off the copies of the validation lines too).
    def demonstrate(mod, src, src_sites, tests, shift):
        """The demonstrations at src's sites src_sites (src is lib/'s mod
        shifted down shift lines) that are off the validation lines, and how
        many sites."""
        out, n = [], 0
        for row, new, shown, _ in src_sites:
            if row >= shift and (mod, row - shift) not in val_lines:
                st = statement(test_for(src, row, tests), mod + ".py", row + 1)
                out += [conversation(st, mod + ".py", row + 1, new, shown, c) for c in candidates(shown)]
                n += 1
        return out, n

    demos = []
    for mod in mods:
        demos += demonstrate(mod, srcs[mod], lib_sites[mod], tests[mod], 0)[0]
    for mod in mods:
        done, vi = 0, 0
        while done < a.sites and vi < 50 * a.sites:
            src, vtests, shift = renamed(srcs[mod], test_srcs[mod], random.Random("%d-variant-%d-%s" % (a.seed, vi, mod)))
            vi += 1
            more, n = demonstrate(mod, src, sites(src), vtests, shift)
            demos += more
            done += n
    random.Random(a.seed).shuffle(demos)

    files = {name: open(os.path.join(out, name), "w") for name in ("train.jsonl", "val.jsonl", "sft.jsonl", "mutations.jsonl", "heldout.jsonl")}
    for split, ts in (("train", train), ("val", val)):
        for _, _, _, task, info in sorted(ts, key=lambda t: t[3]["id"]):
            files[split + ".jsonl"].write(json.dumps(task) + "\n")
            files["mutations.jsonl"].write(json.dumps(info) + "\n")
            if split == "val":
                files["heldout.jsonl"].write(json.dumps(info["solution"]) + "\n")
    for d in demos:
        files["sft.jsonl"].write(json.dumps(d) + "\n")
    for f in files.values():
        f.close()
    print("gen: %d train tasks, %d val tasks (%d modules), %d demonstrations (%d operator sites a module)"
          % (len(train), len(val), len(mods), len(demos), a.sites))


if __name__ == "__main__":
    main()
