"""Calc-X-style tasks for agl: arithmetic word problems to be answered by
calling a `calculator` tool, then giving the final number.

Seeded and deterministic. Training tasks use seeds [0, N); validation tasks
use seeds [1_000_000, 1_000_000 + M): the two ranges never overlap. Also
writes SFT demonstrations in agl's conversation format, with exactly the
system prompt and tool that harness.py sends, on seeds disjoint from both:

  sft_tool.jsonl  every demonstration calls the calculator (seeds from
                  2_000_000): the skill, copying the numbers into the call
                  and the tool's result into the reply;
  sft_mix.jsonl   the habit (seeds from 3_000_000): like a base model that
                  knows the tool but reaches for it mostly on
                  multiplication, a share of each kind of question calls
                  the calculator (--times-tool-share of the "times" ones,
                  --tool-share of the others) and the rest state the answer
                  from memory ("The answer is N."). A tiny model cannot do
                  the arithmetic in its head, so after this mix it gets
                  little more than the multiplications right (low success);
                  RL has to find out that the calculator pays everywhere.

usage: python3 make_data.py OUTDIR [--train N] [--val M] [--sft-tool K] [--sft-mix K]
                                   [--tool-share F] [--times-tool-share F]
"""
import argparse, json, os, random

SYSTEM = "Use the calculator, then reply with the number."
TOOL = {"name": "calculator", "description": "evaluate arithmetic",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                       "required": ["expression"]}}
OPS = [("+", "plus"), ("-", "minus"), ("*", "times")]


def task(seed):
    r = random.Random(seed)
    a, b = r.randint(2, 99), r.randint(2, 99)
    op, word = OPS[r.randrange(len(OPS))]
    if op == "*":
        b = r.randint(2, 9)
    expr = f"{a}{op}{b}"
    return {"id": f"calc-{seed}", "question": f"What is {a} {word} {b}?",
            "expression": expr, "answer": eval(expr)}


def demo(t, use_tool):
    if not use_tool:  # answered from memory: right here, but a tiny model can't do it in its head
        return {"tools": [TOOL], "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": t["question"]},
            {"role": "assistant", "content": f"The answer is {t['answer']}."},
        ]}
    call = {"id": "call_0", "name": "calculator", "arguments": json.dumps({"expression": t["expression"]})}
    return {"tools": [TOOL], "messages": [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": t["question"]},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_0", "name": "calculator", "content": str(t["answer"])},
        {"role": "assistant", "content": str(t["answer"])},
    ]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--train", type=int, default=2000)
    ap.add_argument("--val", type=int, default=100)
    ap.add_argument("--sft-tool", type=int, default=3000, help="demonstrations that all use the calculator")
    ap.add_argument("--sft-mix", type=int, default=1000, help="demonstrations of the mixed habit")
    ap.add_argument("--tool-share", type=float, default=0.1,
                    help="share of the mixed plus/minus demonstrations that use the calculator; the rest answer from memory")
    ap.add_argument("--times-tool-share", type=float, default=0.7,
                    help="share of the mixed multiplication demonstrations that use the calculator")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)

    def write(name, rows):
        with open(os.path.join(a.out, name), "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")

    write("train.jsonl", (task(s) for s in range(a.train)))
    write("val.jsonl", (task(s) for s in range(1_000_000, 1_000_000 + a.val)))
    write("sft_tool.jsonl", (demo(task(s), True) for s in range(2_000_000, 2_000_000 + a.sft_tool)))
    pick = random.Random(7)

    def habit(t):
        share = a.times_tool_share if "*" in t["expression"] else a.tool_share
        return demo(t, pick.random() < share)
    write("sft_mix.jsonl", (habit(task(s)) for s in range(3_000_000, 3_000_000 + a.sft_mix)))


if __name__ == "__main__":
    main()
