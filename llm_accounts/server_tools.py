"""The server-side tools ``claude-routed`` offers, under llm-anthropic 0.30's names.

``llm -m claude-routed -T 'WebSearch(max_uses=3)' ...`` (or ``tools=[WebSearch(max_uses=3)]`` from
Python) asks the provider to search within the request, as it does with llm-anthropic. A raw
``llm.ServerSideTool({...})`` spec is accepted too. Whether a tool can be sent is the price
revision's decision (``tool_bounds``): a web search needs ``max_uses``, which bounds its fees, and
code execution has no per-request bound at all, so ``CodeExecution`` is offered only to be refused
with a line saying why, not with llm's "does not support" error.

The basic tool versions are sent on every model: the newer ones filter results by running code
execution inside the tool, which the price revision does not price (docs/pricing.md "Server tools").
"""

from typing import List, Optional

import click
import llm

from .pricing import tool_bounds


class ArgumentError(click.ClickException, ValueError):
    """A tool argument that breaks its rule: one ``declaration_invalid`` line from llm's CLI, which
    shows a ClickException and nothing else from ``-T``, and a ValueError from Python, as
    llm-anthropic raises. It names the argument and the rule, never the value (docs/errors.md)."""

    def __init__(self, tool, rule):
        super().__init__(f"declaration_invalid: {tool}: {rule}")


def _positive(tool, value, name):
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ArgumentError(tool, f"{name} must be a positive integer")


def _domains(tool, allowed, blocked):
    if allowed is not None and blocked is not None:
        raise ArgumentError(tool, "Cannot specify both allowed_domains and blocked_domains")
    for name, domains in (("allowed_domains", allowed), ("blocked_domains", blocked)):
        if domains is not None and not (
            isinstance(domains, list) and all(isinstance(domain, str) and domain for domain in domains)
        ):
            raise ArgumentError(tool, f"{name} must be a list of non-empty strings")


class WebSearch(llm.ServerSideTool):
    """Search the web with Anthropic's server-side web search ($10 per 1,000 searches on top of
    tokens). Routed, it needs max_uses, which bounds its price ceiling."""

    name = "web_search"

    def __init__(
        self,
        max_uses: Optional[int] = None,
        allowed_domains: Optional[List[str]] = None,
        blocked_domains: Optional[List[str]] = None,
        user_location: Optional[dict] = None,
    ):
        super().__init__()
        _positive("WebSearch", max_uses, "max_uses")
        _domains("WebSearch", allowed_domains, blocked_domains)
        if user_location is not None and not isinstance(user_location, dict):
            raise ArgumentError("WebSearch", "user_location must be a dictionary")
        self.max_uses = max_uses
        self.allowed_domains = allowed_domains
        self.blocked_domains = blocked_domains
        self.user_location = None if user_location is None else {"type": "approximate", **user_location}

    def tool_spec(self, model):
        spec = {"type": tool_bounds.BASIC_VERSION["web_search"], "name": "web_search"}
        for name in ("max_uses", "allowed_domains", "blocked_domains", "user_location"):
            if getattr(self, name) is not None:
                spec[name] = getattr(self, name)
        return spec


class WebFetch(llm.ServerSideTool):
    """Fetch a URL already in the conversation with Anthropic's server-side web fetch (no charge
    beyond the tokens of what it fetches)."""

    name = "web_fetch"

    def __init__(
        self,
        max_uses: Optional[int] = None,
        allowed_domains: Optional[List[str]] = None,
        blocked_domains: Optional[List[str]] = None,
        citations: bool = False,
        max_content_tokens: Optional[int] = None,
    ):
        super().__init__()
        _positive("WebFetch", max_uses, "max_uses")
        _positive("WebFetch", max_content_tokens, "max_content_tokens")
        _domains("WebFetch", allowed_domains, blocked_domains)
        if not isinstance(citations, bool):
            raise ArgumentError("WebFetch", "citations must be a boolean")
        self.max_uses = max_uses
        self.allowed_domains = allowed_domains
        self.blocked_domains = blocked_domains
        self.citations = citations
        self.max_content_tokens = max_content_tokens

    def tool_spec(self, model):
        spec = {"type": tool_bounds.BASIC_VERSION["web_fetch"], "name": "web_fetch"}
        for name in ("max_uses", "allowed_domains", "blocked_domains", "max_content_tokens"):
            if getattr(self, name) is not None:
                spec[name] = getattr(self, name)
        if self.citations:
            spec["citations"] = {"enabled": True}
        return spec


class CodeExecution(llm.ServerSideTool):
    """Anthropic's code execution: refused when routed, since container time has no per-request
    bound to price a ceiling from (docs/pricing.md "Server tools")."""

    name = "code_execution"

    def __init__(self, container: Optional[str] = None):
        super().__init__()
        self.container = container

    def tool_spec(self, model):
        return {"type": "code_execution_20250825", "name": "code_execution"}


OFFERED = (WebSearch, WebFetch, CodeExecution, llm.ServerSideTool)
