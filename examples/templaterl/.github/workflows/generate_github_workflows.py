"""Render pr-test.yml.j2 into pr-test.yml, the workflow GitHub runs; `--check` fails when it is stale.

The template uses Jinja2 with ``<% %>`` / ``<< >>`` / ``<# #>`` delimiters so that GitHub's own
``${{ }}`` expressions pass through untouched.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jinja2

HERE = Path(__file__).resolve().parent
TEMPLATE, RENDERED = HERE / "pr-test.yml.j2", HERE / "pr-test.yml"
HEADER = "# Generated from pr-test.yml.j2 by generate_github_workflows.py; edit the template instead.\n"


def render() -> str:
    env = jinja2.Environment(
        block_start_string="<%", block_end_string="%>", variable_start_string="<<", variable_end_string=">>",
        comment_start_string="<#", comment_end_string="#>", keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    return HEADER + env.from_string(TEMPLATE.read_text()).render()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if pr-test.yml is not the rendered template")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not RENDERED.is_file() or RENDERED.read_text() != text:
            print(f"{RENDERED}: stale; run python {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    RENDERED.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
