#!/usr/bin/env python3
"""Random chat templates rendered by Python's jinja2 and by estream's interpreter: no template may
render differently. A template is generated from the subset estream implements (statements,
whitespace control, macros, namespaces, loops with filters and loop variables, every filter,
test and string method, literals with escapes and non-ASCII text, the chat variables), rendered
with two conversations in jinja2 set up as make_expected.py sets it up and by
build/tools/chat_render, and the results compared:

  identical   both rendered the same text
  refused     estream failed where jinja2 rendered (a construct estream refuses to guess at,
              such as printing a generator, whose Python text holds a memory address)
  both fail   both raised
  DIFFER      both rendered and the texts differ, or estream rendered where jinja2 raised

Exit status 1 if anything DIFFERs (the templates that did are kept and listed), else 0.

Usage: python3 differential.py CHAT_RENDER N [SEED]     (tools/chat-check.sh: 300 templates)
"""
import json
import os
import random
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_expected  # noqa: E402

R = random.Random()
STRS = ["''", "'a'", "'abc'", "' x y '", "'Héllo'", "'日本語'", "'😀'", "'a,b,,c'",
        "'<think>x</think>y'", "'\\n\\tz\\n'", "\"q'uote\"", "'UPPER lower'", "'ß'", "'12'",
        "'  '", "'a\\\\b'", "'x.y.z'", "'\\u00e9'", "'they-are(here)'"]
FLOATS = ["0.5", "1.0", "1e16", "2.5e-5", "3.14159", "1e-4", "123456.789", "0.1", "2.0",
          "1e300", "7.25"]
FILTERS = [
    ("trim", ["", "('x')"]), ("length", [""]), ("count", [""]), ("upper", [""]),
    ("lower", [""]), ("title", [""]), ("capitalize", [""]),
    ("tojson", ["", "(indent=2)", "(sort_keys=true)", "(ensure_ascii=true)",
                "(separators=(',', ':'))", "(indent='-')"]),
    ("string", [""]), ("list", [""]), ("first", [""]), ("last", [""]),
    ("join", ["", "(', ')", "('-')"]), ("default", ["('d')", "('d', true)", ""]),
    ("replace", ["('a', 'b')", "('', '-')", "('l', 'L', 1)"]), ("int", ["", "(7)"]),
    ("float", [""]), ("abs", [""]), ("reverse", [""]), ("items", [""]),
    ("map", ["(attribute='role')", "('upper')", "('length')",
             "(attribute='content', default='x')"]),
    ("select", ["", "('odd')", "('string')"]), ("reject", ["", "('none')"]),
    ("selectattr", ["('role', 'equalto', 'user')", "('content')"]),
    ("rejectattr", ["('role', 'eq', 'system')"])]
TESTS = ["defined", "undefined", "none", "string", "number", "integer", "float", "mapping",
         "iterable", "sequence", "true", "false", "boolean", "odd", "even", "divisibleby 3",
         "eq 2", "ne 'a'", "gt 1", "lt 2", "in [1, 'a']", "lower", "upper", "callable",
         "sameas none"]
METHODS = ["strip()", "lstrip()", "rstrip('\\n')", "split()", "split(',')", "split(None, 1)",
           "rsplit(',', 1)", "replace('a', 'X')", "upper()", "lower()", "title()",
           "capitalize()", "startswith('a')", "endswith(('c', 'y'))", "find('b')", "rfind('b')",
           "count('a')", "join(['1', '2'])", "removeprefix('a')", "isdigit()", "isspace()",
           "islower()"]
OPS = ["+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", ">", "<=", ">=", "in", "not in",
       "and", "or", "**"]


def lit(d):
    c = R.randrange(9)
    if c == 0:
        return str(R.choice([0, 1, 2, 3, -1, 7, 42, 100, 255, -5]))
    if c == 1:
        return R.choice(FLOATS)
    if c == 4:
        return R.choice(["none", "true", "false", "True", "None"])
    if c == 5 and d < 3:
        return "[" + ", ".join(expr(d + 1) for _ in range(R.randrange(4))) + "]"
    if c == 6 and d < 3:
        return "{" + ", ".join(f"{R.choice(STRS)}: {expr(d + 1)}" for _ in range(R.randrange(3))) + "}"
    if c == 7 and d < 3:
        return "(" + ", ".join(expr(d + 1) for _ in range(R.randrange(1, 3))) + ",)"
    return R.choice(STRS)


