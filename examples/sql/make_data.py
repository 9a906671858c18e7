"""Text-to-SQL tasks for agl's multi-agent example: a small SQLite shop
database (customers, products, orders; seeded rows), questions from eight
templates with their gold queries, and SFT demonstrations for the three
agents of harness.py (writer, checker, rewriter), with exactly the prompts
harness.py sends.

Seeded and deterministic. Templates come in pairs that ask about the same
kind of value (a city, a category, a customer, a product); for each value
one of its two questions, picked at random, is held out: validation
questions are questions no training task or demonstration asks, about
values the training data names in the other template.

A share of the demonstration rounds (--made-up, default half) asks about
made-up values (names, cities, categories, products that are not in the
database and that no task names), so that the warm start learns to copy
the value from the question into the query, as a pretrained base model
would, instead of memorising one query per training question; only the
writer and the rewriter get those rounds (the checker's verdict depends on
the database's rows).

The demonstrations are a habit to improve on, as a base model would have
one: the writer mostly (80%, --writer-ok) uses the singular table name
("customer" for "customers") or skips the join a question needs; the
rewriter, shown the failing query and its error, fixes it only 30% of
the time (--rewriter-ok); the checker
(kept frozen in training) says WRONG on an error or an empty result, else
OK.

usage: python3 make_data.py OUTDIR [--sft N] [--writer-ok F] [--rewriter-ok F] [--made-up F]
writes OUTDIR/shop.db, train.jsonl, val.jsonl, sft.jsonl
"""
import argparse, json, os, random, sqlite3

# The schema is customers(id, name, city), products(id, name, category,
# price), orders(id, customer_id, product_id, qty). The prompts leave it
# out: the example's model is trained from scratch on this one database
# (short prompts train fast on a laptop); with a pretrained model, put the
# schema in WRITER and REWRITER.
WRITER = "Write the SQLite query."
CHECKER = "Reply OK or WRONG."
REWRITER = "Fix the SQLite query."

CITIES = ["Oslo", "Lima", "Pune", "Kyiv", "Doha", "Nice", "Bern", "Riga", "Baku"]
CATEGORIES = ["tools", "toys", "books", "games", "food", "music"]
FIRST = ["Ana", "Bo", "Cy", "Dee", "Eli", "Fay", "Gus", "Hal", "Ivy", "Jo", "Kai", "Lou", "Mo", "Ned", "Oli",
         "Pia", "Quin", "Rae", "Sam", "Tia", "Uma", "Vic", "Wes", "Xia", "Yan", "Zoe", "Abe", "Bea", "Cal", "Dot"]
PRODUCTS = ["hammer", "kite", "atlas", "chess", "honey", "drum", "saw", "yoyo", "novel", "dice", "jam", "flute",
            "drill", "robot", "poem", "cards", "tea", "harp", "wrench", "puzzle", "comic", "domino", "rice", "bell"]


