"""Sphinx configuration for the llm-accounts manual (scripts/docs builds it into docs/_build/html).

The pages are Markdown read by MyST; each command's --help is inserted into commands.md by cog
(tests/test_docs.py checks it is current), and tests/test_docs.py builds the site with warnings as
errors, so a broken link or heading fails the suite."""

project = "llm-accounts"
author = "llm-accounts contributors"
extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", ".venv*"]
# Headings get anchors down to ####, so pages link to each other's sections by their slugs
# (`routing.md#budgets-and-the-ceiling`), as GitHub renders them.
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]
html_theme = "furo"
html_title = "llm-accounts"
html_static_path = []
# The pages are also read on GitHub, so code blocks keep the languages GitHub knows; "console"
# and unlabelled blocks are shown as they are.
highlight_language = "none"
# Some JSON examples elide with "..." on purpose; Pygments cannot lex them and shows them plain,
# which is what they are.
suppress_warnings = ["misc.highlighting_failure"]