def var(loop):
    opts = ["messages", "messages[0]", "messages[1].role", "messages[-1]['content']",
            "messages[0].content", "bos_token", "eos_token", "add_generation_prompt", "nope",
            "tools", "messages|length", "messages[5]", "ns.a", "ns.s", "messages[1:]",
            "messages[::-1]"]
    if loop:
        opts += ["m", "m.role", "m['content']", "loop.index", "loop.index0", "loop.first",
                 "loop.last", "loop.length", "loop.revindex", "loop.previtem", "loop.nextitem"]
    return R.choice(opts)


def flt():
    f, args = R.choice(FILTERS)
    return f + R.choice(args)


def expr(d=0, loop=False):
    if d > 3:
        return R.choice([lit(9), var(loop)])
    c = R.randrange(14)
    if c < 3:
        return lit(d)
    if c < 6:
        return var(loop)
    if c == 6:
        return f"{expr(d + 1, loop)} {R.choice(OPS)} {expr(d + 1, loop)}"
    if c == 7:
        return f"({expr(d + 1, loop)})|{flt()}"
    if c == 8:
        return f"{R.choice(['not ', '-', ''])}({expr(d + 1, loop)})"
    if c == 9:
        return f"({expr(d + 1, loop)}) is {R.choice(['', 'not '])}{R.choice(TESTS)}"
    if c == 10:
        return f"{R.choice(STRS + [var(loop)])}.{R.choice(METHODS)}"
    if c == 11:
        return f"({expr(d + 1, loop)} if {expr(d + 1, loop)} else {expr(d + 1, loop)})"
    if c == 12:
        seq = R.choice(STRS + ["[1, 2, 3, 4]", "messages"])
        return f"({seq})[{R.choice(['0', '-1', '1:', ':2', '::-1', '::2', '1:-1', '5'])}]"
    if c == 13 and R.random() < 0.6:
        return R.choice([f"mk({expr(d + 1, loop)})", f"mk({expr(d + 1, loop)}, {expr(d + 1, loop)})",
                         f"mk(b={expr(d + 1, loop)}, a={expr(d + 1, loop)})",
                         f"mv({expr(d + 1, loop)}, 1, 2, z=3)", "mr(3)", "mk()"])
    return f"{var(loop)}|{flt()}"


def ws():
    return R.choice(["", "", "", "\n", "  ", "\n  ", " \n", "\t", "\n\n"])


def tag(body):
    return (ws() + R.choice(["{%", "{%", "{%", "{%-", "{%+"]) + " " + body + " " +
            R.choice(["%}", "%}", "%}", "-%}", "+%}"]) + ws())


def out(loop):
    return (ws() + R.choice(["{{", "{{", "{{-"]) + " " + expr(0, loop) + " " +
            R.choice(["}}", "}}", "-}}"]) + ws())


def stmts(d, loop, n=None):
    res = []
    for _ in range(n or R.randrange(1, 4)):
        c = R.randrange(10)
        if c < 3 or d > 2:
            res.append(out(loop) if R.random() < 0.8 else R.choice(["text", "Hi\n", "  x  ", "\n"]))
        elif c == 3:
            res.append(tag(f"if {expr(1, loop)}") + stmts(d + 1, loop) +
                       (tag(f"elif {expr(1, loop)}") + stmts(d + 1, loop) if R.random() < 0.3 else "") +
                       (tag("else") + stmts(d + 1, loop) if R.random() < 0.5 else "") + tag("endif"))
        elif c == 4:
            it = R.choice(["messages", "messages[::-1]", "range(3)", "[1, 2]", "ns.s", "nope",
                           "messages|selectattr('role', 'equalto', 'user')"])
            cond = (" if " + expr(2, True)) if R.random() < 0.3 else ""
            res.append(tag("for m in " + it + cond) + stmts(d + 1, True) +
                       (tag("else") + stmts(d + 1, loop) if R.random() < 0.2 else "") + tag("endfor"))
        elif c == 5:
            res.append(tag(f"set x = {expr(1, loop)}") + "{{ x }}")
        elif c == 6:
            res.append(tag(f"set ns.{R.choice(['a', 's'])} = {expr(1, loop)}"))
        elif c == 7:
            res.append(tag("set b" + R.choice(["", " | trim", " | upper"])) + stmts(d + 1, loop) +
                       tag("endset") + "{{ b }}")
        elif c == 8 and loop:
            res.append(tag(R.choice(["break", "continue"])))
        else:
            res.append("{# c #}" + ws())
    return "".join(res)