def build_db(path):
    if os.path.exists(path):
        os.remove(path)
    r = random.Random(1)
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, city TEXT);
        CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT, category TEXT, price INTEGER);
        CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, product_id INTEGER, qty INTEGER);""")
    for i, n in enumerate(FIRST, 1):
        db.execute("INSERT INTO customers VALUES (?, ?, ?)", (i, n, CITIES[r.randrange(len(CITIES))]))
    for i, p in enumerate(PRODUCTS, 1):
        db.execute("INSERT INTO products VALUES (?, ?, ?, ?)", (i, p, CATEGORIES[i % len(CATEGORIES)], r.randint(3, 64)))
    # Every customer and every product has orders (no empty answers).
    for i in range(1, 121):
        c = i if i <= len(FIRST) else r.randint(1, len(FIRST))
        p = (i - 1) % len(PRODUCTS) + 1 if i <= 2 * len(PRODUCTS) else r.randint(1, len(PRODUCTS))
        db.execute("INSERT INTO orders VALUES (?, ?, ?, ?)", (i, c, p, r.randint(1, 5)))
    db.commit()
    db.close()


# Templates: (name, slot values, question, gold SQL, the writer's habitual
# mistake). Templates 2k and 2k+1 share their slot values. A question
# quotes its value as the query does ('Oslo'), so both hold the same
# tokens (the BPE's pre-tokenizer splits " Oslo" and " 'Oslo'" into
# different pieces): the model copies the value rather than translating it.
TEMPLATES = [
    ("city-count", CITIES, "How many customers live in '{v}'?",
     "SELECT COUNT(*) FROM customers WHERE city = '{v}'",
     "SELECT COUNT(*) FROM customer WHERE city = '{v}'"),
    ("city-names", CITIES, "Who lives in '{v}'?",
     "SELECT name FROM customers WHERE city = '{v}'",
     "SELECT name FROM customer WHERE city = '{v}'"),
    ("category-names", CATEGORIES, "List the '{v}' products.",
     "SELECT name FROM products WHERE category = '{v}'",
     "SELECT name FROM product WHERE category = '{v}'"),
    ("category-count", CATEGORIES, "How many '{v}' products are there?",
     "SELECT COUNT(*) FROM products WHERE category = '{v}'",
     "SELECT COUNT(*) FROM product WHERE category = '{v}'"),
    ("customer-items", FIRST, "How many items did '{v}' order?",
     "SELECT SUM(qty) FROM orders JOIN customers ON customer_id = customers.id WHERE name = '{v}'",
     "SELECT SUM(qty) FROM orders WHERE name = '{v}'"),
    ("customer-city", FIRST, "Where does '{v}' live?",
     "SELECT city FROM customers WHERE name = '{v}'",
     "SELECT city FROM customer WHERE name = '{v}'"),
    ("product-orders", PRODUCTS, "How many orders are for '{v}'?",
     "SELECT COUNT(*) FROM orders JOIN products ON product_id = products.id WHERE name = '{v}'",
     "SELECT COUNT(*) FROM orders WHERE name = '{v}'"),
    ("product-price", PRODUCTS, "What does '{v}' cost?",
     "SELECT price FROM products WHERE name = '{v}'",
     "SELECT price FROM product WHERE name = '{v}'"),
]


def made_up(n, seed=5):
    """n made-up values per slot kind (the values list of a template, by
    identity), none of them a real value of any kind: capitalised like
    the real names and cities, lower case like categories and products."""
    r = random.Random(seed)
    real = set(CITIES) | set(CATEGORIES) | set(FIRST) | set(PRODUCTS)
    out = {}
    for kind in (CITIES, CATEGORIES, FIRST, PRODUCTS):
        vals = []
        while len(vals) < n:
            w = "".join(r.choice("bcdfghjklmnprstvwz") + r.choice("aeiou") for _ in range(r.randint(1, 3)))
            w = w[: r.randint(2, len(w))] if len(w) > 3 else w
            w = w.capitalize() if kind[0][0].isupper() else w
            if w not in real and w not in vals and len(w) >= 2:
                vals.append(w)
        real |= set(vals)
        out[id(kind)] = vals
    return out


def split_values():
    """(template index, value) pairs of train and of val: disjoint; each
    value is asked about in both, by different templates."""
    r = random.Random(2)
    train, val = [], []
    for ti in range(0, len(TEMPLATES), 2):
        for v in TEMPLATES[ti][1]:
            held = ti + r.randrange(2)
            val.append((held, v))
            train.append((2 * ti + 1 - held, v))
    return train, val


def task(ti, v):
    name, _, q, gold, _ = TEMPLATES[ti]
    return {"id": f"{name}-{v}", "question": q.format(v=v), "gold": gold.format(v=v)}


def run(db, sql):
    """The result text the harness shows the checker and the rewriter."""
    try:
        rows = db.execute(sql).fetchall()
    except sqlite3.Error as e:
        return "error: " + str(e)[:60]
    return json.dumps(rows)[:80]


def checker_user(q, sql, res):
    return f"Question: {q}\nQuery: {sql}\nResult: {res}"


def demos(db, pairs, n, writer_ok, rewriter_ok, made_up_share=0.0):
    r = random.Random(3)
    fake = made_up(200)
    for _ in range(n):
        ti, v = pairs[r.randrange(len(pairs))]
        made = r.random() < made_up_share
        if made:  # the same template, a value no task names
            vals = fake[id(TEMPLATES[ti][1])]
            v = vals[r.randrange(len(vals))]
        t = task(ti, v)
        bad = TEMPLATES[ti][4].format(v=v)
        wrote = t["gold"] if r.random() < writer_ok else bad
        yield {"messages": [{"role": "system", "content": WRITER}, {"role": "user", "content": t["question"]},
                            {"role": "assistant", "content": wrote}]}
        if not made:
            res = run(db, wrote)
            verdict = "WRONG" if res.startswith("error") or res == "[]" or res == "[[null]]" else "OK"
            yield {"messages": [{"role": "system", "content": CHECKER}, {"role": "user", "content": checker_user(t["question"], wrote, res)},
                                {"role": "assistant", "content": verdict}]}
        bres = run(db, bad)
        fixed = t["gold"] if r.random() < rewriter_ok else bad
        yield {"messages": [{"role": "system", "content": REWRITER}, {"role": "user", "content": checker_user(t["question"], bad, bres)},
                            {"role": "assistant", "content": fixed}]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--sft", type=int, default=1500, help="demonstration rounds (one per agent each)")
    ap.add_argument("--writer-ok", type=float, default=0.2, help="share of writer demonstrations with the gold query")
    ap.add_argument("--rewriter-ok", type=float, default=0.3, help="share of rewriter demonstrations that fix the query")
    ap.add_argument("--made-up", type=float, default=0.5, help="share of demonstration rounds about made-up values (writer and rewriter only)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    dbpath = os.path.join(a.out, "shop.db")
    build_db(dbpath)
    db = sqlite3.connect(dbpath)
    train, val = split_values()

    def write(name, rows):
        with open(os.path.join(a.out, name), "w") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")

    r = random.Random(4)
    r.shuffle(train)
    write("train.jsonl", (task(*p) for p in train))
    r.shuffle(val)
    write("val.jsonl", (task(*p) for p in val))
    write("sft.jsonl", demos(db, train, a.sft, a.writer_ok, a.rewriter_ok, a.made_up))


if __name__ == "__main__":
    main()
