"""``llm accounts demo`` (``scripts/demo``): what the product is for, on the local stand-in, with
no network and no real key.

It makes a throwaway llm user directory, starts the Messages API stand-in with three demo
accounts whose keys are random ``sk-ant-`` strings stored only in that directory (its llm key
store and, with ``--keep``, a stand-in configuration to serve them again, both 0600), then runs
real ``llm`` commands against it, printing each as a user would type it. The stand-in runs in
this process, so the demo can make one account answer a 429 when it needs to.
"""

import json
import os
import secrets
import shlex
import shutil
import sqlite3
import string
import subprocess
import sys
import tempfile

import click

from .money import usd_fine
from .paths import write_private_json

# name, key_env, monthly budget
DEMO_ACCOUNTS = (("alpha", "DEMO_ALPHA_KEY", "20.00"), ("beta", "DEMO_BETA_KEY", "30.00"), ("tiny", "DEMO_TINY_KEY", "0.30"))
DEMO_MODEL = "claude-routed/claude-haiku-4-5"
KEPT_PORT = 8765  # where --keep suggests serving the demo's keys again


def _demo_key():
    """Shaped like a real key, so the scrubbing rule treats it as one (docs/security.md)."""
    alphabet = string.ascii_letters + string.digits
    return "sk-ant-api03-demo" + "".join(secrets.choice(alphabet) for _ in range(80)) + "AA"


class Demo:
    def __init__(self, workdir, env):
        self.workdir, self.env = workdir, env
        self.llm = os.path.join(os.path.dirname(sys.executable), "llm")
        self.ledger = os.path.join(workdir, "ledger.db")

    def run(self, *args, stdin=None, show=True, expect_failure=False, output=None):
        """Run ``llm ARGS``, shown as typed; ``output`` replaces what is printed (a long JSON).

        It runs in the demo's own directory, so no .env of the caller's declares other accounts."""
        if show:
            click.secho("$ llm " + " ".join(shlex.quote(part) for part in args), fg="cyan", bold=True)
        completed = subprocess.run(
            [self.llm, *args], env=self.env, input=stdin, text=True, capture_output=True,
            stdin=None if stdin else subprocess.DEVNULL, cwd=self.workdir,
        )
        text = completed.stdout + completed.stderr
        if show:
            shown = output(completed.stdout) if output else text
            if shown.strip():
                click.echo(shown.rstrip("\n"))
            click.echo()
        if (completed.returncode != 0) != expect_failure:
            raise click.ClickException(f"demo step 'llm {args[0]}' exited {completed.returncode}")
        return completed.stdout

    def last_attempts(self, count):
        """The newest ``count`` attempts, oldest first: account, outcome, ceiling, cost."""
        db = sqlite3.connect(self.ledger)
        try:
            rows = db.execute(
                # What was reserved before sending, also where message_start later shrank the hold.
                "SELECT account, outcome, COALESCE(reserved_nusd, ceiling_nusd), cost_nusd FROM attempt "
                "ORDER BY created_at DESC, rowid DESC LIMIT ?",
                (count,),
            ).fetchall()
        finally:
            db.close()
        return rows[::-1]

    def note_attempt(self, explain=False):
        [(account, outcome, ceiling, cost)] = self.last_attempts(1)
        say(f"-> account {account}: reserved {usd_fine(ceiling)}, settled at {usd_fine(cost)} ({outcome}).")
        if explain:
            say(f"The reservation is the worst case: {DEMO_MODEL.split('/')[1]}'s whole 200,000-token window at its")
            say("input rate plus max_tokens of output. Once the answer starts, the hold shrinks to the")
            say("counted input plus max_tokens of output; the answer's usage then settles the real cost, so no")
            say("account can be overspent, however many prompts run at once.")
        return account


def say(text):
    click.secho("# " + text, fg="green")


def _routing(stdout):
    """The routing object of the newest ``llm logs --json`` entry."""
    try:
        [entry] = json.loads(stdout)
        response = entry.get("response_json")
        response = json.loads(response) if isinstance(response, str) else response
        return "(its response_json's routing object)\n" + json.dumps(response["routing"], indent=2)
    except (ValueError, KeyError, TypeError):
        return stdout


def llm_command():
    """``(command, note)``: how to type this llm where the demo was started. After the quick start
    llm is in .venv, not on PATH, so the commands the demo suggests name its path, and the note
    says how to put it on PATH; ``("llm", None)`` when PATH already finds this one."""
    mine = os.path.join(os.path.dirname(sys.executable), "llm")
    found = shutil.which("llm")
    if found and os.path.realpath(found) == os.path.realpath(mine):
        return "llm", None

    def shown(path):
        relative = os.path.relpath(path)
        return shlex.quote(path if relative.startswith("..") else relative)

    activate = os.path.join(os.path.dirname(mine), "activate")
    if os.path.exists(activate):
        note = f"llm is not on your PATH: type it as below, or first run: source {shown(activate)}"
    else:
        note = "llm is not on your PATH: type it as below"
    return shown(mine), note


