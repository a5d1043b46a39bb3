#!/usr/bin/env python3
"""Renders every chat template of templates.json with every message list of messages.json, with
and without add_generation_prompt, in Python's jinja2 set up as Hugging Face's
apply_chat_template sets it up, and writes what it rendered (or the error it raised) to
expected/<template>.json; then renders the small templates of units.json (each with its own
variables; a unit with "file" instead of "template" renders that template file of this folder)
into expected/units.json. tests/test_chat.c holds estream's renderer to these files
byte for byte; tools/chat-check.sh re-runs this script so the committed files cannot drift.

The environment (transformers' chat_template_utils, 2025-2026):
  ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the loopcontrols
  extension and a {% generation %} tag that renders its body; tojson replaced by
  json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) with those
  four arguments open to the template; the globals raise_exception (raises TemplateError with
  the message) and strftime_now (with a fixed clock, NOW below). The render gets messages (dicts of role and content, in that
  order), tools=None, documents=None, add_generation_prompt, bos_token and eos_token.

Usage: python3 make_expected.py [OUT_DIR]    (default: expected/ beside this script)
Needs jinja2 (pinned in tools/chat-check.sh: jinja2==3.1.6, markupsafe==3.0.3).
"""
import json
import os
import sys
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment


class Generation(jinja2.ext.Extension):
    """{% generation %}...{% endgeneration %}: the body, as it renders outside mask tracking."""

    tags = {"generation"}

    def parse(self, parser):
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


# The clock strftime_now reads. transformers passes datetime.now(); here it is fixed, so that a
# template printing the date (gpt-oss's "Current date: ...") renders the same text whatever day
# this script and test_chat run. test_chat renders with the same moment (es_jinja_limits.now =
# 1754395200, TZ=UTC).
NOW = datetime(2025, 8, 5, 12, 0, 0)


def strftime_now(fmt):
    return NOW.strftime(fmt)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "expected")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(here, "templates.json"), encoding="utf-8") as f:
        templates = json.load(f)
    with open(os.path.join(here, "messages.json"), encoding="utf-8") as f:
        lists = json.load(f)
    env = environment()
    for t in templates:
        with open(os.path.join(here, t["file"]), encoding="utf-8", newline="") as f:
            tmpl = env.from_string(f.read())
        cases = []
        for ml in lists:
            messages = [{"role": m["role"], "content": m["content"]} for m in ml["messages"]]
            for agp in (False, True):
                case = {"messages": ml["name"], "add_generation_prompt": agp}
                try:
                    case["text"] = tmpl.render(messages=messages, tools=None, documents=None,
                                               add_generation_prompt=agp,
                                               bos_token=t["bos_token"],
                                               eos_token=t["eos_token"])
                except jinja2.exceptions.TemplateError as e:
                    case["error_type"] = type(e).__name__
                    case["error"] = str(e)
                cases.append(case)
        write(out_dir, t["name"], {"template": t["name"], "jinja2": jinja2.__version__,
                                   "cases": cases})
    with open(os.path.join(here, "units.json"), encoding="utf-8") as f:
        units = json.load(f)
    cases = []
    for u in units:
        case = {"name": u["name"]}
        if "template" in u:
            src = u["template"]
        else:  # a real template of this folder, with variables the message lists lack
            with open(os.path.join(here, u["file"]), encoding="utf-8", newline="") as f:
                src = f.read()
        try:
            case["text"] = env.from_string(src).render(**u.get("vars", {}))
        except Exception as e:  # what jinja2 raises, whatever its class: the C side must fail too
            case["error_type"] = type(e).__name__
            case["error"] = str(e)
        cases.append(case)
    write(out_dir, "units", {"jinja2": jinja2.__version__, "cases": cases})
    print(f"{len(templates)} templates x {len(lists)} message lists x 2 and {len(units)} unit "
          f"templates written to {out_dir}")


def write(out_dir, name, doc):
    with open(os.path.join(out_dir, name + ".json"), "w", encoding="utf-8", newline="\n") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