def template():
    return ("{% set ns = namespace(a=1, s='xy') %}" + ws() +
            tag("macro mk(a, b=a|string ~ '!')") + stmts(1, False, 1) + "{{ a }}-{{ b }}" +
            tag("endmacro") + tag("macro mv(x)") + "{{ x }}{{ varargs }}{{ kwargs }}" +
            tag("set ns.a = 7") + tag("endmacro") +
            "{% macro mr(n) %}{% if n > 0 %}<{{ mr(n - 1) }}>{% endif %}{% endmacro %}" + ws() +
            stmts(0, False, R.randrange(1, 5)))


CONVERSATIONS = [
    ([("system", "You are helpful."), ("user", "Héllo 日本 😀 \"q\" \\ {{ x }}"),
      ("assistant", "<think>\nhm\n</think>\n\nHi!"), ("tool", "{\"a\": 1}"), ("user", "")], True),
    ([("system", "Be brief."), ("user", "Hi there"), ("assistant", "Hello!"), ("user", "  Bye\n")],
     False),
]


class Timeout(Exception):
    pass


def on_alarm(*_):
    raise Timeout()


def main():
    chat_render, n = sys.argv[1], int(sys.argv[2])
    R.seed(int(sys.argv[3]) if len(sys.argv) > 3 else 1)
    env = make_expected.environment()
    signal.signal(signal.SIGALRM, on_alarm)
    tmp = tempfile.mkdtemp(prefix="chat-differential-")
    files = []
    for i in range(n):
        path = os.path.join(tmp, f"t{i:04d}.jinja")
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(template())
        files.append(path)
    counts = {"identical": 0, "refused": 0, "both fail": 0, "DIFFER": 0, "jinja2 too slow": 0}
    differ = []
    for ci, (msgs, agp) in enumerate(CONVERSATIONS):
        messages = [{"role": r, "content": c} for r, c in msgs]
        conv = os.path.join(tmp, f"conversation{ci}.json")
        with open(conv, "w", encoding="utf-8") as f:
            json.dump({"messages": messages, "add_generation_prompt": agp}, f, ensure_ascii=False)
        ours = subprocess.run([chat_render, conv] + files, check=True, capture_output=True,
                              text=True, encoding="utf-8").stdout.splitlines()
        for path, line in zip(files, ours):
            c = json.loads(line)
            with open(path, encoding="utf-8") as f:
                src = f.read()
            signal.alarm(3)
            try:
                text, err = env.from_string(src).render(
                    messages=messages, tools=None, documents=None, add_generation_prompt=agp,
                    bos_token="<s>", eos_token="</s>"), None
            except Timeout:
                counts["jinja2 too slow"] += 1
                continue
            except Exception as e:  # whatever jinja2 raises
                text, err = None, f"{type(e).__name__}: {e}"
            finally:
                signal.alarm(0)
            if err is None and "text" in c:
                key = "identical" if c["text"] == text else "DIFFER"
            elif err is None:
                key = "refused"
            else:
                key = "both fail" if "error" in c else "DIFFER"
            counts[key] += 1
            if key == "DIFFER":
                differ.append(f"{path} (conversation {ci}): estream "
                              f"{c.get('text', c.get('error'))!r:.200} / jinja2 "
                              f"{text if err is None else err!r:.200}")
    print(f"differential: {n} random templates x {len(CONVERSATIONS)} conversations: " +
          ", ".join(f"{v} {k}" for k, v in counts.items()))
    if differ:
        print("\n".join(differ[:20]))
        print(f"(templates kept in {tmp})")
        return 1
    for p in files:
        os.remove(p)
    for ci in range(len(CONVERSATIONS)):
        os.remove(os.path.join(tmp, f"conversation{ci}.json"))
    os.rmdir(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
