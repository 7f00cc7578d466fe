#!/usr/bin/env python3
"""Render the chat templates under tests/data/chat_templates/ with Python jinja2 exactly as transformers'
apply_chat_template does, and write the expected outputs the C++ renderer is tested against.

    python3 tools/render_templates_reference.py           # rewrite tests/data/chat_templates/expected/*.json
    python3 tools/render_templates_reference.py --check   # exit 1 if the committed files are out of date

The environment copies transformers 5.24 (utils/chat_template_utils.py): ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks and loop controls, its tojson/raise_exception/strftime_now/dict/namespace, and the
message preprocessing of apply_chat_template (null fields dropped, reasoning fields aliased). Needs jinja2>=3.1.
"""
import argparse
import json
import sys
from datetime import datetime
from pathlib import Path

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "chat_templates"
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


class GenerationTag(jinja2.ext.Extension):
    """transformers' AssistantTracker: `{% generation %}...{% endgeneration %}` renders its body unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    class TemplateDict:
        def __call__(self, *args, **kwargs):
            return dict(*args, **kwargs)

        def fromkeys(self, *args, **kwargs):
            return dict.fromkeys(*args, **kwargs)

    class TemplateNamespace(jinja2.utils.Namespace):
        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check_name(name):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    f"Chat templates cannot store underscore-prefixed attributes on a namespace, but got {name!r}. "
                    "Please rename the attribute."
                )

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = TemplateDict()
    env.globals["namespace"] = TemplateNamespace
    return env


def normalize_messages(messages):
    """apply_chat_template's _normalize_chat_messages then _alias_reasoning_fields."""
    out = []
    for message in messages:
        message = {key: value for key, value in message.items() if value is not None}
        reasoning = next((message[key] for key in REASONING_FIELDS if message.get(key) is not None), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        out.append(message)
    return out


def outcome(render):
    try:
        return {"output": render()}
    except Exception as e:  # the C++ side must fail too; raise_exception's text must match
        return {"error": f"{type(e).__name__}: {e}"}


def render_conversations(env, template_source, cases):
    results = {}
    for case in cases:
        def render():
            template = env.from_string(template_source)
            return template.render(
                messages=normalize_messages(case["messages"]),
                tools=case.get("tools"),
                documents=None,
                add_generation_prompt=case.get("add_generation_prompt", False),
                **case.get("kwargs", {}),
            )

        results[case["name"]] = outcome(render)
    return results


def render_engine_cases(env, cases):
    results = {}
    for case in cases:
        results[case["name"]] = outcome(lambda: env.from_string(case["template"]).render(**case.get("context", {})))
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the expected files are out of date")
    args = parser.parse_args()

    env = make_environment()
    conversations = json.loads((DATA / "conversations.json").read_text(encoding="utf-8"))
    engine_cases = json.loads((DATA / "engine_cases.json").read_text(encoding="utf-8"))
    outputs = {}
    for path in sorted(DATA.glob("*.jinja")):
        outputs[path.stem] = {
            "template": path.name,
            "jinja2": jinja2.__version__,
            "cases": render_conversations(env, path.read_text(encoding="utf-8"), conversations),
        }
    outputs["engine"] = {"jinja2": jinja2.__version__, "cases": render_engine_cases(env, engine_cases)}

    stale = []
    for name, data in outputs.items():
        path = DATA / "expected" / f"{name}.json"
        text = json.dumps(data, ensure_ascii=False, indent=1) + "\n"
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        errors = sum("error" in r for r in data["cases"].values())
        print(f"{name}: {len(data['cases'])} cases, {errors} expected errors")
    if stale:
        print("out of date:", *stale, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