def run_demo(keep=False, browse=False):
    from . import browse as browsing
    from .standin import StandIn

    if browse and not browsing.datasette_installed():
        # Said before the story, not after it (scripts/demo --browse installs it).
        raise click.ClickException(browsing.NOT_INSTALLED)
    llm_cmd, note = llm_command()

    workdir = tempfile.mkdtemp(prefix="llm-accounts-demo-")
    user_dir = os.path.join(workdir, "llm")
    os.makedirs(user_dir, mode=0o700)
    keys = {env_name: _demo_key() for _, env_name, _ in DEMO_ACCOUNTS}
    config = {
        "keys": [
            {"label": name, "key": keys[env_name], "organization": f"org-{name}", "behaviour": "ok"}
            for name, env_name, _ in DEMO_ACCOUNTS
        ]
    }
    env = {name: value for name, value in os.environ.items() if not name.startswith(("ANTHROPIC_", "LLM_ACCOUNTS_"))}
    env.pop("LLM_LOAD_PLUGINS", None)
    try:
        with StandIn(config) as standin:
            env.update(
                LLM_USER_PATH=user_dir,
                LLM_ACCOUNTS_BASE_URL=standin.base_url,
                LLM_ACCOUNTS_LEDGER=os.path.join(workdir, "ledger.db"),
            )
            demo = Demo(workdir, env)
            _story(demo, standin, keys, llm_cmd, note)
        if browse:
            say("The dashboard and the canned queries, in Datasette (Ctrl-C to stop):")
            click.secho("$ llm accounts browse --open", fg="cyan", bold=True)
            try:
                subprocess.run([demo.llm, "accounts", "browse", "--open"], env=env)
            except KeyboardInterrupt:
                pass
    finally:
        if keep:
            # The demo accounts name DEMO_*_KEY, which only a stand-in serving these keys accepts
            # (a plain 'llm accounts standin' makes keys of its own, and a 401 would block them).
            standin_config = os.path.join(workdir, "standin.json")
            write_private_json(standin_config, config)
            click.echo(
                f"\nKept {workdir}. To look around:\n"
                f"  export LLM_USER_PATH={shlex.quote(user_dir)} LLM_ACCOUNTS_LEDGER={shlex.quote(os.path.join(workdir, 'ledger.db'))}\n"
                f"  {llm_cmd} accounts status; {llm_cmd} logs -n 3; {llm_cmd} accounts browse --open\n"
                "To prompt the demo accounts again, serve their keys in another terminal, then point llm at it:\n"
                f"  {llm_cmd} accounts standin --port {KEPT_PORT} --config {shlex.quote(standin_config)}\n"
                f"  export LLM_ACCOUNTS_BASE_URL=http://127.0.0.1:{KEPT_PORT}\n"
                f"  {llm_cmd} -m {DEMO_MODEL} 'Hello again'"
            )
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def _story(demo, standin, keys, llm_cmd="llm", note=None):
    click.secho(
        "llm-accounts demo: a local stand-in of the Anthropic Messages API with three demo accounts\n"
        "and a throwaway llm user directory. Every command below is real; only the API is local.\n",
        bold=True,
    )
    say("Three accounts, each an Anthropic organization with its own monthly budget. Their keys were")
    say("stored with 'llm keys set DEMO_ALPHA_KEY' and so on (typed at the prompt, never on a command line).")
    for name, env_name, budget in DEMO_ACCOUNTS:
        demo.run("keys", "set", env_name, stdin=keys[env_name], show=False)
        demo.run("accounts", "add", name, "--key-env", env_name, "--budget", budget)
    demo.run("accounts", "list")

    say("A new conversation goes to the account furthest behind its budget pace.")
    demo.run("-m", DEMO_MODEL, "Suggest a name for a pelican-themed cafe")
    first = demo.note_attempt(explain=True)

    say("Continuing it with -c: a conversation stays on the account it was bound to.")
    demo.run("-c", "Now a tagline for it")
    demo.note_attempt()

    say("Another new conversation goes to the account now furthest behind its pace.")
    demo.run("-m", DEMO_MODEL, "--no-stream", "Three facts about herons")
    second = demo.note_attempt()
    if second == first:
        say("(the same account: its pace is still the furthest behind)")

    ladder = json.loads(demo.run("accounts", "ladder", "--model", DEMO_MODEL.split("/")[1], "--json", show=False))
    next_up = next(rung["account"] for rung in ladder if rung["position"] == 1)
    say(f"Now {next_up} answers its next request with a 429 (rate limited): nothing was billed, so a new")
    say("conversation moves on to the next account, and llm logs records both attempts.")
    standin.set_behaviour(next_up, "ok", script=["rate_limited"])
    demo.run("-m", DEMO_MODEL, "List five birds that can swim")
    demo.run("logs", "-n", "1", "--json", output=_routing)

    say("The tiny account's $0.30 budget is below this model's $0.36 ceiling at its default max_tokens")
    say("(32,000), so a conversation pinned to it is refused before anything is sent, in one line:")
    demo.run("-m", DEMO_MODEL, "-o", "account", "tiny", "Hello", expect_failure=True)
    say("A lower -o max_tokens lowers the ceiling until it fits:")
    demo.run("-m", DEMO_MODEL, "-o", "account", "tiny", "-o", "max_tokens", "1000", "Hello")
    demo.note_attempt()

    say("Where the money is: spent, open ceilings and what remains, per account.")
    demo.run("accounts", "status")
    demo.run("accounts", "attempts")

    say("What to try next:")
    if note:
        say(note)
    rows = (
        # The demo's ledger is deleted when it ends (unless --keep), so the dashboard is offered on
        # a demo run that keeps it open, never as 'browse', which would open the user's own ledger.
        ("accounts demo --browse", "this demo again, ending in its ledger's Datasette dashboard and canned queries"),
        ("accounts ladder --model MODEL", "the order new conversations try accounts, and why"),
        ("accounts prices", "every model's rates and the ceiling one attempt reserves"),
        ("accounts standin", "a local stand-in to point LLM_ACCOUNTS_BASE_URL at"),
        ("accounts add NAME --key-env VAR --budget USD", "your own accounts (docs/accounts.md: Declaring accounts)"),
    )
    width = max(len(f"{llm_cmd} {command}") for command, _ in rows)
    for command, what in rows:
        click.echo(f"  {llm_cmd} {command}".ljust(width + 2) + "    " + what)
