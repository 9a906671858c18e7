"""The text-to-SQL agents: an ordinary multi-agent program on the OpenAI
Chat Completions API (Python 3 standard library only, sqlite3 included).
It knows nothing of agl beyond the per-agent base URLs and runs against
any OpenAI-compatible server:

    WRITER_BASE_URL=… CHECKER_BASE_URL=… REWRITER_BASE_URL=… OPENAI_API_KEY=… \
    SQL_DB=work/shop.db AGL_TASK='{"question":…,"gold":…}' python3 harness.py

Under agl each agent's base URL defaults to OPENAI_BASE_URL with the path
segment /agents/{agent}/ (…/r/{rollout}/{attempt}/agents/writer/v1), which
is how agl tells the agents apart.

The writer turns the question into a query; it runs on the database
(read-only); the checker sees the query and its result or error and says
OK or WRONG; on WRONG the rewriter fixes the query, which runs again, and
the checker looks again — at most ROUNDS (default 2) rewrites. Reward (to
AGL_REWARD_FILE when set, printed otherwise): 1 when the final query's
result set equals the gold query's, else 0.
"""
import json, os, sqlite3, time, urllib.error, urllib.request
from make_data import CHECKER, REWRITER, WRITER, checker_user

ROUNDS = int(os.environ.get("ROUNDS", "2"))


def base(agent):
    url = os.environ.get(agent.upper() + "_BASE_URL")
    if url:
        return url.rstrip("/")
    b = os.environ["OPENAI_BASE_URL"].rstrip("/")
    return b[: -len("/v1")] + "/agents/" + agent + "/v1"


def ask(agent, system, user, max_tokens):
    body = {"model": os.environ.get("MODEL", "agl"), "max_tokens": max_tokens,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}
    req = urllib.request.Request(base(agent) + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json",
                                          "Authorization": "Bearer " + os.environ.get("OPENAI_API_KEY", "")})
    for attempt in range(5):
        try:
            return (json.load(urllib.request.urlopen(req, timeout=120))["choices"][0]["message"]["content"] or "").strip()
        except urllib.error.HTTPError as e:
            if e.code != 503 or attempt == 4:  # 503: paused for a weight update
                raise
            time.sleep(1)


def execute(db, sql):
    """Rows (a sorted list) or an error text. The database is opened
    read-only; a query that runs too long is interrupted."""
    ticks = [0]

    def guard():
        ticks[0] += 1
        return 1 if ticks[0] > 10000 else 0
    db.set_progress_handler(guard, 1000)
    try:
        return sorted(db.execute(sql).fetchall(), key=repr), None
    except (sqlite3.Error, sqlite3.Warning, ValueError) as e:
        return None, "error: " + str(e)[:60]


def shown(rows, err):
    return err if err else json.dumps(rows)[:80]


def main():
    task = json.loads(os.environ["AGL_TASK"])
    db = sqlite3.connect("file:" + os.environ.get("SQL_DB", "work/shop.db") + "?mode=ro", uri=True)
    q = task["question"]
    sql = ask("writer", WRITER, q, 64)
    rows, err = execute(db, sql)
    for _ in range(ROUNDS):
        verdict = ask("checker", CHECKER, checker_user(q, sql, shown(rows, err)), 4)
        if verdict.upper().startswith("OK"):
            break
        sql = ask("rewriter", REWRITER, checker_user(q, sql, shown(rows, err)), 64)
        rows, err = execute(db, sql)
    gold, _ = execute(db, task["gold"])
    reward = 1.0 if err is None and rows == gold else 0.0
    out = os.environ.get("AGL_REWARD_FILE")
    if out:
        with open(out, "w") as f:
            f.write(str(reward))
    else:
        print(reward)


if __name__ == "__main__":
    main()
