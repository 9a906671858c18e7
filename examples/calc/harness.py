"""The calc agent: an ordinary OpenAI Chat Completions client with one tool
(`calculator`). Python 3 standard library only; it knows nothing of agl and
runs against any OpenAI-compatible server:

    OPENAI_BASE_URL=… OPENAI_API_KEY=… AGL_TASK='{"question":…,"answer":…}' python3 harness.py

Reward (written to AGL_REWARD_FILE when set, printed otherwise): 1 when the
final reply is the right number, 0.2 for a well-formed calculator call that
was not followed by the right number, else 0.
"""
import ast, json, operator, os, re, urllib.request

SYSTEM = "Use the calculator, then reply with the number."
TOOLS = [{"type": "function", "function": {
    "name": "calculator", "description": "evaluate arithmetic",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}]
OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.USub: operator.neg}


def calc(expr):
    def ev(n):
        if isinstance(n, ast.Constant) and isinstance(n.value, (int, float)):
            return n.value
        if isinstance(n, ast.BinOp) and type(n.op) in OPS:
            return OPS[type(n.op)](ev(n.left), ev(n.right))
        if isinstance(n, ast.UnaryOp) and type(n.op) in OPS:
            return OPS[type(n.op)](ev(n.operand))
        raise ValueError("unsupported expression")
    if len(expr) > 40:
        raise ValueError("expression too long")
    return ev(ast.parse(expr, mode="eval").body)


def chat(messages):
    body = {"model": os.environ.get("MODEL", "agl"), "messages": messages, "tools": TOOLS, "max_tokens": 96}
    req = urllib.request.Request(os.environ["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json",
                                          "Authorization": "Bearer " + os.environ.get("OPENAI_API_KEY", "")})
    return json.load(urllib.request.urlopen(req, timeout=120))["choices"][0]["message"]


def main():
    task = json.loads(os.environ["AGL_TASK"])
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task["question"]}]
    reward, used_tool = 0.0, False
    for _ in range(3):
        msg = chat(messages)
        calls = msg.get("tool_calls") or []
        messages.append({k: v for k, v in msg.items() if k in ("role", "content", "tool_calls")})
        if not calls:
            nums = re.findall(r"-?\d+", msg.get("content") or "")
            if nums and int(nums[-1]) == task["answer"]:
                reward = 1.0
            break
        for c in calls:
            try:
                args = json.loads(c["function"]["arguments"])
                result = str(calc(str(args["expression"])))
                used_tool = True
            except Exception as e:  # the model's call was malformed
                result = "error: " + str(e)[:40]
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": result})
    if reward == 0 and used_tool:
        reward = 0.2
    out = os.environ.get("AGL_REWARD_FILE")
    if out:
        with open(out, "w") as f:
            f.write(str(reward))
    else:
        print(reward)


if __name__ == "__main__":
    main()
