"""``llm accounts standin``, ``browse`` and ``demo``: the loopback stand-in, Datasette on the ledger,
and the demo (docs/standin.md, docs/datasette.md).
"""

import sys

import click

from .common import fail


@click.command()
@click.option("--port", type=click.IntRange(0, 65535), default=0, help="Port to listen on (0: any free port)")
@click.option(
    "config_path",
    "--config",
    type=click.Path(dir_okay=False),
    help="JSON file of keys and behaviours (default: the built-in demo configuration)",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Loopback address to listen on")
def standin(port, config_path, host):
    """Serve a local stand-in of the Anthropic Messages API for tests and demos.

    Real HTTP on loopback with the API's JSON and SSE bytes, usage with prompt-cache fields, and
    per-key behaviours (ok, rate_limited, overloaded, drop, echo_key, refusal, ...). Prints the
    base URL, then serves until Ctrl-C. A config names each key's label, organization and
    behaviour: {"keys": [{"label": "a", "key": "sk-ant-...", "behaviour": "ok"}]}

    Without --config it serves the built-in demo configuration: two keys, labels alpha and beta,
    behaviour ok, each a fresh random sk-ant- key that it stores in llm's key store as
    STANDIN_ALPHA_KEY and STANDIN_BETA_KEY (never printed) once it listens, ready for 'llm
    accounts add alpha --key-env STANDIN_ALPHA_KEY --budget 10.00' (a budget above the default
    model's $3.828 ceiling). A stand-in that cannot listen leaves the stored keys alone.

    Give keys the sk-ant- prefix of real keys: the scrubbing rule masks the first character of a
    key without it wherever it appears in a reply, which garbles text when the key begins with
    a common letter.

    \b
    Example:
        llm accounts standin --port 8765
        llm accounts add alpha --key-env STANDIN_ALPHA_KEY --budget 10.00
        LLM_ACCOUNTS_BASE_URL=http://127.0.0.1:8765 llm -m claude-routed "hi"
        llm accounts standin --port 8765 --config standin.json
    """
    import errno

    from ..errors import AccountsError
    from ..standin import ConfigError, StandIn, is_loopback, load_config, serve

    if not is_loopback(host):
        fail("--host: must be a loopback address (127.0.0.0/8, localhost or ::1)")
    demo = config_path is None
    if demo:
        from ..standin import demo_config

        config = demo_config()
    else:
        try:
            config = load_config(config_path)
        except ConfigError as error:
            fail(error)

    try:
        server = StandIn(config, host, port)
    except OSError as error:
        where = f"--port: {host}:{port}"
        if error.errno == errno.EADDRINUSE:
            kept = "; the stored demo keys were left as they are" if demo else ""
            fail(AccountsError(
                "declaration_invalid",
                f"{where} is already in use (another stand-in may be serving there: use its URL, or choose another "
                f"--port; 0 picks a free one){kept}",
            ))
        fail(AccountsError("declaration_invalid", f"{where}: cannot listen there ({error.strerror or 'address unavailable'})"))
    if demo:
        from ..standin.demo import description, store_demo_keys

        try:
            store_demo_keys(config)  # only now that the port is ours: a taken one changes nothing
        except ConfigError as error:
            server.stop()
            fail(error)
    click.echo(server.base_url)
    if demo:
        click.echo(description(server.base_url), err=True)
    click.echo("Messages API stand-in running; Ctrl-C to stop", err=True)
    serve(server)


@click.command()
@click.option("--port", type=click.IntRange(1, 65535), default=8001, show_default=True, help="Port to serve on, on 127.0.0.1")
@click.option("open_browser", "--open", is_flag=True, help="Open the dashboard in a web browser")
def browse(port, open_browser):
    """Browse the ledger in Datasette: spend dashboard and read-only queries.

    Starts 'datasette' on the ledger with this plugin's canned queries and the dashboard at
    /-/llm-accounts. No key reaches Datasette: its environment drops every declared key_env,
    ANTHROPIC_API_KEY, any variable named like a key, and any variable whose value looks like
    a key or holds part of a declared account's key.

    \b
    Example:
        llm accounts browse --open
        llm accounts browse --port 8002
    """
    from .. import browse as browsing
    from ..errors import AccountsError
    from ..paths import ledger_path

    if not browsing.datasette_installed():
        fail(browsing.NOT_INSTALLED)
    try:
        status = browsing.browse(ledger_path(), port=port, open_browser=open_browser, echo=click.echo)
    except AccountsError as error:
        fail(error)
    sys.exit(status)


@click.command()
@click.option("--keep", is_flag=True, help="Keep the demo's llm user directory and ledger, and say how to explore them")
@click.option("--browse", is_flag=True, help="End by opening the demo ledger's dashboard in Datasette")
def demo(keep, browse):
    """Show what llm-accounts does, on three demo accounts and the local stand-in.

    Needs no network and no real key: the demo starts the Messages API stand-in on loopback,
    declares three accounts in a throwaway llm user directory and runs real llm commands:
    two conversations on two accounts, a continued conversation staying put, a 429 moving a
    new conversation, a budget refusal, the routing record in llm logs, and the status table.

    \b
    Example:
        llm accounts demo
        llm accounts demo --keep --browse
    """
    from ..demo import run_demo

    run_demo(keep=keep, browse=browse)


COMMANDS = (standin, browse, demo)
