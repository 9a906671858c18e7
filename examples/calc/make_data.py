"""Calc-X-style tasks for agl: arithmetic word problems to be answered by
calling a `calculator` tool, then giving the final number.

Seeded and deterministic. Training tasks use seeds [0, N); validation tasks
use seeds [1_000_000, 1_000_000 + M): the two ranges never overlap. Also
writes SFT demonstrations (on seeds [2_000_000, …), disjoint from both) in
agl's conversation format, with exactly the system prompt and tool that
harness.py sends. The demonstrations are mixed on purpose, like the habits of
a base model: a share of them calls the calculator, the rest state the answer
from memory ("The answer is N."). A tiny model imitating that mix mostly
guesses (low success); RL has to find out that the calculator pays.

usage: python3 make_data.py OUTDIR [--train N] [--val M] [--sft K] [--tool-share F]
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
    ap.add_argument("--sft", type=int, default=600)
    ap.add_argument("--tool-share", type=float, default=0.4,
                    help="share of demonstrations that use the calculator; the rest answer from memory")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "train.jsonl"), "w") as f:
        for s in range(a.train):
            f.write(json.dumps(task(s)) + "\n")
    with open(os.path.join(a.out, "val.jsonl"), "w") as f:
        for s in range(1_000_000, 1_000_000 + a.val):
            f.write(json.dumps(task(s)) + "\n")
    with open(os.path.join(a.out, "sft.jsonl"), "w") as f:
        pick = random.Random(7)
        for s in range(2_000_000, 2_000_000 + a.sft):
            f.write(json.dumps(demo(task(s), pick.random() < a.tool_share)) + "\n")


if __name__ == "__main__":
    main()
