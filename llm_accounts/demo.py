"""``llm accounts demo``: the whole product on the local stand-in, with no network and no real key.

It makes a throwaway llm user directory, starts the Messages API stand-in with two demo accounts
whose keys are random strings stored only in that directory's ``keys.json``, then runs real
``llm`` commands against it and prints each one with its output.
"""

import os
import secrets
import shlex
import string
import subprocess
import sys
import tempfile

import click

DEMO_ACCOUNTS = (("alpha", "DEMO_ALPHA_KEY", "20.00"), ("beta", "DEMO_BETA_KEY", "30.00"))
DEMO_MODEL = "claude-routed/claude-haiku-4-5"


def _demo_key():
    alphabet = string.ascii_letters + string.digits
    return "sk-ant-demo-" + "".join(secrets.choice(alphabet) for _ in range(40))


def _run(argv, env, stdin=None, show=True):
    if show:
        click.secho("$ " + " ".join(shlex.quote(part) for part in argv), fg="cyan", bold=True)
    completed = subprocess.run(argv, env=env, input=stdin, text=True, capture_output=True)
    output = completed.stdout + completed.stderr
    if show and output:
        click.echo(output.rstrip("\n"))
        click.echo()
    if completed.returncode != 0:
        raise click.ClickException(f"demo step failed with exit code {completed.returncode}")
    return completed.stdout


def _say(text):
    click.secho("# " + text, fg="green")


def run_demo(keep=False):
    from .standin import StandIn

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
    llm_bin = os.path.join(os.path.dirname(sys.executable), "llm")
    with StandIn(config) as standin:
        env = {
            name: value
            for name, value in os.environ.items()
            if not name.startswith(("ANTHROPIC_", "LLM_ACCOUNTS_"))
        }
        env.update(
            LLM_USER_PATH=user_dir,
            LLM_ACCOUNTS_BASE_URL=standin.base_url,
            LLM_ACCOUNTS_LEDGER=os.path.join(workdir, "ledger.db"),
        )
        click.secho(
            f"Demo: a local Messages API stand-in at {standin.base_url}, two demo accounts,\n"
            f"and a throwaway llm user directory at {user_dir}.\n",
            bold=True,
        )
        for name, env_name, budget in DEMO_ACCOUNTS:
            # The key goes to llm's own key store through stdin, never on a command line.
            _run([llm_bin, "keys", "set", env_name], env, stdin=keys[env_name], show=False)
            _run([llm_bin, "accounts", "add", name, "--key-env", env_name, "--budget", budget], env)
        _run([llm_bin, "accounts", "list"], env)
        _say("A new conversation: the ledger reserves a worst-case ceiling, then settles the real cost.")
        _run([llm_bin, "-m", DEMO_MODEL, "Suggest a name for a pelican-themed cafe"], env)
        _say("Continuing it with -c: a conversation stays on the account it was bound to.")
        _run([llm_bin, "-c", "Now a tagline for it"], env)
        _say("Another new conversation goes to the account furthest behind its budget pace.")
        _run([llm_bin, "-m", DEMO_MODEL, "--no-stream", "Three facts about herons"], env)
        _run([llm_bin, "accounts", "attempts"], env)
        _run([llm_bin, "accounts", "status"], env)
    if keep:
        click.echo(f"Kept {workdir}: set LLM_USER_PATH={user_dir} to explore it.")
    else:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
