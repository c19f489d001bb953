"""``llm accounts count``: a prompt's input tokens counted on an account, which bills nothing
(docs/architecture.md "Token counting").
"""

import sys

import click

from .common import echo_json, fail


@click.command()
@click.argument("prompt", required=False)
@click.option("model_id", "-m", "--model", metavar="MODEL", help="A claude-routed model (default: claude-routed)")
@click.option("-s", "--system", help="System prompt")
@click.option(
    "attachments", "-a", "--attachment", multiple=True, metavar="ATTACHMENT",
    help="An attachment: a path, a URL or - for standard input (repeatable)",
)
@click.option("fragments", "-f", "--fragment", multiple=True, metavar="FRAGMENT", help="A fragment (alias, hash, file or URL) added to the prompt (repeatable)")
@click.option("system_fragments", "--sf", "--system-fragment", multiple=True, metavar="FRAGMENT", help="A fragment added to the system prompt (repeatable)")
@click.option("options", "-o", "--option", type=(str, str), multiple=True, metavar="NAME VALUE", help="A model option, as for llm prompt")
@click.option(
    "tools", "-T", "--tool", multiple=True, metavar="NAME",
    help="A registered tool or a server-side tool such as 'WebSearch(max_uses=3)' the request carries (repeatable)",
)
@click.option("python_tools", "--functions", multiple=True, metavar="CODE", help="Python code or a .py file defining tool functions")
@click.option("schema_input", "--schema", metavar="SCHEMA", help="A JSON schema, its concise form or a file, as for llm prompt")
@click.option("-c", "--continue", "continue_", is_flag=True, help="Count the next prompt of the most recent conversation")
@click.option("cid", "--cid", "--conversation", metavar="ID", help="Count the next prompt of this conversation")
@click.option("--account", metavar="NAME", help="Count on this account (the same as -o account NAME)")
@click.option("--client", metavar="LABEL", help="The client label of the caller (default: $LLM_ACCOUNTS_CLIENT)")
@click.option("json_", "--json", is_flag=True, help="Output JSON: the count and the account that made it")
def count(
    prompt, model_id, system, attachments, fragments, system_fragments, options, tools, python_tools, schema_input,
    continue_, cid, account, client, json_,
):
    """Count the input tokens a prompt would send, without sending it.

    Uses the provider's token counting endpoint (POST /v1/messages/count_tokens), which bills
    nothing: nothing is reserved and no attempt is recorded in the ledger. The request is the
    Messages request the prompt would make (system prompt, attachments, fragments, tools, schema,
    options),
    on one account you may use: the one --account names, else the first the ladder orders among
    accounts that are declared for the model, unblocked and healthy (budgets do not matter). Its
    key is resolved as for a prompt. A failed count changes no account's health.

    \b
    Example:
        llm accounts count -m claude-routed/claude-haiku-4-5 "Fun facts about pelicans"
        llm accounts count -s "Be brief" -a photo.jpg "Describe this" --json
        llm accounts count -f notes.md "Summarize these notes"
        llm accounts count -T 'WebSearch(max_uses=3)' "Latest pelican news"
        llm accounts count -c "And in French?"
    """
    from .. import counting
    from ..errors import AccountsError

    try:
        model, conversation = _count_model(model_id, continue_, cid)
        if not sys.stdin.isatty() and "-" not in attachments and "-" not in fragments:
            # Piped text comes first, then the argument, as llm prompt joins them.
            piped = sys.stdin.read()
            if piped:
                prompt = " ".join(filter(None, (piped, prompt)))
        extra = dict(options)
        if account:
            extra["account"] = account
        if client:
            extra["client"] = client
        resolved = [_attachment(value) for value in attachments]
        kwargs = {"system": system}
        if fragments or system_fragments:
            texts, loaded = _fragments(fragments)
            kwargs["fragments"], kwargs["system_fragments"] = texts, _fragments(system_fragments)[0]
            resolved += loaded
        kwargs["attachments"] = resolved or None
        if tools or python_tools:
            from llm.cli import _gather_tools

            # With the model, -T also finds its server-side tools (WebSearch, WebFetch), as llm prompt does.
            kwargs["tools"] = _gather_tools(list(tools), list(python_tools), model=model)
        if schema_input:
            kwargs["schema"] = _schema(schema_input)
        built = (conversation or model).prompt(prompt, **kwargs, **extra)
        counted = counting.count_sync(model, built.prompt)
    except AccountsError as error:
        fail(error)
    if json_:
        echo_json({"input_tokens": counted.tokens, "model": model.model_id, "account": counted.account})
    else:
        click.echo(counted.tokens)


def _count_model(model_id, continue_, cid):
    """The routed model ``count`` uses, and the conversation whose next prompt it counts."""
    import llm

    from ..errors import AccountsError
    from ..models import ROUTED_ID, RoutedClaude

    conversation = None
    if continue_ or cid:
        from llm.cli import load_conversation

        conversation = load_conversation(cid)
        if conversation is None:
            raise AccountsError("not_found", "no conversation to continue: run a prompt first, or give --cid ID")
        model_id = model_id or conversation.model.model_id
    try:
        model = llm.get_model(model_id or ROUTED_ID)
    except llm.UnknownModelError:
        model = None
    if not isinstance(model, RoutedClaude):
        # The id is not repeated: it is free text from the command line.
        raise AccountsError(
            "declaration_invalid",
            "--model: not a claude-routed model (see llm models); other models count with their own plugin, such as llm anthropic count",
        )
    if conversation is not None:
        conversation.model = model
    return model, conversation


def _attachment(value):
    from llm.cli import resolve_attachment

    from ..errors import AccountsError

    try:
        return resolve_attachment(value)
    except Exception:
        pass
    # The value is not repeated: it is free text from the command line.
    raise AccountsError("declaration_invalid", "-a: must be a file that exists, a URL or - (standard input), of a type llm recognizes")


def _fragments(values):
    """``(fragments, attachments)`` as llm prompt resolves ``-f`` (llm.cli.resolve_fragments)."""
    import sqlite_utils
    import llm
    from llm.cli import FragmentNotFound, logs_db_path, resolve_fragments

    from ..errors import AccountsError

    from llm.migrations import migrate

    db = sqlite_utils.Database(logs_db_path())
    migrate(db)  # aliases live in llm's logs database, as for llm prompt
    try:
        resolved = resolve_fragments(db, values, allow_attachments=True)
    except FragmentNotFound:
        resolved = None
    if resolved is None:
        # The fragment is not repeated: it is free text from the command line.
        raise AccountsError("declaration_invalid", "-f: a fragment was not found (give an alias, a hash, a file or a URL)")
    return (
        [item for item in resolved if not isinstance(item, llm.Attachment)],
        [item for item in resolved if isinstance(item, llm.Attachment)],
    )


def _schema(value):
    import sqlite_utils
    from llm.cli import load_template, logs_db_path
    from llm.utils import resolve_schema_input

    return resolve_schema_input(sqlite_utils.Database(logs_db_path()), value, load_template)


COMMANDS = (count,)
